"""Excluding edges from neighbor sampling (DGL's ``exclude_eids``), layer by layer: the kernel
(byte-identical to sampling the CSR without those edges), the graph-store, and the multi-hop
sampler over in-process partitions."""

from __future__ import annotations

import itertools
from concurrent.futures import Future

import numpy as np
import pytest

from graphfeed.common.blocks import SampledBlocks
from graphfeed.common.errors import InvalidArgument
from graphfeed.graph_store.partitions import ForwardingPartitionSet, LocalPartitionSet
from graphfeed.graph_store.sampling import sample_csr, sample_typed
from graphfeed.graph_store.types import Exclusion, Fanout, SampledNeighbors
from graphfeed.sampler.core import MultiHopSampler


def _random_csr(rng: np.random.Generator, num_rows: int, max_deg: int) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """A CSR with rows of degree 0, multi-edges (repeated neighbors) and shuffled edge ids."""
    deg = rng.integers(0, max_deg + 1, num_rows)
    deg[rng.random(num_rows) < 0.2] = 0
    indptr = np.concatenate([[0], np.cumsum(deg)]).astype(np.int64)
    indices = rng.integers(0, 5, int(indptr[-1]), dtype=np.int64)  # few neighbors: many multi-edges
    edge_ids = rng.permutation(int(indptr[-1])).astype(np.int64) + 1000
    return indptr, indices, edge_ids


def _excluding(
    rng: np.random.Generator, indptr: np.ndarray, edge_ids: np.ndarray, fraction: float
) -> tuple[np.ndarray, np.ndarray]:
    """``(rows, eids)`` of a random ``fraction`` of the edges, as the kernel takes them."""
    drop = rng.random(len(edge_ids)) < fraction
    rows = np.repeat(np.arange(len(indptr) - 1), np.diff(indptr))[drop]
    return np.unique(rows).astype(np.int64), np.unique(edge_ids[drop]).astype(np.int64)


def _without(
    indptr: np.ndarray, indices: np.ndarray, edge_ids: np.ndarray, eids: np.ndarray
) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """The CSR with the edges ``eids`` physically removed (the others keep their ids)."""
    keep = ~np.isin(edge_ids, eids)
    rows = np.repeat(np.arange(len(indptr) - 1), np.diff(indptr))
    new_indptr = np.concatenate([[0], np.cumsum(np.bincount(rows[keep], minlength=len(indptr) - 1))])
    return new_indptr.astype(np.int64), indices[keep], edge_ids[keep]


def _assert_same(a: tuple[np.ndarray, ...], b: tuple[np.ndarray, ...]) -> None:
    for x, y in zip(a, b, strict=True):
        assert x.dtype == y.dtype and x.tobytes() == y.tobytes()


# -- the kernel ------------------------------------------------------------------------------

KERNEL_CASES = [(-1, False), (0, False), (1, False), (3, False), (70, False), (3, True), (70, True)]


@pytest.mark.parametrize(("fanout", "replace"), KERNEL_CASES)
@pytest.mark.parametrize("trial", range(3))
def test_excluding_equals_sampling_the_csr_without_those_edges(fanout: int, replace: bool, trial: int) -> None:
    rng = np.random.default_rng(trial)
    indptr, indices, edge_ids = _random_csr(rng, 300, 150 if fanout > 64 else 12)
    rows = rng.integers(0, 300, 500).astype(np.int64)  # repeats: sampled independently
    excluded = _excluding(rng, indptr, edge_ids, 0.3)
    got = sample_csr(indptr, indices, edge_ids, rows, fanout, replace, 77 + trial, None, 5, exclude=excluded)
    want = sample_csr(*_without(indptr, indices, edge_ids, excluded[1]), rows, fanout, replace, 77 + trial, None, 5)
    _assert_same(got, want)
    assert not np.isin(got[2], excluded[1]).any()


