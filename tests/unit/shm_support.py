"""Helpers shared by the shared-memory tests (tests/unit/test_shm_*.py)."""

from __future__ import annotations

import time
from collections.abc import Callable
from pathlib import Path

import numpy as np

from graphfeed.common import shm


class FakeClock:
    """A clock the test moves by hand (``clock.now += 10``)."""

    def __init__(self) -> None:
        self.now = 1000.0

    def __call__(self) -> float:
        return self.now


def segments(directory: Path) -> list[str]:
    """The segment files in ``directory`` (not ``.lent``/``.free`` ones), sorted."""
    return sorted(p.name for p in directory.iterdir() if p.name.startswith(shm.SEGMENT_PREFIX))


def wait_for(condition: Callable[[], bool], timeout_s: float = 10.0) -> bool:
    """Polls ``condition`` until it holds or ``timeout_s`` passed; its last value."""
    deadline = time.monotonic() + timeout_s
    while not condition():
        if time.monotonic() >= deadline:
            return condition()
        time.sleep(0.01)
    return True


def finished(arena: shm.Arena) -> shm.Segment:
    """``arena.finish()`` for an arena that holds data, so its segment exists (never None)."""
    seg = arena.finish()
    assert seg is not None, "finish() returns None only for an empty arena"
    return seg


def lend(directory: Path, seg: shm.Segment, values: np.ndarray) -> np.ndarray:
    """Writer fills a lease; a reader claims it as a recycled segment and returns its array."""
    seg.array(0, values.shape, values.dtype)[...] = values
    return shm.SegmentReader(directory).array(seg.name, 0, values.shape, values.dtype, recycle=True)
