"""One-hop sampling: sample_csr on a handmade CSR, and GraphStore on the arithmetic graph."""

from __future__ import annotations

import itertools
from collections.abc import Iterator
from pathlib import Path

import numpy as np
import pytest

from graphfeed.graph_store import sampling
from graphfeed.graph_store.sampling import sample_csr
from graphfeed.graph_store.store import GraphStore
from tests.graphs import arithmetic_graph, expected_in_neighbors, write_arithmetic

N, MAX_DEG = 100, 7  # the arith_root fixture

# Handmade CSR: row r has degree DEGS[r]; position i holds neighbor 100+i and edge id 200+i.
DEGS = np.array([0, 1, 3, 5, 0, 8])
INDPTR = np.concatenate([[0], np.cumsum(DEGS)]).astype(np.int64)
INDICES = 100 + np.arange(INDPTR[-1], dtype=np.int64)
EIDS = 200 + np.arange(INDPTR[-1], dtype=np.int64)
ROWS = np.arange(len(DEGS), dtype=np.int64)


def _rng(seed: int = 0) -> int:
    """The sampler's only source of randomness is an integer seed (counter-based draws)."""
    return seed


def _segments(offsets: np.ndarray, values: np.ndarray) -> list[np.ndarray]:
    return [values[offsets[i] : offsets[i + 1]] for i in range(len(offsets) - 1)]


def _all_of(row: int) -> np.ndarray:
    return INDICES[INDPTR[row] : INDPTR[row + 1]]


# -- sample_csr on the handmade CSR ---------------------------------------------------------


def test_fanout_all_returns_every_neighbor_in_csr_order() -> None:
    offsets, src, eids = sample_csr(INDPTR, INDICES, EIDS, ROWS, -1, False, _rng())
    assert offsets.tolist() == INDPTR.tolist()
    assert src.tolist() == INDICES.tolist()
    assert eids.tolist() == EIDS.tolist()


def test_fanout_zero_is_empty() -> None:
    for replace in (False, True):
        offsets, src, eids = sample_csr(INDPTR, INDICES, EIDS, ROWS, 0, replace, _rng())
        assert offsets.tolist() == [0] * (len(ROWS) + 1)
        assert len(src) == len(eids) == 0


def test_fanout_above_degree_takes_all_without_replacement() -> None:
    offsets, src, _ = sample_csr(INDPTR, INDICES, EIDS, ROWS, 20, False, _rng())
    assert offsets.tolist() == INDPTR.tolist()
    assert src.tolist() == INDICES.tolist()


def test_without_replacement_is_sorted_distinct_subset() -> None:
    for k in (1, 2, 4):
        offsets, src, eids = sample_csr(INDPTR, INDICES, EIDS, ROWS, k, False, _rng(k))
        assert np.diff(offsets).tolist() == np.minimum(DEGS, k).tolist()
        for r, seg in enumerate(_segments(offsets, src)):
            assert set(seg) <= set(_all_of(r))
            assert np.all(np.diff(seg) > 0), "distinct and in CSR order"
        assert (eids - 200).tolist() == (src - 100).tolist(), "edge id travels with its position"


def test_with_replacement_draws_exactly_fanout_for_rows_with_neighbors() -> None:
    offsets, src, eids = sample_csr(INDPTR, INDICES, EIDS, ROWS, 6, True, _rng())
    assert np.diff(offsets).tolist() == [0 if d == 0 else 6 for d in DEGS]
    for r, seg in enumerate(_segments(offsets, src)):
        assert set(seg) <= set(_all_of(r))
        assert np.all(np.diff(seg) >= 0)
    assert (eids - 200).tolist() == (src - 100).tolist()
    # Row 1 has one neighbor: every draw is it.
    assert _segments(offsets, src)[1].tolist() == [100] * 6


