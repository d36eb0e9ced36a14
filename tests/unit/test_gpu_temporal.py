"""Temporal neighbour sampling without a GPU: the NumPy reference (``reference.sample_temporal``)
exact on an arithmetic temporal graph, uniform-before-t equal to ``sample_csr`` on the CSR cut
at each root's time, uniform over subsets, and the unmodified CUDA kernels (temporal.cu) run by
the CPU emulator, bit-identical to the reference."""

from __future__ import annotations

import math
from collections import Counter
from collections.abc import Callable
from functools import partial
from typing import Any

import numpy as np
import pytest
from scipy import stats

from graphfeed.gpu_kernels import kernels, reference
from graphfeed.gpu_kernels.emulator import EmulatorBackend, compiler
from graphfeed.graph_store.sampling import sample_csr as cpu_sample_csr

# Row v has DEG[v] edges; its j-th edge (j = 0, 1, ...) is at t = 10 j from nbr (v + j + 1) % R,
# with eid 1000 v + j. So a root (v, t) sees n = clip(ceil(t / 10), 0, DEG[v]) edges: positions
# [0, n). Degrees cover every path: empty, k - 1, k, k + 1 around 5 and 64, and long rows.
DEG = np.array([0, 1, 2, 4, 5, 6, 10, 63, 64, 65, 66, 100, 150, 3])
R = len(DEG)
INDPTR = np.concatenate([[0], np.cumsum(DEG)]).astype(np.int64)
ROW_OF = np.repeat(np.arange(R, dtype=np.int64), DEG)
LOCAL = np.arange(INDPTR[-1], dtype=np.int64) - INDPTR[ROW_OF]
TS = 10 * LOCAL
NBR = (ROW_OF + LOCAL + 1) % R
EID = 1000 * ROW_OF + LOCAL
CSR = (INDPTR, NBR, TS, EID)
FANOUTS = (-1, 0, 1, 5, 64, 65)
STRATEGIES = ("recent", "uniform")


