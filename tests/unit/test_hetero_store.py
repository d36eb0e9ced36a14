"""Typed graph-stores and the multi-hop sampler on the arithmetic heterograph (tests/hetero_graphs.py):
a fanout per edge type, per-type node data, answers checked by formula."""

from __future__ import annotations

from collections import Counter
from collections.abc import Iterator, Sequence
from pathlib import Path

import numpy as np
import pytest

from graphfeed.common import blocks as blocks_codec
from graphfeed.common.blocks import Block, SampledBlocks
from graphfeed.common.errors import InvalidArgument, NotFound
from graphfeed.common.limits import MAX_FANOUT
from graphfeed.common.partition import PartitionReader, part_dir_name
from graphfeed.common.schema import GraphSchema
from graphfeed.graph_store.partitions import LocalPartitionSet
from graphfeed.graph_store.sampling import etype_row_ranges, sample_csr, sample_typed
from graphfeed.graph_store.store import GraphStore
from graphfeed.graph_store.types import Fanout, SampledNeighbors
from graphfeed.sampler.core import MultiHopSampler
from tests.hetero_graphs import ETYPES, NI, NTYPES, NU, in_edges, item_feat, mixed_seeds, user_feat, write_hetero

R = len(ETYPES)
Edge = tuple[int, int, int]  # (edge type, src type-wise input id, type-wise edge id)


@pytest.fixture(scope="module")
def hroot(tmp_path_factory: pytest.TempPathFactory) -> Path:
    return write_hetero(tmp_path_factory.mktemp("hetero"))


@pytest.fixture(scope="module")
def stores(hroot: Path) -> Iterator[list[GraphStore]]:
    opened = [GraphStore.open(hroot / part_dir_name(p)) for p in range(2)]
    yield opened
    for s in opened:
        s.close()


@pytest.fixture(scope="module")
def horig(hroot: Path) -> np.ndarray:
    """gid -> type-wise input id."""
    return np.load(hroot / "orig_ids.npy")


@pytest.fixture(scope="module")
def schema(stores: list[GraphStore]) -> GraphSchema:
    return stores[0].schema


def typed_edges(schema: GraphSchema, orig: np.ndarray, dst: int, src: np.ndarray, eids: np.ndarray) -> list[Edge]:
    """The edges into gid ``dst`` as (etype, src type-wise input id, type-wise edge id), checking
    that each connects the node types its edge type says."""
    r = schema.etype_of(eids)
    for k, e in enumerate(r):
        s_type, _, d_type = ETYPES[e]
        assert NTYPES[int(schema.ntype_of(np.array([src[k]]))[0])] == s_type, f"edge {eids[k]}: src of {ETYPES[e]}"
        assert NTYPES[int(schema.ntype_of(np.array([dst]))[0])] == d_type, f"edge {eids[k]}: dst of {ETYPES[e]}"
    return [(int(e), int(orig[s]), int(x - schema.etype_offsets[e])) for e, s, x in zip(r, src, eids)]


def expected_edges(schema: GraphSchema, orig: np.ndarray, dst: int) -> list[Edge]:
    """Every in-edge of gid ``dst`` by formula, sorted."""
    ntype = NTYPES[int(schema.ntype_of(np.array([dst]))[0])]
    return sorted((r, s, e) for r, et in enumerate(ETYPES) if et[2] == ntype for s, e in in_edges(et, int(orig[dst])))


def per_seed(out: SampledNeighbors) -> Iterator[tuple[int, slice]]:
    for i in range(len(out.offsets) - 1):
        yield i, slice(int(out.offsets[i]), int(out.offsets[i + 1]))


def owned(store: GraphStore) -> np.ndarray:
    return np.arange(store.start, store.stop, dtype=np.int64)[::-1].copy()  # not in CSR row order


# -- one hop -------------------------------------------------------------------------------------


def test_layout_interleaves_types_and_one_relation_is_empty_in_a_partition(
    stores: list[GraphStore], schema: GraphSchema
) -> None:
    assert schema.ntypes == NTYPES and schema.etypes == ETYPES
    for p in range(2):  # each partition owns nodes of every type
        assert all(np.diff(schema.ntype_offsets[p]) > 0)
    tags = schema.etype_id("tags")
    full = stores[1].sample_neighbors(owned(stores[1]), -1, False, 0)
    assert not (schema.etype_of(full.edge_ids) == tags).any(), "every tagged item lies in partition 0"


