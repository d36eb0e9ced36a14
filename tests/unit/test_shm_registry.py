"""Shared memory, writer-side bookkeeping: unclaimed segments are counted, swept after their TTL
and removed at shutdown."""

from __future__ import annotations

from pathlib import Path

import numpy as np

from graphfeed.common import shm
from tests.unit.shm_support import FakeClock, finished, segments


def test_registry_outstanding_counts_unclaimed(tmp_path: Path) -> None:
    reg = shm.SegmentRegistry()
    owner = object()
    segs: list[shm.Segment] = []
    for _ in range(3):
        arena = shm.Arena(tmp_path, reg, owner)
        arena.put(np.arange(4))
        segs.append(finished(arena))
    assert reg.outstanding(owner) == 3
    assert reg.outstanding(object()) == 0
    shm.SegmentReader(tmp_path).array(segs[0].name, 0, (4,), np.int64)
    assert reg.outstanding(owner) == 2
    for seg in segs:
        seg.close()


def test_sweep_respects_ttl_and_owners(tmp_path: Path) -> None:
    clock = FakeClock()
    reg = shm.SegmentRegistry(ttl_s=10.0, clock=clock)
    live, released = object(), object()
    anon = shm.Segment.create(tmp_path, 8, reg)
    seg_live = shm.Segment.create(tmp_path, 8, reg, live)
    seg_rel = shm.Segment.create(tmp_path, 8, reg, released)
    claimed = shm.Segment.create(tmp_path, 8, reg)
    shm.SegmentReader(tmp_path).array(claimed.name, 0, (1,), np.int64)

    clock.now += 9.0
    assert reg.sweep() == 0
    assert anon.path.exists()
    reg.release(released)
    clock.now += 1.0  # anon: ttl since creation reached
    assert reg.sweep() == 1
    assert not anon.path.exists() and seg_live.path.exists() and seg_rel.path.exists()

    clock.now += 8.0  # released 9 s ago
    assert reg.sweep() == 0
    clock.now += 1.0
    assert reg.sweep() == 1
    assert not seg_rel.path.exists()

    clock.now += 1e6
    assert reg.sweep() == 0
    assert seg_live.path.exists()
    assert reg.outstanding(live) == 1
    for seg in (anon, seg_live, seg_rel, claimed):
        seg.close()


def test_add_sweeps_at_most_once_per_second(tmp_path: Path) -> None:
    clock = FakeClock()
    reg = shm.SegmentRegistry(ttl_s=0.5, clock=clock)
    old = shm.Segment.create(tmp_path, 8, reg)
    clock.now += 0.6  # past ttl but less than a second since the last sweep
    shm.Segment.create(tmp_path, 8, reg).close()
    assert old.path.exists()
    clock.now += 0.5
    shm.Segment.create(tmp_path, 8, reg).close()
    assert not old.path.exists()
    old.close()


def test_registry_close_unlinks_unclaimed(tmp_path: Path) -> None:
    reg = shm.SegmentRegistry()
    owner = object()
    a = shm.Segment.create(tmp_path, 16, reg, owner)
    b = shm.Segment.create(tmp_path, 0, reg)
    c = shm.Segment.create(tmp_path, 16, reg)
    shm.SegmentReader(tmp_path).array(c.name, 0, (2,), np.int64)
    reg.close()
    assert segments(tmp_path) == []
    assert reg.outstanding(owner) == 0
    for seg in (a, b, c):
        seg.close()