@pytest.mark.parametrize(("fanout", "replace"), KERNEL_CASES)
def test_rows_without_excluded_edges_sample_as_without_exclusion(fanout: int, replace: bool) -> None:
    rng = np.random.default_rng(1)
    indptr, indices, edge_ids = _random_csr(rng, 200, 150 if fanout > 64 else 12)
    rows = rng.permutation(200).astype(np.int64)
    xrows, xeids = _excluding(rng, indptr, edge_ids, 0.02)
    plain = sample_csr(indptr, indices, edge_ids, rows, fanout, replace, 9)
    got = sample_csr(indptr, indices, edge_ids, rows, fanout, replace, 9, exclude=(xrows, xeids))
    untouched = ~np.isin(rows, xrows)
    assert untouched.any() and (~untouched).any()
    for i in np.flatnonzero(untouched):
        for p, g in zip(plain[1:], got[1:]):
            np.testing.assert_array_equal(g[got[0][i] : got[0][i + 1]], p[plain[0][i] : plain[0][i + 1]])


def test_int32_read_only_topology_as_a_store_maps_it() -> None:
    """The kernel reads an excluded row's edges and the others through one variable: read-only
    int32 arrays (memory-mapped ``.npy`` files) and its writable scratch of the same dtype."""
    rng = np.random.default_rng(4)
    indptr, indices, edge_ids = _random_csr(rng, 100, 12)
    rows = rng.integers(0, 100, 150).astype(np.int64)
    excluded = _excluding(rng, indptr, edge_ids, 0.3)
    narrow_indices, narrow_eids = indices.astype(np.int32), edge_ids.astype(np.int32)
    narrow_indices.flags.writeable = narrow_eids.flags.writeable = False
    got = sample_csr(indptr, narrow_indices, narrow_eids, rows, 4, False, 8, exclude=excluded)
    _assert_same(got, sample_csr(indptr, indices, edge_ids, rows, 4, False, 8, exclude=excluded))


def test_an_excluded_row_still_gets_its_fanout_from_the_other_edges() -> None:
    # Row 0 has 4 edges (ids 10..13); excluding two leaves exactly the other two for fanout 2.
    indptr, indices, edge_ids = np.array([0, 4]), np.array([5, 6, 7, 8]), np.array([10, 11, 12, 13])
    rows = np.zeros(1, dtype=np.int64)
    exclude = (np.array([0]), np.array([10, 12]))
    offsets, src, eids = sample_csr(indptr, indices, edge_ids, rows, 2, False, 3, exclude=exclude)
    assert offsets.tolist() == [0, 2] and src.tolist() == [6, 8] and eids.tolist() == [11, 13]


def test_empty_or_absent_exclusion_is_no_exclusion() -> None:
    rng = np.random.default_rng(2)
    indptr, indices, edge_ids = _random_csr(rng, 50, 9)
    rows = np.arange(50, dtype=np.int64)
    plain = sample_csr(indptr, indices, edge_ids, rows, 4, False, 1)
    empty = np.empty(0, dtype=np.int64)
    _assert_same(sample_csr(indptr, indices, edge_ids, rows, 4, False, 1, exclude=(empty, empty)), plain)
    unknown = (np.array([3], dtype=np.int64), np.array([-5], dtype=np.int64))  # an id the CSR lacks
    _assert_same(sample_csr(indptr, indices, edge_ids, rows, 4, False, 1, exclude=unknown), plain)


@pytest.mark.parametrize(
    "exclude",
    [
        (np.array([2, 1]), np.array([1])),  # rows not ascending
        (np.array([1]), np.array([4, 4])),  # eids not unique
        (np.array([1], dtype=np.int32), np.array([4])),  # not int64
        (np.array([[1]]), np.array([4])),  # not 1-D
    ],
)
def test_a_malformed_exclusion_is_refused(exclude: tuple[np.ndarray, np.ndarray]) -> None:
    with pytest.raises(ValueError, match="excluded"):
        sample_csr(
            np.array([0, 1, 2]), np.array([0, 1]), np.array([4, 5]), np.array([0, 1]), 1, False, 0, None, 0, exclude
        )


