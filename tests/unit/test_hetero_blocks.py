"""Typed DGL blocks from homogeneous sampled blocks (issue 24): exact against DGL's own
``to_block`` on the same frontiers, across partitions, and the RGCN on both kinds of blocks."""

from __future__ import annotations

import dgl
import numpy as np
import pytest
import torch

from graphfeed.common.blocks import Block, SampledBlocks
from graphfeed.common.errors import InvalidArgument
from graphfeed.common.schema import GraphSchema
from graphfeed.ingest.graph import hetero_graph
from graphfeed.trainer.hetero import hetero_dgl_blocks, split_by_ntype
from graphfeed.trainer.hetero_baseline import rgcn_epoch, to_dgl_heterograph, train_hetero_in_process
from graphfeed.trainer.hetero_models import RGCN, input_features, rgcn_optimizers

NUM_NODES = {"author": 30, "paper": 40, "venue": 5}
ETYPES = [
    ("author", "writes", "paper"),
    ("paper", "cites", "paper"),
    ("paper", "cites", "author"),  # the same relation name as above, other endpoints
    ("venue", "hosts", "paper"),  # no edges; no relation has venue as its dst
]


def _graph(seed: int = 0) -> dgl.DGLGraph:
    rng = np.random.default_rng(seed)
    edges = {}
    for s, rel, d in ETYPES:
        n = 0 if rel == "hosts" else 3 * NUM_NODES[d]
        edges[(s, rel, d)] = (
            torch.from_numpy(rng.integers(0, NUM_NODES[s], n)),
            torch.from_numpy(rng.integers(0, NUM_NODES[d], n)),
        )
    return dgl.heterograph(edges, num_nodes_dict=NUM_NODES)


def _schema(dg: dgl.DGLGraph) -> GraphSchema:
    """graphfeed's one-partition homogenization of ``dg``: type-major nodes and edges, in DGL's type order."""
    counts = [dg.num_nodes(nt) for nt in dg.ntypes]
    ecounts = [dg.num_edges(e) for e in dg.canonical_etypes]
    return GraphSchema(
        tuple(dg.ntypes),
        tuple(dg.canonical_etypes),
        np.array([np.concatenate([[0], np.cumsum(counts)])]),
        np.concatenate([[0], np.cumsum(ecounts)]),
    )


def _local(nodes: np.ndarray, ids: np.ndarray) -> np.ndarray:
    sorter = np.argsort(nodes)
    return sorter[np.searchsorted(nodes, ids, sorter=sorter)]


def _sample_both(
    dg: dgl.DGLGraph, schema: GraphSchema, seed_type: str, seeds: torch.Tensor, fanouts: list[int]
) -> tuple[list, SampledBlocks]:
    """DGL's blocks (as NeighborSampler builds them) and graphfeed's homogeneous sampled blocks
    (dst nodes first, then new src nodes in first-appearance order) from the same frontiers."""
    dgl_blocks: list = []
    cur = {seed_type: seeds}
    nodes = schema.to_gids(seed_type, seeds.numpy())
    gf_blocks: list[Block] = []
    for fanout in reversed(fanouts):
        frontier = dgl.sampling.sample_neighbors(dg, cur, fanout)
        block = dgl.to_block(frontier, cur)
        block.edata[dgl.EID] = frontier.edata[dgl.EID]
        dgl_blocks.insert(0, block)
        cur = {nt: block.srcnodes[nt].data[dgl.NID] for nt in block.srctypes}
        src, dst, eid = [], [], []
        for r, (s, rel, d) in enumerate(schema.etypes):
            u, v = frontier.edges(etype=(s, rel, d))
            src.append(schema.to_gids(s, u.numpy()))
            dst.append(schema.to_gids(d, v.numpy()))
            eid.append(frontier.edges[(s, rel, d)].data[dgl.EID].numpy() + schema.etype_offsets[r])
        src_g, dst_g, eid_g = (np.concatenate(a).astype(np.int64) for a in (src, dst, eid))
        cand = src_g[~np.isin(src_g, nodes)]
        _, first = np.unique(cand, return_index=True)
        num_dst = len(nodes)
        nodes = np.concatenate([nodes, cand[np.sort(first)]])
        gf_blocks.insert(0, Block(len(nodes), num_dst, _local(nodes, src_g), _local(nodes, dst_g), eid_g))
    return dgl_blocks, SampledBlocks(nodes, nodes[: len(seeds)], gf_blocks)