@pytest.mark.parametrize("fanout", [-1, [-1] * R], ids=["int", "per-etype"])
def test_all_neighbors_per_edge_type_by_formula(
    stores: list[GraphStore], schema: GraphSchema, horig: np.ndarray, fanout: Fanout
) -> None:
    seen = 0
    for store in stores:
        seeds = owned(store)
        out = store.sample_neighbors(seeds, fanout, False, 3)
        for i, sl in per_seed(out):
            r = schema.etype_of(out.edge_ids[sl])
            assert (np.diff(r) >= 0).all(), "a seed's edges come edge type by edge type"
            got = sorted(typed_edges(schema, horig, int(seeds[i]), out.src[sl], out.edge_ids[sl]))
            assert got == expected_edges(schema, horig, int(seeds[i]))
            seen += len(got)
    assert seen == int(schema.etype_offsets[-1]), "every edge of the graph sampled once"


@pytest.mark.parametrize("replace", [False, True])
def test_fanout_per_edge_type_bounds_each_type(
    stores: list[GraphStore], schema: GraphSchema, horig: np.ndarray, replace: bool
) -> None:
    ks = [2, 1, 1, 3]
    for store in stores:
        seeds = owned(store)
        out = store.sample_neighbors(seeds, ks, replace, 11)
        for i, sl in per_seed(out):
            full = expected_edges(schema, horig, int(seeds[i]))
            got = typed_edges(schema, horig, int(seeds[i]), out.src[sl], out.edge_ids[sl])
            counts, degs = Counter(e[0] for e in got), Counter(e[0] for e in full)
            for r in range(R):
                want = (ks[r] if degs[r] else 0) if replace else min(degs[r], ks[r])
                assert counts[r] == want, (int(seeds[i]), ETYPES[r])
            assert set(got) <= set(full)
            if not replace:
                assert len(set(got)) == len(got), "without replacement no edge twice"
        for r in range(R):
            eids = out.edge_ids[schema.etype_of(out.edge_ids) == r]
            assert ((eids >= schema.etype_offsets[r]) & (eids < schema.etype_offsets[r + 1])).all()


def test_fanout_zero_drops_a_type_and_types_draw_independently(stores: list[GraphStore], schema: GraphSchema) -> None:
    store = stores[0]
    seeds = owned(store)
    a = store.sample_neighbors(seeds, [2, 0, 1, 1], False, 5)
    b = store.sample_neighbors(seeds, [2, 3, 1, 1], False, 5)
    tags = schema.etype_id("tags")
    assert not (schema.etype_of(a.edge_ids) == tags).any()
    assert (schema.etype_of(b.edge_ids) == tags).any()
    keep = schema.etype_of(b.edge_ids) != tags
    np.testing.assert_array_equal(a.src, b.src[keep])  # the other types' draws do not move
    np.testing.assert_array_equal(a.edge_ids, b.edge_ids[keep])
    none = store.sample_neighbors(seeds, [0] * R, False, 5)
    assert none.offsets.tolist() == [0] * (len(seeds) + 1) and len(none.src) == len(none.edge_ids) == 0


def test_same_arguments_same_sample(stores: list[GraphStore]) -> None:
    seeds = owned(stores[1])
    a, b = (stores[1].sample_neighbors(seeds, [1, 1, 1, 1], False, 9) for _ in range(2))
    c = stores[1].sample_neighbors(seeds, [1, 1, 1, 1], False, 10)
    for x, y in ((a.offsets, b.offsets), (a.src, b.src), (a.edge_ids, b.edge_ids)):
        assert x.tobytes() == y.tobytes()
    assert a.src.tobytes() != c.src.tobytes() or a.edge_ids.tobytes() != c.edge_ids.tobytes()


@pytest.mark.parametrize(
    ("fanout", "match"),
    [
        ([1, 2, 3], "3 fanouts for the graph's 4 edge types"),
        ([1] * (R + 1), "5 fanouts for the graph's 4 edge types"),
        ([1, 1, 1, MAX_FANOUT + 1], f"or in \\[0, {MAX_FANOUT}\\], got {MAX_FANOUT + 1}"),
        ([1, -2, 1, 1], "got -2"),
    ],
)
def test_bad_etype_fanouts_are_invalid(stores: list[GraphStore], fanout: list[int], match: str) -> None:
    with pytest.raises(InvalidArgument, match=match):
        stores[0].sample_neighbors(owned(stores[0]), fanout, False, 0)


