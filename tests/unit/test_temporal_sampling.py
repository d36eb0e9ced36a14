"""Temporal sampling: exact answers by formula, sample_csr's draws, compaction, concurrent appends."""

from __future__ import annotations

import threading
import time
from collections.abc import Iterator
from pathlib import Path

import numpy as np
import pytest

from graphfeed.common.errors import InvalidArgument, NotFound, ResourceExhausted
from graphfeed.common.partition import PartitionReader
from graphfeed.graph_store.sampling import sample_csr
from graphfeed.graph_store.temporal.store import TemporalSample, TemporalStore
from tests.unit.temporal_graphs import J, N, expected_count, write_temporal

HUB, HUB_EDGES = 5, 150  # row 5 gets this many appended edges (above sample_csr's Floyd limit of 64)


@pytest.fixture
def made(tmp_path: Path) -> tuple[Path, np.ndarray]:
    return write_temporal(tmp_path / "g", num_partitions=1)


@pytest.fixture
def store(made: tuple[Path, np.ndarray], tmp_path: Path) -> Iterator[TemporalStore]:
    s = TemporalStore.open(made[0] / "part-00000", tmp_path / "log", max_blocks=1000)
    yield s
    s.close()


def _roots(n: int, seed: int) -> tuple[np.ndarray, np.ndarray]:
    rng = np.random.default_rng(seed)
    return rng.integers(0, N, n), rng.integers(-5, 10 * J + 5, n)


@pytest.mark.parametrize("fanout", [0, 1, 3, J, -1])
def test_recent_is_the_last_k_edges_before_t(store: TemporalStore, made: tuple[Path, np.ndarray], fanout: int) -> None:
    eid_of = made[1]
    nodes, times = _roots(300, fanout + 10)
    r = store.sample(nodes, times, fanout, "recent")
    n = expected_count(times)
    c = n if fanout == -1 else np.minimum(n, fanout)
    assert np.array_equal(np.diff(r.offsets), c)
    j = np.concatenate([np.arange(a - b, a) for a, b in zip(n, c, strict=True)]).astype(np.int64)
    v = np.repeat(nodes, c)
    assert np.array_equal(r.ts, 10 * j)
    assert np.array_equal(r.nbr, (v * 7 + j) % N)
    assert np.array_equal(r.eid, eid_of[v, j])
    assert r.efeat is None


def _timelines(
    made: tuple[Path, np.ndarray], appended: list[tuple[int, int, int, int]]
) -> list[list[tuple[int, int, int]]]:
    """(src, t, eid) of every row in time order: the formula's edges, then appended ones."""
    eid_of = made[1]
    rows = [[((v * 7 + j) % N, 10 * j, int(eid_of[v, j])) for j in range(J)] for v in range(N)]
    for dst, src, t, eid in appended:
        rows[dst].append((src, t, eid))
    return rows


def _expected_uniform(
    timelines: list, nodes: np.ndarray, times: np.ndarray, fanout: int, seed: int, first: int
) -> tuple:
    """sample_csr run on a CSR whose row i is root i's timeline truncated before times[i]."""
    trunc = [[e for e in timelines[v] if e[1] < t] for v, t in zip(nodes.tolist(), times.tolist(), strict=True)]
    indptr = np.concatenate([[0], np.cumsum([len(x) for x in trunc])]).astype(np.int64)
    flat = np.array([e for x in trunc for e in x], dtype=np.int64).reshape(-1, 3)
    by_eid = dict(zip(flat[:, 2].tolist(), flat[:, 1].tolist(), strict=True))
    offsets, src, eid = sample_csr(
        indptr, flat[:, 0], flat[:, 2], np.arange(len(nodes)), fanout, False, seed, first_position=first
    )
    return offsets, src, np.array([by_eid[e] for e in eid.tolist()], dtype=np.int64), eid


