"""Snapshots of the compacted temporal graph: the log is truncated, a restart replays only the
batches after the snapshot, and a kill -9 at any step of writing one loses no acknowledged edge."""

from __future__ import annotations

import json
import signal
import subprocess
import sys
import textwrap
import time
from pathlib import Path

import numpy as np
import pytest

from graphfeed.common.errors import FailedPrecondition
from graphfeed.graph_store.temporal.append_log import TemporalLog
from graphfeed.graph_store.temporal.snapshot import load_arrays
from graphfeed.graph_store.temporal.store import TemporalStore
from tests.unit.temporal_graphs import N, write_temporal

APPENDED = 1 << 62
LAYOUT = {"partition_id": 0, "num_partitions": 1, "edge_feat_dim": 0}
ROWS = np.array([0, 7, 19])
NEW = N + np.arange(3)  # ids that arrive by append (the one partition owns them)
SNAPSHOTS = {"max_blocks": 2, "compact_min_edges": 10**9, "snapshot_min_edges": 1}  # a snapshot after most compactions


@pytest.fixture
def part(tmp_path: Path) -> Path:
    return write_temporal(tmp_path / "g", num_partitions=1)[0] / "part-00000"


def _batch(i: int) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """Batch i: 4 edges from i into ROWS and the new node NEW[i % 3], at t = 1000 + i."""
    return np.full(4, i), np.r_[ROWS, NEW[i % 3]], np.full(4, 1000 + i)


def _append(s: TemporalStore, i: int) -> int:
    """Appends batch i; its first eid."""
    return s.append(f"k{i}", *_batch(i)).first_eid


def _appended_times(s: TemporalStore) -> list[list[int]]:
    """The appended edges' times of ROWS, then of NEW."""
    nodes = np.r_[ROWS, NEW]
    r = s.sample(nodes, np.full(len(nodes), 1 << 62), -1)
    return [r.ts[a:b][r.eid[a:b] >= APPENDED].tolist() for a, b in zip(r.offsets[:-1], r.offsets[1:], strict=True)]


def _want(batches: int) -> list[list[int]]:
    return [[1000 + i for i in range(batches)]] * 3 + [[1000 + i for i in range(k, batches, 3)] for k in range(3)]


def _snapshots(log_dir: Path) -> list[str]:
    return sorted(p.name for p in (log_dir / "snapshots").glob("*")) if (log_dir / "snapshots").is_dir() else []


def _logged_seqs(log_dir: Path) -> list[int]:
    db = TemporalLog(log_dir, LAYOUT)
    try:
        return [b.seq for b in db.batches()]
    finally:
        db.close()


def _fill(part: Path, log_dir: Path, batches: int) -> list[int]:
    """Appends batches 0..batches-1 with snapshots on, waits for the first snapshot, closes; their first eids."""
    s = TemporalStore.open(part, log_dir, **SNAPSHOTS)
    try:
        firsts = [_append(s, i) for i in range(batches)]
        deadline = time.monotonic() + 60
        while not any(n.startswith("snap-") for n in _snapshots(log_dir)):
            assert time.monotonic() < deadline, "no snapshot was written"
            time.sleep(0.01)
    finally:
        s.close()  # waits for a snapshot being written
    return firsts


def test_a_snapshot_truncates_the_log_and_a_restart_replays_only_what_follows(part: Path, tmp_path: Path) -> None:
    log_dir = tmp_path / "log"
    firsts = _fill(part, log_dir, 70)
    (snap,) = _snapshots(log_dir)
    covered = json.loads((log_dir / "snapshots" / snap / "manifest.json").read_text())["seq"]
    assert 0 < covered <= 70 and _logged_seqs(log_dir) == list(range(covered + 1, 71))
    arrays = load_arrays(
        log_dir / "snapshots" / snap, json.loads((log_dir / "snapshots" / snap / "manifest.json").read_text())
    )
    eid = arrays["eid"]
    assert (
        len(eid) == 4 * covered and (eid & APPENDED).all()
    )  # the appended edges only: ingest edges stay in the partition
    s = TemporalStore.open(part, log_dir)
    try:
        assert s.info().seq == 70 and s.info().num_appended == 280
        assert _appended_times(s) == _want(70)
        ref = TemporalStore.open(part, tmp_path / "ref")  # the same batches, never snapshotted
        try:
            assert [_append(ref, i) for i in range(70)] == firsts
            rng = np.random.default_rng(4)
            nodes, times = rng.choice(np.r_[np.arange(N), NEW], 500), rng.integers(0, 1100, 500)
            for strategy in ("recent", "uniform"):
                a, b = s.sample(nodes, times, 5, strategy, seed=11), ref.sample(nodes, times, 5, strategy, seed=11)
                assert all(getattr(a, f).tobytes() == getattr(b, f).tobytes() for f in ("offsets", "nbr", "ts", "eid"))
        finally:
            ref.close()
        for i in (0, covered - 1, 69):  # acks of truncated batches are kept: a retry is answered, not applied
            retry = s.append(f"k{i}", *_batch(i))
            assert retry.duplicate and retry.first_eid == firsts[i]
        assert _append(s, 70) == firsts[-1] + 4  # the edge seqs carry on across the snapshot
    finally:
        s.close()


