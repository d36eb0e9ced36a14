"""Shared memory, back-pressure: a stream waits while ``limit`` sent messages are unclaimed, wakes
when the client claims one (unlinks it, or renames a recycled one), and stops with the call."""

from __future__ import annotations

import os
from collections.abc import Callable, Iterator
from concurrent.futures import Future, ThreadPoolExecutor
from pathlib import Path

import numpy as np
import pytest

from graphfeed.common import shm
from graphfeed.common.shm.dir_watch import DirectoryWatch
from tests.unit.shm_support import lend

BLOCKED_S = 0.2  # how long a wait must stay blocked to count as waiting
PROMPT_S = 2.0  # generous: a claim or the call's end wakes a wait in milliseconds


class _Context:
    """The one ServicerContext method Backpressure uses: callbacks run when the call ends."""

    def __init__(self) -> None:
        self.callbacks: list[Callable[[], None]] = []

    def add_callback(self, fn: Callable[[], None]) -> None:
        self.callbacks.append(fn)

    def end(self) -> None:
        for fn in self.callbacks:
            fn()


@pytest.fixture
def ctx() -> Iterator[_Context]:
    context = _Context()
    yield context
    context.end()  # never leave a waiter blocked behind the test


@pytest.fixture
def waiter() -> Iterator[ThreadPoolExecutor]:
    with ThreadPoolExecutor(1) as pool:
        yield pool


def _segment(directory: Path) -> shm.Segment:
    arena = shm.Arena(directory)
    arena.put(np.arange(4))
    seg = arena.finish()
    assert seg is not None
    return seg


def _claim(directory: Path, seg: shm.Segment) -> None:
    shm.SegmentReader(directory).array(seg.name, 0, (4,), np.int64)


def _assert_blocked(future: Future[bool]) -> None:
    with pytest.raises(TimeoutError):
        future.result(timeout=BLOCKED_S)


def _inotify_fds() -> int:
    fds = os.listdir("/proc/self/fd")
    return sum(_readlink(f"/proc/self/fd/{fd}") == "anon_inode:inotify" for fd in fds)


def _readlink(path: str) -> str:
    try:
        return os.readlink(path)
    except OSError:  # the listing's own fd, closed by now
        return ""


def test_stream_back_pressure_waits_for_claims_and_stops_with_the_call(
    tmp_path: Path, ctx: _Context, waiter: ThreadPoolExecutor
) -> None:
    pressure = shm.Backpressure(ctx, limit=2)
    segs = [_segment(tmp_path) for _ in range(3)]
    assert pressure.wait()  # nothing sent yet
    pressure.sent([segs[0].path])
    assert pressure.wait()  # one unclaimed < 2
    pressure.sent([segs[1].path, segs[2].path])  # a message may name several segments

    blocked = waiter.submit(pressure.wait)
    _assert_blocked(blocked)  # two unclaimed: waits
    _claim(tmp_path, segs[0])
    assert blocked.result(timeout=PROMPT_S)

    # The second message counts until both its segments are claimed.
    _claim(tmp_path, segs[1])
    pressure.sent([tmp_path / "graphfeed-seg-1o0000abcd-1-00000000"])  # already gone: never counts
    pressure.sent([segs[1].path, segs[2].path])
    ended = waiter.submit(pressure.wait)
    _assert_blocked(ended)
    ctx.end()
    assert ended.result(timeout=PROMPT_S) is False  # the call ended first
    for seg in segs:
        seg.close()


def test_a_claim_wakes_the_wait_without_polling(tmp_path: Path, ctx: _Context, waiter: ThreadPoolExecutor) -> None:
    """With polls and re-checks a minute apart, only the claim's inotify event can wake it."""
    if DirectoryWatch.open() is None:
        pytest.skip("no inotify here")
    pressure = shm.Backpressure(ctx, limit=1, poll_s=60, recheck_s=60)
    unlinked, pool = _segment(tmp_path), shm.SegmentPool(tmp_path)
    renamed = pool.acquire(64)
    pressure.sent([unlinked.path])
    blocked = waiter.submit(pressure.wait)
    _assert_blocked(blocked)
    _claim(tmp_path, unlinked)  # a plain segment: unlinked
    assert blocked.result(timeout=PROMPT_S)

    pressure.sent([renamed.path])
    blocked = waiter.submit(pressure.wait)
    _assert_blocked(blocked)
    held = lend(tmp_path, renamed, np.zeros(1, dtype=np.int64))  # a recycled one: renamed .lent
    assert blocked.result(timeout=PROMPT_S)
    del held
    unlinked.close()
    pool.close()


def test_the_call_s_end_stops_a_wait_promptly_and_closes_the_watch(
    tmp_path: Path, ctx: _Context, waiter: ThreadPoolExecutor
) -> None:
    before = _inotify_fds()
    pressure = shm.Backpressure(ctx, limit=1)
    seg = _segment(tmp_path)
    pressure.sent([seg.path])
    blocked = waiter.submit(pressure.wait)
    _assert_blocked(blocked)
    ctx.end()
    assert blocked.result(timeout=PROMPT_S) is False
    assert _inotify_fds() == before
    assert pressure.wait() is False  # still over the limit, and the call is over
    seg.close()


def test_the_call_s_end_closes_the_watch_of_an_idle_stream(tmp_path: Path, ctx: _Context) -> None:
    before = _inotify_fds()
    with shm.Backpressure(_Context(), limit=4) as pressure:
        pressure.sent([_segment(tmp_path).path])
        assert pressure.wait()
    assert _inotify_fds() == before  # left the with block
    pressure = shm.Backpressure(ctx, limit=4)
    pressure.sent([_segment(tmp_path).path])
    ctx.end()  # while nobody waits
    assert _inotify_fds() == before


def test_without_inotify_it_polls(
    tmp_path: Path, ctx: _Context, waiter: ThreadPoolExecutor, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setattr(DirectoryWatch, "open", classmethod(lambda _cls: None))
    pressure = shm.Backpressure(ctx, limit=1)
    segs = [_segment(tmp_path) for _ in range(2)]
    pressure.sent([segs[0].path])
    blocked = waiter.submit(pressure.wait)
    _assert_blocked(blocked)
    _claim(tmp_path, segs[0])
    assert blocked.result(timeout=PROMPT_S)
    pressure.sent([segs[1].path])
    ended = waiter.submit(pressure.wait)
    _assert_blocked(ended)
    ctx.end()
    assert ended.result(timeout=PROMPT_S) is False
    for seg in segs:
        seg.close()