def test_empty_rows_and_repeated_rows() -> None:
    offsets, src, eids = sample_csr(INDPTR, INDICES, EIDS, np.empty(0, np.int64), 3, False, _rng())
    assert offsets.tolist() == [0] and len(src) == len(eids) == 0
    rows = np.full(200, 5, dtype=np.int64)  # repeats are sampled independently
    offsets, src, _ = sample_csr(INDPTR, INDICES, EIDS, rows, 3, False, _rng())
    assert len({tuple(s) for s in _segments(offsets, src)}) > 1


def test_fanout_below_minus_one_is_rejected() -> None:
    with pytest.raises(ValueError, match="fanout"):
        sample_csr(INDPTR, INDICES, EIDS, ROWS, -2, False, _rng())


def test_alloc_receives_the_offsets_and_the_sample_lands_in_its_arrays() -> None:
    """How a graph-store samples straight into its response segment."""
    expected = sample_csr(INDPTR, INDICES, EIDS, ROWS, 2, False, _rng(3))
    seen: list[np.ndarray] = []
    bufs = (np.full(64, -7, dtype=np.int64), np.full(64, -7, dtype=np.int64))

    def alloc(offsets: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
        seen.append(offsets.copy())
        return bufs[0][: offsets[-1]], bufs[1][: offsets[-1]]

    offsets, src, eids = sample_csr(INDPTR, INDICES, EIDS, ROWS, 2, False, _rng(3), alloc)
    assert len(seen) == 1 and seen[0].tolist() == expected[0].tolist() == offsets.tolist()
    assert np.shares_memory(src, bufs[0]) and np.shares_memory(eids, bufs[1])
    assert src.tolist() == expected[1].tolist() and eids.tolist() == expected[2].tolist()
    with pytest.raises(ValueError, match=r"alloc must return two int64 \(or int32, for ids that fit\) arrays"):
        sample_csr(INDPTR, INDICES, EIDS, ROWS, 2, False, _rng(3), lambda _: (bufs[0][:1], bufs[1][:1]))
    narrow = (np.full(64, -7, dtype=np.int32), np.full(64, -7, dtype=np.int32))  # as answers go on the wire
    _, src32, eids32 = sample_csr(
        INDPTR, INDICES, EIDS, ROWS, 2, False, _rng(3), lambda o: (narrow[0][: o[-1]], narrow[1][: o[-1]])
    )
    assert (
        src32.dtype == np.int32 and src32.tolist() == expected[1].tolist() and eids32.tolist() == expected[2].tolist()
    )


def test_same_seed_gives_same_bytes() -> None:
    for replace in (False, True):
        a = sample_csr(INDPTR, INDICES, EIDS, ROWS, 2, replace, _rng(7))
        b = sample_csr(INDPTR, INDICES, EIDS, ROWS, 2, replace, _rng(7))
        c = sample_csr(INDPTR, INDICES, EIDS, np.repeat(ROWS, 20), 2, replace, _rng(8))
        d = sample_csr(INDPTR, INDICES, EIDS, np.repeat(ROWS, 20), 2, replace, _rng(9))
        assert all(x.tobytes() == y.tobytes() for x, y in zip(a, b))
        assert c[1].tobytes() != d[1].tobytes()


@pytest.mark.parametrize("k", [2, sampling.SMALL_FANOUT + 1])
def test_every_subset_is_equally_likely(k: int) -> None:
    """Floyd (k=2) and the reservoir (k=65): pairs drawn from the k+3 neighbors are uniform."""
    deg = k + 3
    indptr = np.array([0, deg], dtype=np.int64)
    nbrs = np.arange(deg, dtype=np.int64)
    _, src, _ = sample_csr(indptr, nbrs, nbrs, np.zeros(20_000, np.int64), k, False, _rng(3))
    picks = src.reshape(-1, k)
    assert np.all(np.diff(picks, axis=1) > 0)
    # Each neighbor is in a uniform k-subset with probability k/deg.
    freq = np.bincount(src, minlength=deg) / 20_000
    assert np.all(np.abs(freq - k / deg) < 0.02), freq
    if k == 2:  # 5 choose 2 = 10 subsets, 20000 draws: each about 2000 (binomial sd ~42)
        counts: dict[tuple[int, ...], int] = dict.fromkeys(itertools.combinations(range(5), 2), 0)
        for p, c in zip(*np.unique(picks, axis=0, return_counts=True)):
            counts[tuple(int(x) for x in p)] = int(c)
        assert all(abs(c - 2000) < 250 for c in counts.values()), counts


@pytest.mark.parametrize("seed", [0, 12345, 2**63 + 7, 2**64 - 1])
@pytest.mark.parametrize("fanout", [-1, 0, 1, 5, 15, sampling.SMALL_FANOUT, sampling.SMALL_FANOUT + 1, 200])
@pytest.mark.parametrize("replace", [False, True])
def test_bit_identical_to_the_gpu_reference(seed: int, fanout: int, replace: bool) -> None:
    """The compiled CPU sampler and the GPU kernels' NumPy specification give the same bytes."""
    from graphfeed.gpu_kernels import reference

    rng = np.random.default_rng(seed % 1000)
    degs = rng.integers(0, 300, size=300)
    indptr = np.concatenate([[0], np.cumsum(degs)]).astype(np.int64)
    indices = rng.integers(0, 10**6, int(indptr[-1]))
    eids = np.arange(int(indptr[-1]), dtype=np.int64) + 5
    rows = rng.integers(0, 300, 500)
    spec = reference.sample_csr(indptr, indices, eids, rows, fanout, replace, seed)
    for ids in (np.int64, np.int32):  # partitions store int32 ids when the graph allows; output is int64 either way
        ours = sample_csr(indptr, indices.astype(ids), eids.astype(ids), rows, fanout, replace, seed)
        for a, b in zip(ours, spec):
            assert a.dtype == b.dtype and a.tobytes() == b.tobytes()


@pytest.mark.parametrize(
    ("fanout", "replace"), [(3, False), (3, True), (sampling.SMALL_FANOUT + 2, False), (-1, False)]
)
def test_first_position_samples_the_tail_of_the_whole_request(fanout: int, replace: bool) -> None:
    rng = np.random.default_rng(7)
    degs = rng.integers(0, 150, size=40)
    indptr = np.concatenate([[0], np.cumsum(degs)]).astype(np.int64)
    nbrs = np.arange(indptr[-1], dtype=np.int64)
    rows = rng.integers(0, 40, 60)
    offsets, src, eids = sample_csr(indptr, nbrs, nbrs + 9, rows, fanout, replace, 123)
    for k in (1, 17, 59):
        o, s, e = sample_csr(indptr, nbrs, nbrs + 9, rows[k:], fanout, replace, 123, first_position=k)
        assert (
            np.array_equal(o, offsets[k:] - offsets[k])
            and np.array_equal(s, src[offsets[k] :])
            and np.array_equal(e, eids[offsets[k] :])
        )
    with pytest.raises(ValueError, match="first_position"):
        sample_csr(indptr, nbrs, nbrs, rows, fanout, replace, 1, first_position=1 << 63)


def test_large_fanout_uses_the_reservoir_and_keeps_the_contract() -> None:
    k = sampling.SMALL_FANOUT + 6
    degs = np.array([k - 3, k, k + 1, 3 * k], dtype=np.int64)
    indptr = np.concatenate([[0], np.cumsum(degs)]).astype(np.int64)
    nbrs = np.arange(indptr[-1], dtype=np.int64)
    offsets, src, _ = sample_csr(indptr, nbrs, nbrs, np.arange(4, dtype=np.int64), k, False, _rng())
    assert np.diff(offsets).tolist() == np.minimum(degs, k).tolist()
    for r, seg in enumerate(_segments(offsets, src)):
        assert np.all(np.diff(seg) > 0)
        assert seg.min() >= indptr[r] and seg.max() < indptr[r + 1]


# -- GraphStore on the arithmetic graph -----------------------------------------------------


@pytest.fixture(scope="module")
def stores(arith_root: Path) -> Iterator[list[GraphStore]]:
    opened = [GraphStore.open(arith_root / f"part-{p:05d}") for p in range(2)]
    yield opened
    for s in opened:
        s.close()


def _owned(store: GraphStore) -> np.ndarray:
    return np.arange(store.start, store.stop, dtype=np.int64)


def test_fanout_all_returns_exactly_the_in_neighbors(stores: list[GraphStore], orig: np.ndarray) -> None:
    for store in stores:
        seeds = _owned(store)
        out = store.sample_neighbors(seeds, -1, False, 0)
        for seed, seg in zip(seeds, _segments(out.offsets, out.src)):
            want = expected_in_neighbors(int(orig[seed]), N, MAX_DEG)
            assert len(seg) == len(want)
            assert set(orig[seg].tolist()) == want


def test_without_replacement_on_the_graph(stores: list[GraphStore], orig: np.ndarray) -> None:
    for store, k in itertools.product(stores, (1, 3, 5, 10)):
        seeds = _owned(store)
        out = store.sample_neighbors(seeds, k, False, 11)
        for seed, seg in zip(seeds, _segments(out.offsets, out.src)):
            want = expected_in_neighbors(int(orig[seed]), N, MAX_DEG)
            got = orig[seg].tolist()
            assert len(got) == min(len(want), k)
            assert len(set(got)) == len(got)
            assert set(got) <= want


def test_with_replacement_on_the_graph(stores: list[GraphStore], orig: np.ndarray) -> None:
    for store in stores:
        seeds = _owned(store)
        out = store.sample_neighbors(seeds, 5, True, 12)
        assert np.diff(out.offsets).tolist() == [5] * len(seeds)  # every node has degree >= 1
        for seed, seg in zip(seeds, _segments(out.offsets, out.src)):
            assert set(orig[seg].tolist()) <= expected_in_neighbors(int(orig[seed]), N, MAX_DEG)


def test_edge_ids_name_the_sampled_edge(stores: list[GraphStore], orig: np.ndarray) -> None:
    g = arithmetic_graph(N, MAX_DEG)
    for store, (fanout, replace) in itertools.product(stores, [(-1, False), (2, False), (4, True)]):
        seeds = _owned(store)
        out = store.sample_neighbors(seeds, fanout, replace, 5)
        dst = np.repeat(seeds, np.diff(out.offsets))
        assert np.array_equal(g.src[out.edge_ids], orig[out.src])
        assert np.array_equal(g.dst[out.edge_ids], orig[dst])


def test_rng_seed_determines_the_sample(stores: list[GraphStore]) -> None:
    seeds = _owned(stores[1])
    for replace in (False, True):
        a = stores[1].sample_neighbors(seeds, 2, replace, 42)
        b = stores[1].sample_neighbors(seeds.copy(), 2, replace, 42)
        c = stores[1].sample_neighbors(seeds, 2, replace, 43)
        assert a.offsets.tobytes() == b.offsets.tobytes()
        assert a.src.tobytes() == b.src.tobytes() and a.edge_ids.tobytes() == b.edge_ids.tobytes()
        assert a.src.tobytes() != c.src.tobytes()


@pytest.mark.parametrize("replace", [False, True])
def test_neighbor_frequencies_are_uniform(tmp_path: Path, replace: bool) -> None:
    """Node 49 of a max_deg-60 graph has degree 50: 4000 samples of 5 pick each ~400 times."""
    root = write_arithmetic(tmp_path, n=120, max_deg=60, num_partitions=1)
    store = GraphStore.open(root / "part-00000")
    try:
        orig = np.load(root / "orig_ids.npy")
        (gid,) = np.flatnonzero(orig == 49)
        out = store.sample_neighbors(np.full(4000, gid, dtype=np.int64), 5, replace, 2024)
        nbrs, counts = np.unique(orig[out.src], return_counts=True)
        assert set(nbrs.tolist()) == expected_in_neighbors(49, 120, 60)
        # Binomial(20000, 1/50) without replacement is Binomial(4000, 0.1) per seed: sd ~19-20.
        assert np.all(np.abs(counts - 400) < 100), counts
    finally:
        store.close()