def test_a_torn_snapshot_is_ignored_and_a_damaged_one_after_truncation_is_refused(part: Path, tmp_path: Path) -> None:
    log_dir = tmp_path / "log"
    _fill(part, log_dir, 40)
    (snap,) = _snapshots(log_dir)
    torn = log_dir / "snapshots" / "snap-9999999999999999"
    torn.mkdir()
    (torn / "manifest.json").write_text("{")  # newer but torn: skipped, then removed
    (log_dir / "snapshots" / "tmp-0000000000000099").mkdir()
    s = TemporalStore.open(part, log_dir)
    try:
        assert _appended_times(s) == _want(40)
    finally:
        s.close()
    assert _snapshots(log_dir) == [snap]
    ts = log_dir / "snapshots" / snap / "ts.z"
    data = bytearray(ts.read_bytes())
    data[-1] ^= 1
    ts.write_bytes(bytes(data))  # the only snapshot no longer matches its digest, and the log lacks its batches
    with pytest.raises(FailedPrecondition, match="the log is damaged"):
        TemporalStore.open(part, log_dir)


def test_a_damaged_snapshot_that_covered_every_batch_is_refused_not_read_as_an_empty_graph(
    part: Path, tmp_path: Path
) -> None:
    log_dir = tmp_path / "log"
    _fill(part, log_dir, 40)
    (snap,) = _snapshots(log_dir)
    db = TemporalLog(log_dir, LAYOUT)
    db.drop_batches(40)  # as if the snapshot had covered every batch (timing decides whether it does)
    db.close()
    (log_dir / "snapshots" / snap / "manifest.json").write_text("{}")
    with pytest.raises(FailedPrecondition, match="40 batches were acknowledged, 0 found; the log is damaged"):
        TemporalStore.open(part, log_dir)


_CHILD = textwrap.dedent(
    """
    import json, os, signal, sys
    import numpy as np
    from graphfeed.graph_store.temporal import snapshot as temporal_snapshot
    from graphfeed.graph_store.temporal.store import TemporalStore
    part, log_dir, step = sys.argv[1:4]
    seen = []
    def hook(name):  # kill -9 the second time the step is reached: an older snapshot exists by then
        seen.append(name)
        if seen.count(step) == 2:
            os.kill(os.getpid(), signal.SIGKILL)
    temporal_snapshot.step_hook = hook
    s = TemporalStore.open(part, log_dir, **json.loads(sys.argv[4]))
    for i in range(400):
        ack = s.append(f"k{i}", np.full(4, i), np.array([0, 7, 19, 40 + i % 3]), np.full(4, 1000 + i))  # _batch(i)
        print(json.dumps([i, ack.first_eid]), flush=True)
    """
)


@pytest.mark.parametrize("step", ["files", "manifest", "renamed", "truncated", "cleaned"])
def test_kill_9_at_each_step_of_a_snapshot_loses_no_acknowledged_edge(part: Path, tmp_path: Path, step: str) -> None:
    log_dir = tmp_path / "log"
    child = subprocess.run(
        [sys.executable, "-c", _CHILD, str(part), str(log_dir), step, json.dumps(SNAPSHOTS)],
        capture_output=True,
        text=True,
        timeout=120,
        cwd=Path(__file__).parents[2],
    )
    assert child.returncode == -signal.SIGKILL, (
        f"the child was not killed at {step!r} (rc {child.returncode}): {child.stderr}"
    )
    acked = [
        json.loads(line) for line in child.stdout.splitlines(keepends=True) if line.endswith("\n")
    ]  # not a torn last one
    assert len(acked) >= 4, child.stderr
    left = _snapshots(log_dir)
    assert any(n.startswith("tmp-") for n in left) == (step in ("files", "manifest")), left
    s = TemporalStore.open(part, log_dir, **SNAPSHOTS)
    try:
        last = acked[-1][0]
        for i, first in acked:  # every acknowledged batch is there, and a retry is answered with its ack
            retry = s.append(f"k{i}", *_batch(i))
            assert retry.duplicate and retry.first_eid == first
        _append(s, last + 1)  # the batch in flight at the kill: applied at most once
        assert _appended_times(s) == _want(last + 2), "an acknowledged edge lost or stored twice"
        for i in range(last + 2, last + 40):  # and snapshots go on after the crash
            _append(s, i)
    finally:
        s.close()
    assert not any(n.startswith("tmp-") for n in _snapshots(log_dir))
    r = TemporalStore.open(part, log_dir)
    try:
        assert _appended_times(r) == _want(last + 40)
    finally:
        r.close()
