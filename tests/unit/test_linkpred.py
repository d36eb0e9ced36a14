"""Link prediction's model, metrics and layer-wise inference (issue 26): metrics against answers
worked out by hand, scorers' shapes, layer-wise inference against the full-graph forward pass,
and the in-process DGL reference learning Cora."""

from __future__ import annotations

import math

import dgl
import numpy as np
import pytest
import torch

from graphfeed.ingest.edge_split import split_edges
from graphfeed.ingest.graph import hetero_graph
from graphfeed.ingest.sources import load_cora
from graphfeed.trainer.hetero_models import RGCN
from graphfeed.trainer.linkpred.baseline import exclude_with_reverse, train_linkpred_in_process
from graphfeed.trainer.linkpred.config import LinkPredConfig
from graphfeed.trainer.linkpred.inference import dgl_inference
from graphfeed.trainer.linkpred.metrics import eval_negatives, ranking_metrics, recall_ndcg_at_k
from graphfeed.trainer.linkpred.models import DotScorer, MLPScorer, bce_loss, margin_loss
from graphfeed.trainer.models import GraphSAGE


def test_ranking_counts_a_tie_as_half_a_place() -> None:
    # Edge 0 beats all 4 negatives: rank 1. Edge 1 ties two and loses to one: optimistic 1,
    # pessimistic 3, rank 3. Edge 2 loses to all 4: rank 5.
    pos = torch.tensor([5.0, 2.0, -1.0])
    neg = torch.tensor([[1.0, 2.0, 3.0, 4.0], [2.0, 2.0, 3.0, 0.0], [0.0, 0.0, 0.0, 0.0]])
    m = ranking_metrics(pos, neg, ks=(1, 3, 4))
    assert m["mrr"] == pytest.approx((1 + 1 / 3 + 1 / 5) / 3)
    assert m["hits@1"] == pytest.approx(1 / 3)
    assert m["hits@3"] == pytest.approx(2 / 3)
    assert m["hits@4"] == pytest.approx(2 / 3)


def test_ranking_of_perfect_worst_and_all_tied_scores() -> None:
    pos, k = torch.ones(4), 99
    assert ranking_metrics(pos, torch.zeros(4, k))["mrr"] == 1.0
    worst = ranking_metrics(pos, torch.full((4, k), 2.0), ks=(50, 100))
    assert worst["mrr"] == pytest.approx(1 / 100) and worst["hits@50"] == 0.0 and worst["hits@100"] == 1.0
    tied = ranking_metrics(pos, torch.ones(4, k), ks=(50,))
    assert tied["mrr"] == pytest.approx(1 / 50.5) and tied["hits@50"] == 0.0  # rank 50.5: not in the top 50


def test_eval_negatives_are_seeded_type_wise_ids() -> None:
    a = eval_negatives(7, 30, 100, seed=3)
    assert a.shape == (30, 100) and a.dtype == np.int64
    assert a.min() >= 0 and a.max() < 7
    assert np.array_equal(a, eval_negatives(7, 30, 100, seed=3))
    assert not np.array_equal(a, eval_negatives(7, 30, 100, seed=4))


def test_recall_and_ndcg_by_hand_with_known_items_masked() -> None:
    # Scores are user . item: user 0 ranks items 4 > 3 > 2 > 1 > 0, user 1 the reverse.
    items = torch.arange(5, dtype=torch.float32)[:, None]
    users = torch.tensor([[1.0], [-1.0], [0.0]])
    train = np.array([[0, 4], [1, 0]])  # masked: user 0's best item, user 1's best item
    test = np.array([[0, 3], [0, 0], [1, 2]])  # user 2 has no test item: not averaged
    m = recall_ndcg_at_k(users, items, train, test, k=2, users_per_batch=1)
    # user 0: top-2 without item 4 is [3, 2]: one of its two test items, at position 1.
    # recall 1/2; DCG 1, ideal DCG of 2 hits 1 + 1/log2(3).
    # user 1: top-2 without item 0 is [1, 2]: its one test item at position 2.
    # recall 1; DCG 1/log2(3), ideal 1.
    assert m["recall@2"] == pytest.approx((0.5 + 1.0) / 2)
    assert m["ndcg@2"] == pytest.approx((1 / (1 + 1 / math.log2(3)) + 1 / math.log2(3)) / 2)
    unmasked = recall_ndcg_at_k(users, items, np.empty((0, 2), np.int64), test, k=2)
    assert unmasked["recall@2"] == pytest.approx((0.5 + 0.0) / 2)  # user 0 gets [4, 3], user 1 [0, 1]
    assert recall_ndcg_at_k(users, items, train, test, k=2, users_per_batch=64) == pytest.approx(m)


def _pair_graphs() -> tuple[dgl.DGLGraph, dgl.DGLGraph, dict[str, torch.Tensor]]:
    homo = dgl.graph(([0, 1, 2], [1, 2, 3]), num_nodes=4)
    hetero = dgl.heterograph(
        {("user", "buys", "item"): ([0, 1], [2, 0]), ("item", "rev_buys", "user"): ([], [])},
        num_nodes_dict={"user": 2, "item": 3},
    )
    return homo, hetero, {"user": torch.randn(2, 8), "item": torch.randn(3, 8)}