@pytest.mark.parametrize("replace", [False, True])
def test_typed_sampling_excludes_in_every_edge_type(replace: bool) -> None:
    rng = np.random.default_rng(3)
    num_rows = 120
    typed = [_random_csr(rng, num_rows, 10) for _ in range(2)]
    # Both edge types over one shared indices/edge_ids array (type 1's positions after type 0's).
    shift = int(typed[0][0][-1])
    etype_indptr = np.stack([typed[0][0], typed[1][0] + shift])
    indices = np.concatenate([typed[0][1], typed[1][1]])
    edge_ids = np.concatenate([typed[0][2], typed[1][2] + 10_000])
    rows = rng.integers(0, num_rows, 200).astype(np.int64)
    drop = rng.random(len(edge_ids)) < 0.3
    owner_row = np.concatenate([np.repeat(np.arange(num_rows), np.diff(p)) for p in etype_indptr])
    exclude = (np.unique(owner_row[drop]), np.unique(edge_ids[drop]))
    got = sample_typed(etype_indptr, indices, edge_ids, rows, [3, 2], replace, 11, exclude=exclude)
    keep, bounds = ~drop, (0, shift, len(edge_ids))
    kept_indptr = np.stack(
        [
            np.concatenate([[0], np.cumsum(np.bincount(owner_row[lo:hi][keep[lo:hi]], minlength=num_rows))])
            + int(keep[:lo].sum())
            for lo, hi in itertools.pairwise(bounds)
        ]
    ).astype(np.int64)
    want = sample_typed(kept_indptr, indices[keep], edge_ids[keep], rows, [3, 2], replace, 11)
    _assert_same(got, want)
    assert not np.isin(got[2], exclude[1]).any()


# -- the graph-store (the arithmetic graph: 100 nodes in 2 partitions) -----------------------


