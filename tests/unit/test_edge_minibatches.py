"""Edge minibatches (issue 26), in process: DGL's ``(input_nodes, pair_graph, neg_pair_graph,
blocks)``, every train edge once per epoch, negatives deterministic, seed edges and their reverse
twins excluded from every block (a test that sees them leak without exclusion), bad jobs refused."""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path
from typing import Any

import dgl
import numpy as np
import pytest
import torch

from graphfeed.common.errors import InvalidArgument, NotFound
from graphfeed.common.partition import part_dir_name
from graphfeed.graph_store.partitions import LocalPartitionSet
from graphfeed.graph_store.store import GraphStore
from graphfeed.ingest.edge_split import split_edges
from graphfeed.ingest.graph import GraphData, hetero_graph
from graphfeed.ingest.partition import write_partitioned
from graphfeed.loader.core import Loader
from graphfeed.loader.edges import EdgeSeeds
from graphfeed.loader.job import JobSpec
from graphfeed.sampler.core import MultiHopSampler
from graphfeed.trainer.dataloader import EmbeddedDataLoader
from tests.graphs import arithmetic_features, arithmetic_graph

K = 3  # negatives per positive


def _open(g: GraphData, root: Path, parts: int = 2) -> Iterator[tuple[Loader, GraphData, np.ndarray]]:
    write_partitioned(g, root, parts, method="random", seed=0)
    stores = LocalPartitionSet([GraphStore.open(root / part_dir_name(p)) for p in range(parts)])
    loader = Loader(stores, MultiHopSampler(stores), cache_policy="none")
    try:
        yield loader, g, np.load(root / "orig_ids.npy")
    finally:
        loader.close()


@pytest.fixture(scope="module")
def homo(tmp_path_factory: pytest.TempPathFactory) -> Iterator[tuple[Loader, GraphData, np.ndarray]]:
    g = split_edges(arithmetic_graph(), "_E", (0.8, 0.1, 0.1), seed=5)
    yield from _open(g, tmp_path_factory.mktemp("edge-homo"))


@pytest.fixture(scope="module")
def typed(tmp_path_factory: pytest.TempPathFactory) -> Iterator[tuple[Loader, GraphData, np.ndarray]]:
    rng = np.random.default_rng(0)
    buys = (rng.integers(0, 30, 200), rng.integers(0, 40, 200))
    likes = (rng.integers(0, 40, 60), rng.integers(0, 40, 60))
    g = hetero_graph(
        "shop",
        {"user": 30, "item": 40},
        {("user", "buys", "item"): buys, ("item", "likes", "item"): likes},
        {"item": {"feat": np.arange(80, dtype=np.float32).reshape(40, 2)}},
        add_reverse=True,
    )
    yield from _open(split_edges(g, "buys", (0.7, 0.1, 0.2), seed=1), tmp_path_factory.mktemp("edge-typed"))


def _batches(loader: Loader, fanouts: Any = (-1, -1), **job: Any) -> list[tuple]:
    dl = EmbeddedDataLoader(loader, "train", fanouts=fanouts, batch_size=16, seed_edges=True, seed=3, **job)
    return list(dl)


def _rows_of(g: GraphData, orig: np.ndarray, pos: dgl.DGLGraph) -> set[tuple[int, int]]:
    nid = pos.ndata[dgl.NID].numpy()
    u, v = pos.edges()
    return set(zip(orig[nid[u.numpy()]].tolist(), orig[nid[v.numpy()]].tolist()))


def test_an_epoch_yields_every_train_edge_once_with_dgl_shapes(homo: tuple) -> None:
    loader, g, orig = homo
    batches = _batches(loader, num_negatives=K)
    seen: list[tuple[int, int]] = []
    for input_nodes, pos, neg, blocks in batches:
        assert isinstance(pos, dgl.DGLGraph) and isinstance(neg, dgl.DGLGraph)
        assert pos.num_nodes() == neg.num_nodes() == blocks[-1].num_dst_nodes()
        assert neg.num_edges() == K * pos.num_edges()
        np.testing.assert_array_equal(neg.edges()[0].numpy(), np.repeat(pos.edges()[0].numpy(), K))  # Uniform(k)
        seen += list(_rows_of(g, orig, pos))
        feats = blocks[0].srcdata["feat"].numpy()
        np.testing.assert_array_equal(feats, arithmetic_features(orig[input_nodes.numpy()]))
        assert "label" not in blocks[-1].dstdata
    train = g.edge_splits["train"]
    assert sorted(seen) == sorted(zip(train[:, 0].tolist(), train[:, 1].tolist()))


def test_negatives_and_blocks_replay_byte_for_byte(homo: tuple) -> None:
    loader = homo[0]
    a, b = _batches(loader, fanouts=(2, 2)), _batches(loader, fanouts=(2, 2))
    for (_, pa, na, ba), (_, pb, nb, bb) in zip(a, b, strict=True):
        for x, y in ((pa, pb), (na, nb), (ba[0], bb[0]), (ba[1], bb[1])):
            assert all(torch.equal(s, t) for s, t in zip(x.edges(), y.edges()))