def _feature_table(schema: GraphSchema, gids: np.ndarray) -> np.ndarray:
    """A feature row per node by formula: (type-wise id, type id)."""
    t, ids = schema.to_typed(gids)
    return np.stack([ids, t], axis=1).astype(np.float32)


def _triples(block: dgl.DGLGraph, etype: tuple) -> list:
    s, _, d = etype
    u, v = block.edges(etype=etype)
    su, dv = block.srcnodes[s].data[dgl.NID][u], block.dstnodes[d].data[dgl.NID][v]
    return sorted(zip(su.tolist(), dv.tolist(), block.edges[etype].data[dgl.EID].tolist()))


def _convert(schema: GraphSchema, sb: SampledBlocks, label_type: str) -> tuple:
    feats = split_by_ntype(schema, sb.input_nodes, torch.from_numpy(_feature_table(schema, sb.input_nodes)))
    out_typed = schema.to_typed(sb.output_nodes)[1]
    labels = split_by_ntype(schema, sb.output_nodes, torch.from_numpy(out_typed % 3))
    return hetero_dgl_blocks(sb, schema, feats, {label_type: labels[label_type]}, "feat", "label")


@pytest.mark.parametrize(("seed_type", "fanouts"), [("paper", [-1, -1]), ("author", [2, -1]), ("paper", [3])])
def test_typed_blocks_equal_dgl_to_block(seed_type: str, fanouts: list[int]) -> None:
    dg = _graph()
    schema = _schema(dg)
    seeds = torch.tensor([7, 3, 11, 0, 25])
    dgl.seed(1)
    ref, sb = _sample_both(dg, schema, seed_type, seeds, fanouts)
    input_nodes, output_nodes, blocks = _convert(schema, sb, seed_type)

    assert len(blocks) == len(ref)
    for ours, theirs in zip(blocks, ref):
        assert sorted(ours.canonical_etypes) == sorted(dg.canonical_etypes)  # empty relations too
        for e in dg.canonical_etypes:
            assert _triples(ours, e) == _triples(theirs, e), e
        for nt in dg.ntypes:
            assert ours.num_src_nodes(nt) == theirs.num_src_nodes(nt), nt
            assert ours.num_dst_nodes(nt) == theirs.num_dst_nodes(nt), nt
            src_ids, dst_ids = ours.srcnodes[nt].data[dgl.NID], ours.dstnodes[nt].data[dgl.NID]
            assert sorted(src_ids.tolist()) == sorted(theirs.srcnodes[nt].data[dgl.NID].tolist())
            assert torch.equal(src_ids[: ours.num_dst_nodes(nt)], dst_ids)  # dst nodes: a prefix of src nodes
    # As DGL's DataLoader: every node type in input_nodes, only the seeds' type in output_nodes.
    assert set(input_nodes) == set(dg.ntypes)
    assert list(output_nodes) == [seed_type] and torch.equal(output_nodes[seed_type], seeds)
    for nt in dg.ntypes:
        assert torch.equal(input_nodes[nt], blocks[0].srcnodes[nt].data[dgl.NID])
        ids = blocks[0].srcnodes[nt].data[dgl.NID]
        if not len(ids):
            assert "feat" not in blocks[0].srcnodes[nt].data  # split_by_ntype gives no rows for it
            continue
        expect = torch.stack([ids.float(), torch.full_like(ids, schema.ntype_id(nt)).float()], 1)
        assert torch.equal(blocks[0].srcnodes[nt].data["feat"], expect)  # each row on its node
    assert torch.equal(blocks[-1].dstnodes[seed_type].data["label"], seeds % 3)
    # Every layer's src nodes are a prefix of the input nodes, per type too.
    for b in blocks[1:]:
        for nt in dg.ntypes:
            assert torch.equal(b.srcnodes[nt].data[dgl.NID], input_nodes[nt][: b.num_src_nodes(nt)])