def test_one_edge_type_is_sample_csr_byte_for_byte(arith_root: Path) -> None:
    """Regression: on a homogeneous graph the typed path is the untyped kernel itself."""
    reader = PartitionReader(arith_root / part_dir_name(1))
    try:
        rows = np.array([0, 7, 3, 3, 49, 12], dtype=np.int64)
        assert reader.etype_indptr.shape[0] == 1
        for fanout in (-1, 0, 2, 5):
            for replace in (False, True):
                typed = sample_typed(
                    reader.etype_indptr, reader.indices, reader.edge_ids, rows, [fanout], replace, 77, None, 4
                )
                plain = sample_csr(reader.indptr, reader.indices, reader.edge_ids, rows, fanout, replace, 77, None, 4)
                assert [x.tobytes() for x in typed] == [x.tobytes() for x in plain]
    finally:
        reader.close()
    store = GraphStore.open(arith_root / part_dir_name(1))
    try:
        seeds = np.arange(store.start, store.stop, 3, dtype=np.int64)
        a, b = store.sample_neighbors(seeds, 3, True, 1), store.sample_neighbors(seeds, [3], True, 1)
        assert a.src.tobytes() == b.src.tobytes() and a.edge_ids.tobytes() == b.edge_ids.tobytes()
    finally:
        store.close()


@pytest.mark.parametrize("fanouts", [[3, 0, -1, 70], [2, 2, 2], [0, 1, 0]])
@pytest.mark.parametrize("replace", [False, True])
def test_typed_sample_is_each_types_sample_row_by_row(fanouts: list[int], replace: bool) -> None:
    """The spec the fused kernel must keep: row i's edges are, type by type, what sample_csr
    draws for that type from derive_seed(seed, "etype", r), whatever the output dtype."""
    from graphfeed.common.seeds import derive_seed

    rng = np.random.default_rng(5)
    num_rows, ends = 60, [0]
    indptr = []
    for _ in fanouts:
        degrees = rng.integers(0, 90, num_rows)
        indptr.append(ends[-1] + np.concatenate([[0], np.cumsum(degrees)]))
        ends.append(int(indptr[-1][-1]))
    etype_indptr = np.stack(indptr).astype(np.int64)
    indices = rng.integers(0, num_rows, ends[-1]).astype(np.int32)
    edge_ids = rng.permutation(ends[-1]).astype(np.int32)
    rows = rng.integers(0, num_rows, 200)
    seed, first = 2**63 + 11, 5
    per_type = [
        sample_csr(etype_indptr[r], indices, edge_ids, rows, k, replace, derive_seed(seed, "etype", r), None, first)
        for r, k in enumerate(fanouts)
    ]
    want_src = [np.concatenate([src[o[i] : o[i + 1]] for o, src, _ in per_type]) for i in range(len(rows))]
    want_eids = [np.concatenate([e[o[i] : o[i + 1]] for o, _, e in per_type]) for i in range(len(rows))]
    for out_dtype in (np.int64, np.int32):

        def alloc(o: np.ndarray, dt: type = out_dtype) -> tuple[np.ndarray, np.ndarray]:
            return np.empty(o[-1], dt), np.empty(o[-1], dt)

        offsets, src, eids = sample_typed(
            etype_indptr,
            indices,
            edge_ids,
            rows,
            fanouts,
            replace,
            seed,
            alloc,
            first,
        )
        assert src.dtype == out_dtype
        for i in range(len(rows)):
            assert src[offsets[i] : offsets[i + 1]].tolist() == want_src[i].tolist()
            assert eids[offsets[i] : offsets[i + 1]].tolist() == want_eids[i].tolist()