def _in_edges(parts: LocalPartitionSet, gids: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """Every in-edge of ``gids`` as ``(dst, eids)`` pairs (fanout -1 from their owners)."""
    dst, eids = [], []
    for g in gids:
        p = int(parts.owners(np.array([g]))[0])
        got = parts.stores[p].sample_neighbors(np.array([g]), -1, False, 0)
        dst.append(np.full(len(got.edge_ids), g, dtype=np.int64))
        eids.append(got.edge_ids)
    return np.concatenate(dst), np.concatenate(eids)


def test_the_store_leaves_out_its_pairs_and_ignores_other_partitions(parts: LocalPartitionSet) -> None:
    store = parts.stores[0]
    seeds = np.arange(store.start, store.start + 6, dtype=np.int64)
    dst, eids = _in_edges(parts, seeds)
    ours = (dst[::2], eids[::2])
    got = store.sample_neighbors(seeds, -1, False, 0, exclude=ours)
    np.testing.assert_array_equal(np.sort(got.edge_ids), np.sort(eids[1::2]))  # all in-edges but those
    # Pairs of another partition's nodes are ignored, even with an eid of ours.
    other = parts.stores[1].start
    theirs = (np.full(len(eids), other, dtype=np.int64), eids)
    plain = store.sample_neighbors(seeds, 2, False, 3)
    for a, b in zip(vars(store.sample_neighbors(seeds, 2, False, 3, exclude=theirs)).values(), vars(plain).values()):
        np.testing.assert_array_equal(a, b)


@pytest.mark.parametrize(
    ("exclude", "message"),
    [
        ((np.array([0, 2]), np.array([1])), "exclude_dst and exclude_eids must have equal lengths"),
        ((np.array([0], dtype=np.int32), np.array([1])), "exclude_dst must be a 1-D int64 array"),
        ((np.array([0]), np.array([[1]])), "exclude_eids must be a 1-D int64 array"),
    ],
)
def test_the_store_refuses_malformed_pairs(parts: LocalPartitionSet, exclude: Exclusion, message: str) -> None:
    with pytest.raises(InvalidArgument, match=message):
        parts.stores[0].sample_neighbors(np.array([parts.stores[0].start]), 2, False, 0, exclude=exclude)


# -- the multi-hop sampler over in-process partitions ----------------------------------------


class _RecordedExclusions(ForwardingPartitionSet):
    """Records the ``exclude`` each partition is sent."""

    def __init__(self, inner: LocalPartitionSet) -> None:
        super().__init__(inner)
        self.sent: list[tuple[int, Exclusion | None]] = []

    def sample_neighbors(
        self,
        p: int,
        seeds: np.ndarray,
        fanout: Fanout,
        replace: bool,
        rng_seed: int,
        first_position: int = 0,
        exclude: Exclusion | None = None,
    ) -> Future[SampledNeighbors]:
        self.sent.append((p, exclude))
        return super().sample_neighbors(p, seeds, fanout, replace, rng_seed, first_position, exclude)


def _block_edges(sb: SampledBlocks) -> tuple[np.ndarray, np.ndarray]:
    """``(dst gids, eids)`` of every block's edges (a block's dst nodes prefix the input nodes)."""
    dst = [sb.input_nodes[: b.num_dst][b.edge_dst] for b in sb.blocks]
    return np.concatenate(dst), np.concatenate([b.edge_ids for b in sb.blocks]).astype(np.int64)


SEEDS = np.array([3, 0, 42, 8, 99, 5, 61], dtype=np.int64)


@pytest.mark.parametrize("fanouts", [[3, 2], [-1, -1], [2, 70]])
def test_no_hop_samples_an_excluded_edge(parts: LocalPartitionSet, fanouts: list[int]) -> None:
    recorded = _RecordedExclusions(parts)
    sampler = MultiHopSampler(recorded, max_fanout=100)
    dst, eids = _block_edges(sampler.sample(SEEDS, fanouts, False, 5, 1, 4))
    exclude = (dst[::2].copy(), eids[::2].copy())  # half of the edges both hops sampled
    recorded.sent.clear()
    got = sampler.sample(SEEDS, fanouts, False, 5, 1, 4, exclude=exclude)
    assert len(_block_edges(got)[1]) and not np.isin(_block_edges(got)[1], exclude[1]).any()
    again = sampler.sample(SEEDS, fanouts, False, 5, 1, 4, exclude=exclude)
    for a, b in zip(got.blocks, again.blocks, strict=True):
        assert a.edge_ids.tobytes() == b.edge_ids.tobytes() and a.edge_src.tobytes() == b.edge_src.tobytes()
    np.testing.assert_array_equal(got.input_nodes, again.input_nodes)
    # Each partition got only the pairs of the nodes it owns, every hop.
    owner = parts.owners(exclude[0])
    assert {p for p, _ in recorded.sent} == {0, 1}
    for p, sent in recorded.sent:
        assert sent is not None
        np.testing.assert_array_equal(sent[0], exclude[0][owner == p])
        np.testing.assert_array_equal(sent[1], exclude[1][owner == p])


def test_all_neighbors_minus_the_excluded_ones(parts: LocalPartitionSet) -> None:
    sampler = MultiHopSampler(parts)
    dst, eids = _in_edges(parts, SEEDS)
    exclude = (dst[1::3].copy(), eids[1::3].copy())
    got = sampler.sample(SEEDS, [-1], False, 0, 0, 0, exclude=exclude)
    np.testing.assert_array_equal(np.sort(got.blocks[0].edge_ids), np.sort(np.setdiff1d(eids, exclude[1])))


def test_a_partition_owning_no_excluded_dst_is_sent_none(parts: LocalPartitionSet) -> None:
    recorded = _RecordedExclusions(parts)
    only_0 = np.array([parts.stores[0].start], dtype=np.int64)
    exclude = (only_0, _in_edges(parts, only_0)[1][:1])
    MultiHopSampler(recorded).sample(SEEDS, [2, 2], False, 0, 0, 0, exclude=exclude)
    assert {p for p, x in recorded.sent if x is not None} == {0}
    assert any(p == 1 and x is None for p, x in recorded.sent)


@pytest.mark.parametrize(
    ("exclude", "message"),
    [
        ((np.array([0, 1]), np.array([1])), "exclude_dst and exclude_eids must have equal lengths"),
        ((np.array([0.0]), np.array([1])), "exclude_dst must be a 1-D int64 array"),
        ((np.array([0]), np.array([1], dtype=np.uint64)), "exclude_eids must be a 1-D int64 array"),
        ((np.array([100]), np.array([1])), r"exclude_dst: 1 ids outside the graph \[0, 100\)"),
    ],
)
def test_the_sampler_refuses_malformed_pairs(parts: LocalPartitionSet, exclude: Exclusion, message: str) -> None:
    with pytest.raises(InvalidArgument, match=message):
        MultiHopSampler(parts).sample(SEEDS, [2], False, 0, 0, 0, exclude=exclude)