def _append_hub(s: TemporalStore, per_batch: int = 10) -> list[tuple[int, int, int, int]]:
    """HUB_EDGES edges into HUB (and one into each of a few other rows) in small batches."""
    appended = []
    for b in range(HUB_EDGES // per_batch):
        k = np.arange(b * per_batch, (b + 1) * per_batch)
        dst = np.r_[np.full(per_batch, HUB), [b % N]]
        src, t = np.r_[k % N, 3], np.r_[100 + k, 100 + b * per_batch]
        ack = s.append(f"h{b}", src, dst, t)
        order = np.lexsort((t, dst))
        for q, i in enumerate(order):
            appended.append((int(dst[i]), int(src[i]), int(t[i]), ack.first_eid + q))
    return appended


def _same(a: TemporalSample, b: tuple) -> bool:
    return all(np.array_equal(x, y) for x, y in zip((a.offsets, a.nbr, a.ts, a.eid), b, strict=True))


@pytest.mark.parametrize("fanout", [2, 5, 70])
def test_uniform_before_t_draws_exactly_what_sample_csr_draws_on_the_truncated_row(
    store: TemporalStore, made: tuple[Path, np.ndarray], fanout: int
) -> None:
    timelines = _timelines(made, _append_hub(store))
    nodes, times = _roots(200, fanout)
    nodes[::3], times[::3] = HUB, np.random.default_rng(1).integers(50, 100 + HUB_EDGES + 5, len(nodes[::3]))
    seed, first = 2**63 + 12345, 17
    want = _expected_uniform(timelines, nodes, times, fanout, seed, first)
    assert _same(store.sample(nodes, times, fanout, "uniform", seed=seed, first_position=first), want)
    store.compact()
    assert store.info().num_blocks == 0
    assert _same(store.sample(nodes, times, fanout, "uniform", seed=seed, first_position=first), want)


def test_compaction_never_changes_a_sample(store: TemporalStore) -> None:
    rng = np.random.default_rng(3)
    for b in range(40):  # many small blocks touching random rows, new nodes included
        dst = rng.choice(np.r_[np.arange(N), N + np.arange(5)], 30)
        store.append(f"r{b}", rng.integers(0, 2 * N, 30), dst, np.full(30, 100 + b) + rng.integers(0, 2, 30))
    nodes = rng.choice(np.r_[np.arange(N), N + np.arange(7)], 2000)
    times = rng.integers(0, 150, 2000)
    calls = [(f, s) for f in (-1, 0, 3, 40, 100) for s in ("recent", "uniform")]
    before = [store.sample(nodes, times, f, s, seed=9) for f, s in calls]
    assert store.info().num_blocks == 40
    store.compact()
    after = [store.sample(nodes, times, f, s, seed=9) for f, s in calls]
    for x, y in zip(before, after, strict=True):
        assert _same(x, (y.offsets, y.nbr, y.ts, y.eid))
    assert np.diff(after[0].offsets)[nodes == N + 6].sum() == 0  # owned new id never appended: no edges


def test_edge_features_follow_their_edges(made: tuple[Path, np.ndarray], tmp_path: Path) -> None:
    reader = PartitionReader(made[0] / "part-00000")
    e = len(reader.indices)
    assert reader.edge_ts is not None
    reader.edge_feat = np.stack([reader.edge_ids, reader.edge_ts], axis=1).astype(np.float32)
    s = TemporalStore.open(reader, tmp_path / "flog", max_blocks=2)
    try:
        for b in range(5):
            t = np.array([200 + b, 200 + b])
            s.append(
                f"f{b}", np.array([1, 2]), np.array([b, 7]), t, efeat=np.stack([t, t], axis=1).astype(np.float32) * -1
            )
        r = s.sample(np.arange(N), np.full(N, 1000), 4, "uniform", seed=1)
        assert r.efeat is not None and r.efeat.shape == (len(r.eid), 2) and e > 0
        base = r.eid < (1 << 62)
        assert np.array_equal(r.efeat[base], np.stack([r.eid[base], r.ts[base]], axis=1).astype(np.float32))
        assert np.array_equal(r.efeat[~base], -np.stack([r.ts[~base], r.ts[~base]], axis=1).astype(np.float32))
        assert s.sample(np.arange(3), np.full(3, 1000), 4, with_features=False).efeat is None
    finally:
        s.close()


def test_samples_during_appends_see_a_prefix_of_the_batches(store: TemporalStore) -> None:
    """Each batch puts one edge into each of rows 0..9; a sample sees all of a batch or none."""
    rows, batches, done = np.arange(10), 150, threading.Event()
    store.max_blocks = 7  # compactions happen while samples run

    def appender() -> None:
        try:
            for b in range(batches):
                store.append(f"c{b}", np.full(10, b % N), rows, np.full(10, 1000 + b))
        finally:
            done.set()

    thread = threading.Thread(target=appender)
    thread.start()
    seen, deadline = set(), time.monotonic() + 60
    while not done.is_set() and time.monotonic() < deadline:
        r = store.sample(rows, np.full(10, 1 << 60), -1)
        counts = np.diff(r.offsets) - J
        assert (counts == counts[0]).all(), f"rows disagree on how many batches they see: {counts}"
        appended = np.sort(r.eid[r.eid >= 1 << 62] & ((1 << 40) - 1))
        assert np.array_equal(appended, np.arange(10 * counts[0]))  # the edge seqs of batches 0..m-1
        seen.add(int(counts[0]))
    thread.join(timeout=60)
    assert done.is_set() and store.info().seq == batches
    assert len(seen) > 1  # samples did run between appends


@pytest.mark.parametrize(
    ("kwargs", "error", "message"),
    [
        ({"strategy": "latest"}, InvalidArgument, "strategy must be one of"),
        ({"fanout": -2}, InvalidArgument, "fanout must be -1"),
        ({"fanout": 1001}, InvalidArgument, "fanout must be -1"),
        ({"nodes": [1.0, 2.0], "times": [1, 2]}, InvalidArgument, "nodes must be an integer array"),
        ({"nodes": [1, 2], "times": [1]}, InvalidArgument, "same length"),
        ({"nodes": [-1], "times": [1]}, InvalidArgument, "nodes must be ids >= 0"),
        ({"nodes": [N + 3], "times": [1]}, NotFound, f"nodes {N + 3} not owned"),
        ({"nodes": list(range(9)), "times": [1] * 9}, ResourceExhausted, "9 roots exceed the limit of 8"),
        ({"seed": -1}, InvalidArgument, "seed must be in"),
    ],
)
def test_bad_sample_requests_are_refused(
    made: tuple[Path, np.ndarray], kwargs: dict, error: type, message: str
) -> None:
    # two partitions: ids >= N belong to id % 2, so N + 3 is partition 1's
    root = write_temporal(made[0].parent / "g2", num_partitions=2)[0]
    s = TemporalStore.open(root / "part-00000", None, max_ids_per_request=8)
    args = {"nodes": [1], "times": [5], "fanout": 2} | kwargs
    with pytest.raises(error, match=message):
        s.sample(np.array(args.pop("nodes")), np.array(args.pop("times")), **args)
    s.close()