def test_row_ranges_skip_only_rows_without_edges_of_a_type() -> None:
    """Each edge type's edges end in one range of rows (a node type's); sampling with the
    ranges reads no other rows and draws the same bytes."""
    rng = np.random.default_rng(9)
    num_rows, spans = 90, [(0, 30), (30, 75), (75, 90), (0, 0)]  # the last type has no edges here
    indptr = []
    for lo, hi in spans:
        degrees = np.zeros(num_rows, np.int64)
        degrees[lo:hi] = rng.integers(0, 40, hi - lo)
        degrees[lo] = max(degrees[lo], 1) if hi > lo else 0
        indptr.append(np.concatenate([[0], np.cumsum(degrees)]))
    etype_indptr = np.stack(indptr).astype(np.int64)
    ranges = etype_row_ranges(etype_indptr)
    assert ranges[0, 0] == 0 and ranges[1, 0] == 30 and ranges[2, 0] == 75 and ranges[3].tolist() == [0, 0]
    for r, (lo, hi) in enumerate(spans[:3]):
        assert lo <= ranges[r, 0] and ranges[r, 1] <= hi and (np.diff(etype_indptr[r])[ranges[r, 1] :] == 0).all()
    edges = int(etype_indptr[:, -1].max())
    indices, edge_ids = rng.integers(0, num_rows, edges), rng.permutation(edges)
    rows = rng.integers(0, num_rows, 300)
    xrows = np.unique(rows[:20]).astype(np.int64)
    exclude = (xrows, np.unique(edge_ids[: edges // 4]).astype(np.int64))
    for fanouts in ([5, 3, -1, 2], [0, 70, 1, 1]):
        args = (etype_indptr, indices, edge_ids, rows, fanouts, False, 3)
        plain, ranged = sample_typed(*args, exclude=exclude), sample_typed(*args, exclude=exclude, row_ranges=ranges)
        for a, b in zip(plain, ranged, strict=True):
            assert a.tobytes() == b.tobytes()


# -- node data per type -------------------------------------------------------------------------


def test_node_data_per_type_by_formula(stores: list[GraphStore], schema: GraphSchema, horig: np.ndarray) -> None:
    got_users, got_items = 0, 0
    for p, store in enumerate(stores):
        info = store.info()
        assert {n: (d.ntype, d.row_shape) for n, d in info.node_data.items()} == {
            "user/feat": ("user", (3,)),
            "item/feat": ("item", (5,)),
            "item/label": ("item", ()),
        }, "the featureless tag type has no table"
        users, items = (np.arange(*schema.owned_range(p, t))[::-1].copy() for t in ("user", "item"))
        np.testing.assert_array_equal(store.get_node_data("user/feat", users), user_feat(horig[users]))
        np.testing.assert_array_equal(store.get_node_data("item/feat", items), item_feat(horig[items]))
        np.testing.assert_array_equal(store.get_node_data("item/label", items), horig[items] % 3)
        chunks = list(store.iter_node_data("item/feat", items))
        np.testing.assert_array_equal(np.concatenate([c for _, c in chunks]), item_feat(horig[items]))
        got_users, got_items = got_users + len(users), got_items + len(items)
    assert (got_users, got_items) == (NU, NI)


def test_node_data_of_another_type_is_not_found(stores: list[GraphStore], schema: GraphSchema) -> None:
    user = schema.owned_range(0, "user")[0]
    lo, hi = schema.owned_range(0, "item")
    with pytest.raises(NotFound, match=rf"are not item nodes owned by partition 0 \(those are \[{lo}, {hi}\)\)"):
        stores[0].get_node_data("item/feat", np.array([lo, user], dtype=np.int64))
    with pytest.raises(NotFound, match="node data 'item/feat' has no row"):
        stores[0].get_node_data("item/feat", np.array([schema.owned_range(0, "tag")[0]], dtype=np.int64))
    with pytest.raises(NotFound):
        stores[0].get_node_data("tag/feat", np.array([schema.owned_range(0, "tag")[0]], dtype=np.int64))


# -- multi-hop ----------------------------------------------------------------------------------


@pytest.fixture(scope="module")
def sampler(stores: list[GraphStore]) -> MultiHopSampler:
    return MultiHopSampler(LocalPartitionSet(stores), max_fanout=MAX_FANOUT)


def block_nodes(sb: SampledBlocks, b: Block) -> tuple[np.ndarray, np.ndarray]:
    """Global ids of each edge's src and dst."""
    return sb.input_nodes[: b.num_src][b.edge_src], sb.input_nodes[: b.num_dst][b.edge_dst]


def layer_ks(layer: Fanout) -> list[int]:
    return [int(layer)] * R if isinstance(layer, int) else list(layer)


@pytest.mark.parametrize("fanouts", [[[2, 1, 1, 1], [1, 2, 0, 2]], [3, [1, 0, 2, 1]], [[0, 0, 0, 0]]])
def test_multi_hop_edges_connect_their_types_and_respect_fanouts(
    sampler: MultiHopSampler, schema: GraphSchema, horig: np.ndarray, fanouts: list[Fanout]
) -> None:
    seeds = mixed_seeds(schema)
    sb = sampler.sample(seeds, fanouts, False, 7, 0, 3)
    np.testing.assert_array_equal(sb.output_nodes, seeds)
    assert len(sb.blocks) == len(fanouts)
    for layer, b in zip(fanouts, sb.blocks):
        ks = layer_ks(layer)
        src, dst = block_nodes(sb, b)
        r = schema.etype_of(b.edge_ids)
        for e in range(R):
            on = r == e
            assert (schema.ntype_of(src[on]) == NTYPES.index(ETYPES[e][0])).all(), ETYPES[e]
            assert (schema.ntype_of(dst[on]) == NTYPES.index(ETYPES[e][2])).all(), ETYPES[e]
            per_dst = np.bincount(b.edge_dst[on], minlength=b.num_dst)
            assert per_dst.max(initial=0) <= ks[e], (ETYPES[e], ks[e])
        for d in range(b.num_dst):  # each dst's edges are some of its in-edges by formula
            at = b.edge_dst == d
            gid = int(sb.input_nodes[d])
            got = typed_edges(schema, horig, gid, src[at], b.edge_ids[at])
            assert set(got) <= set(expected_edges(schema, horig, gid))
    again = sampler.sample(seeds.copy(), fanouts, False, 7, 0, 3)
    assert blocks_codec.to_proto(again).SerializeToString() == blocks_codec.to_proto(sb).SerializeToString()


def test_all_neighbors_every_hop_by_formula(sampler: MultiHopSampler, schema: GraphSchema, horig: np.ndarray) -> None:
    seeds = mixed_seeds(schema)
    for fanouts in ([-1, -1], [[-1] * R, [-1] * R]):
        sb = sampler.sample(seeds, fanouts, False, 1, 2, 3)
        for b in sb.blocks:
            src, _ = block_nodes(sb, b)
            for d in range(b.num_dst):
                at = b.edge_dst == d
                gid = int(sb.input_nodes[d])
                got = sorted(typed_edges(schema, horig, gid, src[at], b.edge_ids[at]))
                assert got == expected_edges(schema, horig, gid), gid
        # the input layer's dst nodes are the seeds and their full in-neighborhoods
        hop1 = {int(g) for g in sb.input_nodes[: sb.blocks[0].num_dst]}
        assert hop1 == set(seeds.tolist()) | set(block_nodes(sb, sb.blocks[1])[0].tolist())


def test_an_int_layer_is_that_fanout_for_every_edge_type(sampler: MultiHopSampler, schema: GraphSchema) -> None:
    seeds = mixed_seeds(schema)
    a = sampler.sample(seeds, [2, 3], True, 4, 1, 0)
    b = sampler.sample(seeds, [[2] * R, np.array([3] * R)], True, 4, 1, 0)  # type: ignore[list-item]
    assert blocks_codec.to_proto(a).SerializeToString() == blocks_codec.to_proto(b).SerializeToString()


@pytest.mark.parametrize(
    ("fanouts", "match"),
    [
        ([[1, 2]], r"has 2 edge-type fanouts \[1, 2\]; the graph has 4 edge types \['user:buys:item'"),
        ([2, [1, 1, 1, 1, 1]], "has 5 edge-type fanouts"),
        ([[1, 1, 1, MAX_FANOUT + 1]], rf"fanouts \[{MAX_FANOUT + 1}\] out of range"),
        ([[1, -3, 1, 1]], r"fanouts \[-3\] out of range"),
        (["abcd"], "must be an integer or a sequence of integers"),
        ([[1, 1.5, 1, 1]], "must be an integer or a sequence of integers"),
        ([], "at least one layer"),
    ],
)
def test_bad_layers_are_invalid(sampler: MultiHopSampler, schema: GraphSchema, fanouts: Sequence, match: str) -> None:
    with pytest.raises(InvalidArgument, match=match):
        sampler.sample(mixed_seeds(schema), fanouts, False, 0, 0, 0)


def test_homogeneous_graph_takes_one_entry_layers(parts: LocalPartitionSet) -> None:
    s = MultiHopSampler(parts)
    seeds = np.array([3, 0, 42, 8], dtype=np.int64)
    a, b = s.sample(seeds, [3, 2], False, 5, 1, 4), s.sample(seeds, [[3], (2,)], False, 5, 1, 4)
    assert blocks_codec.to_proto(a).SerializeToString() == blocks_codec.to_proto(b).SerializeToString()
    with pytest.raises(InvalidArgument, match="the graph has 1 edge types"):
        s.sample(seeds, [[3, 3]], False, 5, 1, 4)