@pytest.mark.parametrize("scorer", [DotScorer(), MLPScorer(8), MLPScorer(8, combine="cat")], ids=repr)
def test_scorers_score_each_edge_as_their_pairs(scorer: DotScorer | MLPScorer) -> None:
    homo, hetero, h = _pair_graphs()
    x = torch.randn(4, 8)
    scores = scorer(homo, x)
    assert scores.shape == (3,)
    u, v = homo.edges()
    torch.testing.assert_close(scores, scorer.pairs(x[u], x[v]))
    typed = scorer(hetero, h, ("user", "buys", "item"))
    torch.testing.assert_close(typed, scorer.pairs(h["user"][[0, 1]], h["item"][[2, 0]]))
    assert scorer.pairs(x[:2, None, :], x[None, :3]).shape == (2, 3)  # a row of candidates per pair


def test_losses_prefer_positives_above_negatives() -> None:
    pos, neg = torch.tensor([3.0, 2.0]), torch.tensor([0.0, 1.0, 2.5, -1.0])  # two negatives per positive
    # hinge 1 - pos + neg: 1-3+0, 1-3+1, 1-2+2.5, 1-2-1 -> 0, 0, 1.5, 0
    assert margin_loss(pos, neg) == pytest.approx(1.5 / 4)
    assert float(bce_loss(pos, neg)) < float(bce_loss(-pos, -neg))


def _full_blocks(dg: dgl.DGLGraph, layers: int) -> list:
    return [dgl.to_block(dg, {nt: torch.arange(dg.num_nodes(nt)) for nt in dg.ntypes})] * layers


def test_layerwise_inference_equals_the_full_graph_forward_pass() -> None:
    torch.manual_seed(0)
    src, dst = torch.randint(0, 300, (2, 2000))
    dg = dgl.graph((src, dst), num_nodes=300)
    dg.ndata["feat"] = torch.randn(300, 12)
    model = GraphSAGE(12, 16, 16, num_layers=3, dropout=0.5).eval()
    full = model(_full_blocks(dg, 3), dg.ndata["feat"])
    torch.testing.assert_close(dgl_inference(model, dg, batch_size=64), full, atol=1e-5, rtol=1e-5)


def test_layerwise_inference_of_an_rgcn_equals_its_full_graph_forward_pass() -> None:
    torch.manual_seed(0)
    n = {"user": 50, "item": 80, "tag": 30}
    edges = {
        ("user", "buys", "item"): (torch.randint(0, 50, (300,)), torch.randint(0, 80, (300,))),
        ("item", "rev_buys", "user"): (torch.randint(0, 80, (300,)), torch.randint(0, 50, (300,))),
        ("item", "has", "tag"): (torch.randint(0, 80, (100,)), torch.randint(0, 30, (100,))),
    }
    dg = dgl.heterograph(edges, num_nodes_dict=n)
    dg.nodes["item"].data["feat"] = torch.randn(80, 6)
    model = RGCN(dg.canonical_etypes, {"item": 6}, n, hidden=16, num_classes=16, num_layers=2, dropout=0.5).eval()
    blocks = _full_blocks(dg, 2)
    full = model(blocks, {"item": dg.nodes["item"].data["feat"]})
    got = dgl_inference(model, dg, batch_size=16)
    assert isinstance(got, dict) and set(got) == set(n)
    for nt in n:
        torch.testing.assert_close(got[nt], full[nt], atol=1e-5, rtol=1e-5)


def test_a_seed_edge_and_its_reverse_twin_leave_the_minibatch_graph() -> None:
    # user u buys items u and u + 1 (mod 6): 12 edges; add_reverse puts the twins in rev_buys,
    # in another order after the split removes the held-out ones.
    u = np.repeat(np.arange(6), 2)
    g = hetero_graph(
        "shop", {"user": 6, "item": 6}, {("user", "buys", "item"): (u, (u + np.tile([0, 1], 6)) % 6)}, add_reverse=True
    )
    g = split_edges(g, "buys", fractions=(0.5, 0.25, 0.25), seed=0)
    fwd, rev = ("user", "buys", "item"), ("item", "rev_buys", "user")
    r, estart = g.etypes.index(fwd), g.etype_starts()
    seeds = torch.from_numpy(g.edge_splits["train"][:2, 3] - estart[r])
    out = exclude_with_reverse(g, fwd)({fwd: seeds})
    assert isinstance(out, dict) and torch.equal(out[fwd], seeds)
    twins = out[rev].numpy() + estart[g.etypes.index(rev)]
    assert np.array_equal(g.src[twins], g.dst[seeds.numpy() + estart[r]])  # (v, u) of each (u, v)
    assert np.array_equal(g.dst[twins], g.src[seeds.numpy() + estart[r]])


@pytest.mark.slow
def test_the_dgl_reference_learns_cora_links_in_one_epoch() -> None:
    g = split_edges(load_cora(), "_E", seed=0)
    out = train_linkpred_in_process(g, LinkPredConfig(epochs=1, batch_size=256))
    # Ranked among 100 uniform negatives, a random scorer's MRR is about 0.05 (H_101 / 101).
    assert out["test"]["mrr"] > 0.1, out
    assert out["val"]["mrr"] > 0.1, out
    assert out["test"]["hits@10"] > 0.2, out