def _roots() -> tuple[np.ndarray, np.ndarray]:
    """Every row at times before every edge, on an edge, between edges, after every edge."""
    rows, times = [], []
    for v, d in enumerate(DEG):
        for t in (-(10**12), -10, 0, 1, 9, 10, 11, 10 * d // 2, 10 * d - 10, 10 * d - 9, 10 * d, 10 * d + 1, 10**12):
            rows.append(v)
            times.append(t)
    return np.array(rows, dtype=np.int64), np.array(times, dtype=np.int64)


ROWS, TIMES = _roots()
BEFORE = np.clip(-(-TIMES // 10), 0, DEG[ROWS])  # ceil(t / 10), clipped to the degree


def _segments(offsets: np.ndarray, values: np.ndarray) -> list[np.ndarray]:
    return [values[offsets[i] : offsets[i + 1]] for i in range(len(offsets) - 1)]


def _expected_count(k: int) -> np.ndarray:
    return BEFORE if k == -1 else np.minimum(BEFORE, k)


def _check_edges_by_formula(out: tuple[np.ndarray, ...], rows: np.ndarray) -> list[np.ndarray]:
    """Every sampled edge is the edge its eid names (nbr and ts by formula); returns the local
    row positions of each root's samples."""
    offsets, nbr, ts, eid = out
    assert all(a.dtype == np.int64 for a in out) and len(offsets) == len(rows) + 1
    root = np.repeat(np.arange(len(rows)), np.diff(offsets))
    pos = eid - 1000 * rows[root]
    assert np.array_equal(ts, 10 * pos) and np.array_equal(nbr, (rows[root] + pos + 1) % R)
    return _segments(offsets, pos)


# -- the reference's semantics, by formula ---------------------------------------------------


@pytest.mark.parametrize("fanout", FANOUTS)
def test_recent_is_the_last_min_n_k_edges_before_t(fanout: int) -> None:
    out = reference.sample_temporal(*CSR, ROWS, TIMES, fanout, "recent", seed=5)
    for pos, n, c in zip(_check_edges_by_formula(out, ROWS), BEFORE, _expected_count(fanout)):
        assert pos.tolist() == list(range(n - c, n))


@pytest.mark.parametrize("fanout", FANOUTS)
def test_uniform_takes_distinct_edges_before_t_in_time_order(fanout: int) -> None:
    out = reference.sample_temporal(*CSR, ROWS, TIMES, fanout, "uniform", seed=5)
    for pos, n, c in zip(_check_edges_by_formula(out, ROWS), BEFORE, _expected_count(fanout)):
        assert len(pos) == c and np.all(np.diff(pos) > 0) and (c == 0 or (pos[0] >= 0 and pos[-1] < n))
        if c == n:  # nothing to choose: every edge before t
            assert pos.tolist() == list(range(n))


def test_an_event_never_sees_itself_or_later_events() -> None:
    # ties: three edges at t = 5 (arrival order kept), one at t = 7
    indptr, ts = np.array([0, 4]), np.array([5, 5, 5, 7])
    nbr, eid = np.array([10, 11, 12, 13]), np.arange(4)
    times = np.array([4, 5, 6, 7, 8])
    for strategy in STRATEGIES:
        offsets, got_nbr, got_ts, _ = reference.sample_temporal(
            indptr, nbr, ts, eid, np.zeros(5, dtype=np.int64), times, -1, strategy, 0
        )
        assert np.diff(offsets).tolist() == [0, 0, 3, 3, 4]
        assert got_nbr.tolist() == [10, 11, 12] * 2 + [10, 11, 12, 13]
        assert all(np.all(s < t) for s, t in zip(_segments(offsets, got_ts), times))


def _cut_at_before(rows: np.ndarray, before: np.ndarray) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """A CSR with one row per root: the root's row cut to its first ``before`` positions."""
    indptr = np.concatenate([[0], np.cumsum(before)]).astype(np.int64)
    pos = INDPTR[rows][np.repeat(np.arange(len(rows)), before)] + reference._segment_arange(before)
    return indptr, NBR[pos], EID[pos]


@pytest.mark.parametrize("fanout", FANOUTS)
def test_uniform_before_t_is_sample_csr_on_the_row_cut_at_t(fanout: int) -> None:
    cut, nbr, eid = _cut_at_before(ROWS, BEFORE)
    every = np.arange(len(ROWS), dtype=np.int64)
    for seed in (0, 2**64 - 1):
        offsets, got_nbr, _, got_eid = reference.sample_temporal(*CSR, ROWS, TIMES, fanout, "uniform", seed)
        want = reference.sample_csr(cut, nbr, eid, every, fanout, False, seed)
        assert (
            np.array_equal(offsets, want[0]) and np.array_equal(got_nbr, want[1]) and np.array_equal(got_eid, want[2])
        )
        # the graph-store's compiled sampler, from a later batch position: the same stream
        tail = reference.sample_temporal(*CSR, ROWS[7:], TIMES[7:], fanout, "uniform", seed, first_position=7)
        cpu = cpu_sample_csr(cut, nbr, eid, every[7:], fanout, False, seed, first_position=7)
        assert np.array_equal(tail[0], cpu[0]) and np.array_equal(tail[1], cpu[1]) and np.array_equal(tail[3], cpu[2])


@pytest.mark.parametrize("strategy", STRATEGIES)
@pytest.mark.parametrize("fanout", [3, 65])
def test_a_tail_with_first_position_is_the_tail_of_the_whole_batch(strategy: str, fanout: int) -> None:
    whole = reference.sample_temporal(*CSR, ROWS, TIMES, fanout, strategy, 11)
    j = 40
    tail = reference.sample_temporal(*CSR, ROWS[j:], TIMES[j:], fanout, strategy, 11, first_position=j)
    assert np.array_equal(tail[0], whole[0][j:] - whole[0][j])
    for got, want in zip(tail[1:], whole[1:]):
        assert np.array_equal(got, want[whole[0][j] :])


def test_repeated_roots_draw_independently_and_the_seed_decides() -> None:
    rows, times = np.full(50, 12, dtype=np.int64), np.full(50, 10**6, dtype=np.int64)  # 150 edges before t
    a = reference.sample_temporal(*CSR, rows, times, 5, "uniform", 1)
    b = reference.sample_temporal(*CSR, rows, times, 5, "uniform", 1)
    c = reference.sample_temporal(*CSR, rows, times, 5, "uniform", 2)
    assert all(np.array_equal(x, y) for x, y in zip(a, b))
    assert len({tuple(s) for s in _segments(a[0], a[3])}) > 40  # C(150, 5) subsets: repeats differ
    assert not np.array_equal(a[3], c[3])
    recent = reference.sample_temporal(*CSR, rows, times, 5, "recent", 1)
    assert len({tuple(s) for s in _segments(recent[0], recent[3])}) == 1  # nothing random


def _subset_counts(deg: int, before: int, k: int, draws: int) -> Counter:
    """How often each k-subset of the ``before`` edges of a row of ``deg`` comes up."""
    indptr, ts = np.array([0, deg]), np.arange(deg, dtype=np.int64)
    times = np.full(draws, before, dtype=np.int64)  # ts = position: exactly `before` edges before t
    offsets, _, _, eid = reference.sample_temporal(
        indptr, ts, ts, ts, np.zeros(draws, dtype=np.int64), times, k, "uniform", 3
    )
    return Counter(tuple(s) for s in _segments(offsets, eid))


def test_uniform_before_t_picks_every_subset_equally_often() -> None:
    counts = _subset_counts(20, 7, 3, 35_000)  # Floyd on n = 7 of a row of 20: C(7, 3) = 35 subsets
    assert len(counts) == math.comb(7, 3) and all(max(s) < 7 for s in counts)
    assert stats.chisquare(list(counts.values())).pvalue > 1e-4


def test_uniform_before_t_large_fanout_is_uniform() -> None:
    n, k, draws = 67, 65, 40_000  # reservoir: C(67, 65) = 2211 subsets = the 2 positions left out
    counts = _subset_counts(120, n, k, draws)
    left_out = Counter(tuple(sorted(set(range(n)) - set(s))) for s in counts.elements())
    assert len(left_out) == math.comb(n, 2)
    assert stats.chisquare(list(left_out.values())).pvalue > 1e-4


def test_two_hops_see_only_the_past_of_the_edge_they_came_from() -> None:
    hop1 = reference.sample_temporal(*CSR, ROWS, TIMES, 5, "uniform", 9)
    hop2 = reference.sample_temporal(*CSR, hop1[1], hop1[2], 5, "uniform", 9)  # roots: sampled nbr at their edge's t
    _check_edges_by_formula(hop2, hop1[1])
    assert all(np.all(s < t) for s, t in zip(_segments(hop2[0], hop2[2]), hop1[2]))
    assert np.diff(hop2[0]).sum() > 0


# -- validation, the same in the reference and the kernel ------------------------------------

needs_cxx = pytest.mark.skipif(compiler() is None, reason="no C++20 compiler for the kernel emulator")


@pytest.fixture(scope="module")
def emu() -> EmulatorBackend:
    return EmulatorBackend(block=64, max_blocks=3)  # few blocks: the grid-stride loops run many times


def _implementations() -> list[Any]:
    impls: list[Any] = [pytest.param(lambda: reference.sample_temporal, id="reference")]
    impls.append(
        pytest.param(lambda: partial(kernels.sample_temporal, backend=EmulatorBackend()), id="kernel", marks=needs_cxx)
    )
    return impls


@pytest.mark.parametrize("impl", _implementations())
@pytest.mark.parametrize(
    ("change", "match"),
    [
        ({"fanout": -2}, "fanout"),
        ({"strategy": "oldest"}, "strategy"),
        ({"seed": -1}, "seed"),
        ({"seed": 2**64}, "seed"),
        ({"first_position": -1}, "first_position"),
        ({"rows": np.array([R])}, "rows"),
        ({"rows": np.array([-1])}, "rows"),
        ({"rows": np.array([0.5])}, "rows"),
        ({"times": np.array([1, 2])}, "times"),
        ({"times": np.array([1.0])}, "times"),
        ({"ts": TS[:-1]}, "length"),
        ({"indptr": np.array([], dtype=np.int64)}, "indptr"),
        ({"indptr": np.array([0, INDPTR[-1] + 1])}, "indptr"),
    ],
)
def test_bad_arguments_are_refused_clearly(impl: Callable[[], Any], change: dict[str, Any], match: str) -> None:
    args = {
        "indptr": INDPTR,
        "nbr": NBR,
        "ts": TS,
        "eid": EID,
        "rows": np.array([3]),
        "times": np.array([20]),
        "fanout": 2,
        "strategy": "recent",
        "seed": 0,
        "first_position": 0,
    }
    with pytest.raises(ValueError, match=match):
        impl()(**{**args, **change})


# -- the kernels on the CPU emulator: bit for bit --------------------------------------------


@needs_cxx
@pytest.mark.parametrize("strategy", STRATEGIES)
@pytest.mark.parametrize("fanout", FANOUTS)
def test_emulated_temporal_sampling_is_bit_identical(emu: EmulatorBackend, fanout: int, strategy: str) -> None:
    for seed, first in ((0, 0), (2**64 - 1, 3), (12345, 2**40)):
        got = kernels.sample_temporal(*CSR, ROWS, TIMES, fanout, strategy, seed, first, backend=emu)
        want = reference.sample_temporal(*CSR, ROWS, TIMES, fanout, strategy, seed, first)
        for g, w in zip(got, want):
            assert g.dtype == np.int64 and np.array_equal(g, w)


@needs_cxx
@pytest.mark.parametrize("strategy", STRATEGIES)
def test_emulated_temporal_sampling_edge_cases(emu: EmulatorBackend, strategy: str) -> None:
    empty = np.empty(0, dtype=np.int64)
    for rows, times in [
        (empty, empty),  # no roots
        (np.zeros(5, dtype=np.int64), np.arange(5)),  # only an empty row
        (np.arange(R), np.full(R, -1)),  # before every edge: nothing
        (np.arange(R), np.full(R, 10**15)),  # after every edge: whole rows
    ]:
        for fanout in (-1, 5, 65):
            got = kernels.sample_temporal(*CSR, rows, times, fanout, strategy, 1, backend=emu)
            want = reference.sample_temporal(*CSR, rows, times, fanout, strategy, 1)
            assert all(np.array_equal(g, w) for g, w in zip(got, want))
    offsets, *_ = kernels.sample_temporal(*CSR, np.arange(R), np.full(R, 10**15), -1, strategy, 1, backend=emu)
    assert np.array_equal(np.diff(offsets), DEG)
    no_edges = (np.zeros(3, dtype=np.int64), empty, empty, empty)  # a graph with two rows and no edge
    offsets, nbr, *_ = kernels.sample_temporal(
        *no_edges, np.array([0, 1]), np.array([0, 9]), 3, strategy, 0, backend=emu
    )
    assert offsets.tolist() == [0, 0, 0] and nbr.size == 0


@pytest.mark.parametrize("strategy", ["recent", "uniform"])
@pytest.mark.parametrize("fanout", [0, 1, 5, 64, 65, -1])
def test_graph_store_sampler_draws_what_the_reference_draws(strategy: str, fanout: int) -> None:
    """The graph-store's compiled sampler (CPU), the NumPy reference and (test above) the CUDA
    kernel: one set of draws, bit for bit."""
    from graphfeed.graph_store.temporal.sampling import sample_temporal

    rng = np.random.default_rng(fanout + 7)
    deg = rng.integers(0, 150, size=300)
    indptr = np.zeros(301, dtype=np.int64)
    np.cumsum(deg, out=indptr[1:])
    e = int(indptr[-1])
    ts = np.concatenate([np.sort(rng.integers(0, 1000, size=d)) for d in deg]).astype(np.int64)
    nbr, eid = rng.integers(0, 300, size=e).astype(np.int64), np.arange(e, dtype=np.int64)
    rows = rng.integers(0, 300, size=2000).astype(np.int64)
    times = rng.integers(-10, 1100, size=2000).astype(np.int64)
    want = reference.sample_temporal(indptr, nbr, ts, eid, rows, times, fanout, strategy, 2**63 + 5, 11)
    got = sample_temporal(indptr, nbr, ts, eid, rows, times, fanout, strategy, 2**63 + 5, 11)
    for w, g in zip(want, got):
        np.testing.assert_array_equal(w, g)