def test_output_keys_match_dgl_dataloader() -> None:
    dg = _graph()
    schema = _schema(dg)
    seeds = torch.tensor([1, 2, 3])
    sampler = dgl.dataloading.NeighborSampler([-1])
    (dgl_in, dgl_out, _), *_ = dgl.dataloading.DataLoader(dg, {"author": seeds}, sampler, batch_size=8)
    _, sb = _sample_both(dg, schema, "author", seeds, [-1])
    ours_in, ours_out, _ = hetero_dgl_blocks(sb, schema, {}, None, "feat", "label")
    assert set(ours_in) == set(dgl_in) and set(ours_out) == set(dgl_out)
    assert len(dgl_in["venue"]) == len(ours_in["venue"]) == 0  # empty types are keys all the same
    for nt in dg.ntypes:
        assert sorted(ours_in[nt].tolist()) == sorted(dgl_in[nt].tolist())


PARTS = GraphSchema(
    ("a", "b", "c"),
    (("a", "r", "c"), ("c", "r", "a"), ("b", "s", "a")),
    np.array([[0, 3, 5, 6], [6, 8, 8, 12]]),  # a: 0-2, 6-7; b: 3-4; c: 5, 8-11
    np.array([0, 4, 7, 9]),
)
TYPED = {0: 0, 1: 1, 2: 2, 6: 3, 7: 4, 3: 0, 4: 1, 5: 0, 8: 1, 9: 2, 10: 3, 11: 4}  # global id -> type-wise id


def test_two_partitions_round_trip() -> None:
    for nt in PARTS.ntypes:
        ids = np.arange(PARTS.num_nodes(nt))
        t, back = PARTS.to_typed(PARTS.to_gids(nt, ids))
        assert (t == PARTS.ntype_id(nt)).all() and (back == ids).all()
    gids = np.arange(12)
    assert PARTS.to_typed(gids)[1].tolist() == [TYPED[g] for g in gids.tolist()]


def _random_block(schema: GraphSchema, rng: np.random.Generator) -> SampledBlocks:
    nodes = rng.permutation(12)[:10]
    num_dst = 6
    types = schema.ntype_of(nodes)
    src, dst, eid = [], [], []
    for r, (s, _, d) in enumerate(schema.etypes):
        srcs = np.flatnonzero(types == schema.ntype_id(s))
        dsts = np.flatnonzero(types[:num_dst] == schema.ntype_id(d))
        if not len(srcs) or not len(dsts):
            continue
        k = 5
        src.append(rng.choice(srcs, k))
        dst.append(rng.choice(dsts, k))
        eid.append(rng.integers(schema.etype_offsets[r], schema.etype_offsets[r + 1], k))
    order = rng.permutation(sum(len(x) for x in src))  # edge types interleaved, as a sampler gives them
    src_a, dst_a, eid_a = (np.concatenate(x)[order] for x in (src, dst, eid))
    return SampledBlocks(nodes, nodes[:3], [Block(len(nodes), num_dst, src_a, dst_a, eid_a)])


@pytest.mark.parametrize("seed", [0, 1, 2])
def test_two_partitions_typed_ids_follow_the_formula(seed: int) -> None:
    sb = _random_block(PARTS, np.random.default_rng(seed))
    input_nodes, output_nodes, (block,) = hetero_dgl_blocks(sb, PARTS, {}, None, "feat", "")
    b = sb.blocks[0]
    for r, e in enumerate(PARTS.etypes):
        mine = (PARTS.etype_of(b.edge_ids) == r).nonzero()[0]
        expect = sorted(
            (TYPED[int(sb.input_nodes[b.edge_src[i]])], TYPED[int(sb.input_nodes[b.edge_dst[i]])],
             int(b.edge_ids[i] - PARTS.etype_offsets[r]))
            for i in mine
        )  # fmt: skip
        assert _triples(block, e) == expect
    for nt in PARTS.ntypes:
        gids = [g for g in sb.input_nodes.tolist() if PARTS.ntypes[PARTS.ntype_of(np.array([g]))[0]] == nt]
        assert input_nodes[nt].tolist() == [TYPED[g] for g in gids]  # stable: input order kept
        dst = [g for g in gids if g in set(sb.input_nodes[: b.num_dst].tolist())]
        assert block.dstnodes[nt].data[dgl.NID].tolist() == [TYPED[g] for g in dst]
        out = [g for g in gids if g in set(sb.output_nodes.tolist())]
        assert output_nodes.get(nt, torch.empty(0)).tolist() == [TYPED[g] for g in out]