def _leaks(batches: list[tuple], g: GraphData, orig: np.ndarray, twins: bool) -> int:
    """Seed edges (and with ``twins`` their reverse twins) present in the minibatch's blocks."""
    rows = {(u, v): (eid, rev) for u, v, _, eid, rev in g.edge_splits["train"].tolist()}
    leaks = 0
    for _, pos, _, blocks in batches:
        seeds = [rows[e] for e in _rows_of(g, orig, pos)]
        banned = {e for e, r in seeds} | ({r for _, r in seeds if r >= 0} if twins else set())
        for b in blocks:
            leaks += len(banned & set(b.edata[dgl.EID].tolist()))
    return leaks


def test_seed_edges_and_twins_never_reach_a_block(homo: tuple) -> None:
    loader, g, orig = homo
    assert _leaks(_batches(loader, exclude="reverse_id"), g, orig, twins=True) == 0
    assert _leaks(_batches(loader, exclude="self"), g, orig, twins=False) == 0
    # Without exclusion, all neighbors (-1) take the seed edges in: the check above can fail.
    assert _leaks(_batches(loader, exclude="none"), g, orig, twins=True) > 0


def test_negatives_can_avoid_known_positives(homo: tuple) -> None:
    loader, g, orig = homo
    known = {tuple(r) for s in g.edge_splits.values() for r in s[:, :2].tolist()}
    hits = 0
    for _, _, neg, _ in _batches(loader, num_negatives=8, negatives_avoid_positives=True):
        hits += len(_rows_of(g, orig, neg) & known)
    assert hits == 0


def test_typed_pair_graphs_carry_the_relation_over_typed_output_nodes(typed: tuple) -> None:
    loader, g, orig = typed
    relation = ("user", "buys", "item")
    starts = g.ntype_starts()
    train = g.edge_splits["train"]
    want = set(zip((train[:, 0] - starts[0]).tolist(), (train[:, 1] - starts[1]).tolist()))
    seen = set()
    batches = _batches(loader, fanouts=(-1, -1), num_negatives=2)
    schema = loader.partitions.info.types
    for _, pos, neg, blocks in batches:
        assert set(pos.canonical_etypes) == set(g.etypes)
        assert sum(pos.num_edges(e) for e in pos.canonical_etypes) == pos.num_edges(relation)
        for nt in ("user", "item"):
            assert pos.num_nodes(nt) == blocks[-1].num_dst_nodes(nt)
        u, v = pos.edges(etype=relation)
        # dgl.NID holds the schema's type-wise ids; orig_ids maps their gids to the input's type-wise ids
        nid = {nt: orig[schema.to_gids(nt, pos.nodes[nt].data[dgl.NID].numpy())] for nt in ("user", "item")}
        seen |= set(zip(nid["user"][u.numpy()].tolist(), nid["item"][v.numpy()].tolist()))
        assert neg.num_edges(relation) == 2 * pos.num_edges(relation)
    assert seen == want
    for _, pos, _, blocks in batches:  # twins (rev_buys) excluded too
        eids = pos.edges[relation].data[dgl.EID]
        assert not set(eids.tolist()) & set(blocks[-1].edges[relation].data[dgl.EID].tolist())


@pytest.mark.parametrize(
    ("job", "error", "match"),
    [
        ({"num_negatives": 0}, InvalidArgument, "num_negatives"),
        ({"exclude": "reverse"}, InvalidArgument, "exclude"),
        ({"negative_sampler": "popular"}, InvalidArgument, "negative_sampler"),
    ],
)
def test_bad_edge_jobs_are_refused(homo: tuple, job: dict, error: type, match: str) -> None:
    with pytest.raises(error, match=match):
        _batches(homo[0], **job)


def test_an_edge_split_of_two_relations_is_refused(typed: tuple) -> None:
    schema = typed[0].partitions.info.types
    rows = np.array([[0, 1, 0, 0, -1], [1, 2, 1, 1, -1]], dtype=np.int64)  # edge types 0 and 1
    job = JobSpec(fanouts=(2,), batch_size=2, seed_edges=True, split="train")
    with pytest.raises(InvalidArgument, match=r"mixes edge types \[0, 1\]"):
        EdgeSeeds(rows, schema, job, None)
    EdgeSeeds(rows[:1], schema, job, None)  # one relation is fine


def test_an_edge_job_needs_an_edge_split(parts: LocalPartitionSet) -> None:
    loader = Loader(parts, MultiHopSampler(parts), cache_policy="none")
    try:
        with pytest.raises(NotFound, match="--edge-split"):
            _batches(loader)
    finally:
        loader.close()


def test_skip_features_streams_the_same_blocks_without_features(homo: tuple) -> None:
    loader = homo[0]
    job: dict[str, Any] = {"fanouts": [-1], "batch_size": 32, "shuffle": False, "label_name": ""}
    full = list(EmbeddedDataLoader(loader, "*", **job))  # every node: all-node inference's split
    bare = list(EmbeddedDataLoader(loader, "*", skip_features=True, **job))
    assert len(full) == len(bare) == -(-loader.partitions.info.num_nodes // 32)
    for (fi, fo, fb), (bi, bo, bb) in zip(full, bare, strict=True):
        assert torch.equal(fi, bi) and torch.equal(fo, bo)
        assert all(torch.equal(x, y) for x, y in zip(fb[0].edges(), bb[0].edges()))
        assert "feat" in fb[0].srcdata and "feat" not in bb[0].srcdata