@pytest.mark.parametrize("eid", [-1, "end"])
def test_an_edge_id_of_no_edge_type_is_refused(eid: int | str) -> None:
    # (Whether an edge joins its type's node types is the sampler's to keep, and its tests check
    # it: checking every edge again here cost a tenth of a typed minibatch's conversion.)
    sb = _random_block(PARTS, np.random.default_rng(0))
    b = sb.blocks[0]
    wrong = b.edge_ids.copy()
    wrong[0] = int(PARTS.etype_offsets[-1]) if eid == "end" else -1
    bad = SampledBlocks(sb.input_nodes, sb.output_nodes, [Block(b.num_src, b.num_dst, b.edge_src, b.edge_dst, wrong)])
    with pytest.raises(InvalidArgument, match="of no edge type"):
        hetero_dgl_blocks(bad, PARTS, {}, None, "feat", "")


def test_ownership_ranges_give_to_typeds_ids() -> None:
    starts, shift = PARTS.ownership_ranges()
    gids = np.arange(int(PARTS.ntype_offsets[-1, -1]), dtype=np.int64)
    k = np.searchsorted(starts, gids, side="right") - 1
    types, typed = PARTS.to_typed(gids)
    assert (k % len(PARTS.ntypes)).tolist() == types.tolist()
    assert (gids + shift[k]).tolist() == typed.tolist()


@pytest.mark.parametrize("seed", [0, 1, 2])
def test_rank_is_a_stable_grouping_by_type(seed: int) -> None:
    """GraphSchema.rank (one compiled pass each) against the spec: to_typed, a stable argsort by
    type, and each position's index within its type; group_by_ntype is its grouping."""
    gids = np.random.default_rng(seed).integers(0, 12, 40)  # repeats and every range, in any order
    r = PARTS.rank(gids)
    types, typed = PARTS.to_typed(gids)
    order = np.argsort(types, kind="stable")
    assert r.types.tolist() == types.tolist() and r.order.tolist() == order.tolist()
    assert r.bounds.tolist() == [0, *np.cumsum(np.bincount(types, minlength=3)).tolist()]
    assert r.typed.tolist() == typed[order].tolist()
    for i in range(len(gids)):
        t = types[i]
        assert r.rank[i] == int(np.count_nonzero(types[:i] == t))
    groups = PARTS.group_by_ntype(gids)
    assert {nt: pos.tolist() for nt, pos in groups.items()} == {
        nt: np.flatnonzero(types == t).tolist() for t, nt in enumerate(PARTS.ntypes) if (types == t).any()
    }
    with pytest.raises(InvalidArgument, match="blocks: node 12 is not in the graph"):
        PARTS.rank(np.array([3, 12]), "blocks")


@pytest.mark.parametrize("gid", [-1, "end"])
def test_an_input_node_outside_the_graph_is_refused(gid: int | str) -> None:
    sb = _random_block(PARTS, np.random.default_rng(0))
    nodes = sb.input_nodes.copy()
    nodes[-1] = int(PARTS.ntype_offsets[-1, -1]) if gid == "end" else -1
    with pytest.raises(InvalidArgument, match="is not in the graph"):
        hetero_dgl_blocks(SampledBlocks(nodes, sb.output_nodes, sb.blocks), PARTS, {}, None, "feat", "")


def test_features_of_the_wrong_length_name_the_type() -> None:
    sb = _random_block(PARTS, np.random.default_rng(0))
    with pytest.raises(InvalidArgument, match="'a'"):
        hetero_dgl_blocks(sb, PARTS, {"a": torch.zeros(100, 2)}, None, "feat", "")


def _model(dg: dgl.DGLGraph, layers: int) -> RGCN:
    in_feats = {"paper": 4, "venue": 4}  # author is featureless: embedded
    return RGCN(dg.canonical_etypes, in_feats, NUM_NODES, hidden=8, num_classes=3, num_layers=layers)


def test_rgcn_runs_on_dgl_and_graphfeed_blocks() -> None:
    dg = _graph()
    for nt in ("paper", "venue"):
        dg.nodes[nt].data["feat"] = torch.randn(NUM_NODES[nt], 4)
    dg.nodes["paper"].data["label"] = torch.arange(NUM_NODES["paper"]) % 3
    schema = _schema(dg)
    torch.manual_seed(0)
    model = _model(dg, 2)
    seeds = torch.tensor([4, 9, 1, 30])
    sampler = dgl.dataloading.NeighborSampler(
        [3, 3], prefetch_node_feats={"paper": ["feat"], "venue": ["feat"]}, prefetch_labels={"paper": ["label"]}
    )
    dgl_batches = list(dgl.dataloading.DataLoader(dg, {"paper": seeds}, sampler, batch_size=2))
    _, sb = _sample_both(dg, schema, "paper", seeds, [3, 3])
    gids = sb.input_nodes
    rows = {nt: dg.nodes[nt].data["feat"] for nt in ("paper", "venue")}
    typed = split_by_ntype(schema, gids, schema.to_typed(gids)[1])
    feats = {nt: rows[nt][torch.from_numpy(typed[nt])] for nt in rows if nt in typed}
    labels = {"paper": dg.nodes["paper"].data["label"][seeds]}
    ours = hetero_dgl_blocks(sb, schema, feats, labels, "feat", "label")
    for _in, _out, blocks in [*dgl_batches, ours]:
        logits = model(blocks, input_features(blocks[0], "feat"))
        assert logits["paper"].shape == (blocks[-1].num_dst_nodes("paper"), 3)
    # One training pass over both kinds of batches with the shared loop (sparse embedding grads).
    before = model.embed["author"].weight.detach().clone()
    result = rgcn_epoch(model, [*dgl_batches, ours], "paper", rgcn_optimizers(model, 0.01))
    assert result.total == 2 * len(seeds) and np.isfinite(result.loss)
    assert not torch.equal(before, model.embed["author"].weight)


def test_in_process_baseline_trains_on_a_tiny_graph() -> None:
    from graphfeed.trainer.config import TrainConfig

    rng = np.random.default_rng(0)
    n_paper, n_author = 60, 40
    label = rng.integers(0, 2, n_paper)
    feat = (label[:, None] + 0.1 * rng.standard_normal((n_paper, 4))).astype(np.float32)
    g = hetero_graph(
        "tiny",
        {"paper": n_paper, "author": n_author},
        {("author", "writes", "paper"): (rng.integers(0, n_author, 120), rng.integers(0, n_paper, 120))},
        {"paper": {"feat": feat, "label": label}},
        {"paper": {"train": np.arange(40), "val": np.arange(40, 50), "test": np.arange(50, 60)}},
        add_reverse=True,
    )
    dg = to_dgl_heterograph(g)
    assert dg.num_nodes("author") == n_author and dg.num_edges(("paper", "rev_writes", "author")) == 120
    assert torch.equal(dg.nodes["paper"].data["label"], torch.from_numpy(label))
    cfg = TrainConfig(fanouts=[4, 4], epochs=5, batch_size=16, hidden=8, lr=0.05, dropout=0.0)
    acc = train_hetero_in_process(g, cfg)
    assert acc["test_acc"] >= 0.8 and acc["val_acc"] >= 0.8


def test_orig_ids_replace_the_schema_type_wise_ids() -> None:
    """Partitioning renumbers each type's nodes; ``orig_ids`` (gid -> input type-wise id) reports the input's."""
    sb = _random_block(PARTS, np.random.default_rng(3))
    orig = np.array([2, 0, 1, 1, 0, 4, 4, 3, 0, 2, 1, 3])  # a permutation within each type
    input_nodes, output_nodes, (block,) = hetero_dgl_blocks(sb, PARTS, {}, None, "feat", "", orig_ids=orig)
    ref_in, ref_out, (ref,) = hetero_dgl_blocks(sb, PARTS, {}, None, "feat", "")
    to_orig = {TYPED[g]: int(orig[g]) for g in range(12) if PARTS.ntype_of(np.array([g]))[0] == 0}
    assert input_nodes["a"].tolist() == [to_orig[i] for i in ref_in["a"].tolist()]
    assert output_nodes.keys() == ref_out.keys()
    for e in PARTS.etypes:  # the same edges, the same edge ids
        assert torch.equal(block.edges[e].data[dgl.EID], ref.edges[e].data[dgl.EID])
        assert all(torch.equal(x, y) for x, y in zip(block.edges(etype=e), ref.edges(etype=e)))
