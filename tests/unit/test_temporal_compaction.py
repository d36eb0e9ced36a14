"""Background compaction: it never changes a sample, bounds the pending blocks, stops cleanly,
and a failure of it reaches the appenders."""

from __future__ import annotations

import threading
import time
from collections.abc import Callable, Iterator
from pathlib import Path

import numpy as np
import pytest

from graphfeed.common.errors import FailedPrecondition
from graphfeed.graph_store.temporal import index as ti
from graphfeed.graph_store.temporal.store import TemporalStore
from tests.unit.temporal_graphs import N, write_temporal


@pytest.fixture
def part(tmp_path: Path) -> Path:
    """The arithmetic temporal graph, one partition (it owns every new id)."""
    return write_temporal(tmp_path / "g", num_partitions=1)[0] / "part-00000"


@pytest.fixture
def opened() -> Iterator[list[TemporalStore]]:
    """Stores to close at teardown."""
    stores: list[TemporalStore] = []
    yield stores
    for s in stores:
        s.close()


def _wait(cond: Callable[[], bool], what: str, timeout_s: float = 60) -> None:
    deadline = time.monotonic() + timeout_s
    while not cond():
        assert time.monotonic() < deadline, f"timed out waiting for {what}"
        time.sleep(0.005)


def _batch(w: int, b: int, rng: np.random.Generator) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """Writer ``w``'s batch ``b``: rows ``v % 3 == w`` and new ids ``N + 3k + w``; time grows per batch."""
    dst = rng.choice(np.r_[np.arange(w, N, 3), N + w + 3 * np.arange(4)], 20)
    return rng.integers(0, 2 * N, 20), dst, 1000 + b + rng.integers(0, 2, 20)


def test_background_compaction_during_concurrent_appends_changes_no_sample(
    part: Path, tmp_path: Path, opened: list
) -> None:
    bg = TemporalStore.open(part, tmp_path / "bg", max_blocks=3, compact_min_edges=1)
    opened.append(bg)
    done: list[tuple[int, str, tuple, int]] = []  # (visible_seq, batch id, arrays, first_eid)
    errors: list[BaseException] = []

    def writer(w: int) -> None:
        rng = np.random.default_rng(w)
        try:
            for b in range(60):
                arrays = _batch(w, b, rng)
                ack = bg.append(f"w{w}-{b}", *arrays)
                done.append((ack.visible_seq, f"w{w}-{b}", arrays, ack.first_eid))
        except BaseException as exc:  # noqa: BLE001 - asserted below
            errors.append(exc)

    threads = [threading.Thread(target=writer, args=(w,)) for w in range(3)]
    for t in threads:
        t.start()
    for t in threads:
        t.join(120)
    assert not errors and len(done) == 180
    assert bg.info().compactions >= 5, "background compactions must have run while the writers appended"
    # the same batches in the same order into a store that never compacts
    ref = TemporalStore.open(part, tmp_path / "ref", max_blocks=10**6, compact_min_edges=10**9)
    opened.append(ref)
    for _, batch_id, arrays, first_eid in sorted(done, key=lambda d: d[0]):
        assert ref.append(batch_id, *arrays).first_eid == first_eid
    assert ref.info().num_blocks == 180 and bg.info().num_blocks < 180
    rng = np.random.default_rng(9)
    nodes, times = rng.choice(np.r_[np.arange(N), N + np.arange(12)], 3000), rng.integers(0, 1100, 3000)
    for fanout in (-1, 0, 3, 40):
        for strategy in ("recent", "uniform"):
            a, b = bg.sample(nodes, times, fanout, strategy, seed=5), ref.sample(nodes, times, fanout, strategy, seed=5)
            for field in ("offsets", "nbr", "ts", "eid"):
                assert getattr(a, field).tobytes() == getattr(b, field).tobytes(), (fanout, strategy, field)


def _stalled_compaction(monkeypatch: pytest.MonkeyPatch) -> tuple[threading.Event, threading.Event]:
    """Makes every compaction wait for ``release``; ``entered`` is set when one starts."""
    entered, release, real = threading.Event(), threading.Event(), ti.compact

    def stalled(snap: ti.Snapshot) -> ti.Snapshot:
        entered.set()
        assert release.wait(60)
        return real(snap)

    monkeypatch.setattr(ti, "compact", stalled)
    return entered, release


def _one(store: TemporalStore, b: int) -> None:
    store.append(f"p{b}", np.array([1, 2]), np.array([b % N, (b + 1) % N]), np.array([1000 + b, 1000 + b]))


def test_appends_wait_when_four_times_max_blocks_pile_up_during_a_compaction(
    part: Path, tmp_path: Path, opened: list, monkeypatch: pytest.MonkeyPatch
) -> None:
    entered, release = _stalled_compaction(monkeypatch)
    s = TemporalStore.open(part, tmp_path / "log", max_blocks=2, compact_min_edges=10**9)
    opened.append(s)
    for b in range(8):  # the 2nd starts the (stalled) compaction; up to 8 blocks appends go on
        _one(s, b)
    assert entered.wait(60) and s.info().num_blocks == 8
    blocked = threading.Thread(target=_one, args=(s, 8))
    blocked.start()
    blocked.join(0.3)  # a negative check: it must still be waiting
    assert blocked.is_alive() and s.info().num_blocks == 8, "the 9th append did not wait for the compaction"
    release.set()
    blocked.join(60)
    assert not blocked.is_alive()
    _wait(lambda: s.info().compactions >= 1 and s.info().seq == 9, "the compaction and the waiting append")
    assert s.info().num_blocks < 8


def test_close_wakes_waiting_appends_and_waits_for_the_running_compaction(
    part: Path, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    entered, release = _stalled_compaction(monkeypatch)
    s = TemporalStore.open(part, tmp_path / "log", max_blocks=1, compact_min_edges=10**9)
    for b in range(4):
        _one(s, b)
    assert entered.wait(60)
    errors: list[BaseException] = []

    def append_5th() -> None:
        try:
            _one(s, 4)
        except FailedPrecondition as exc:
            errors.append(exc)

    waiting = threading.Thread(target=append_5th)
    waiting.start()
    closing = threading.Thread(target=s.close)
    closing.start()
    waiting.join(60)
    assert not waiting.is_alive() and "closed" in str(errors[0])
    assert closing.is_alive(), "close() must let the running compaction finish"
    release.set()
    closing.join(60)
    assert not closing.is_alive()
    r = TemporalStore.open(part, tmp_path / "log")
    try:
        assert r.info().seq == 4  # every acknowledged batch, nothing of the refused one
    finally:
        r.close()


def test_a_failed_background_compaction_is_raised_to_the_appenders(
    part: Path, tmp_path: Path, opened: list, monkeypatch: pytest.MonkeyPatch
) -> None:
    def broken(snap: ti.Snapshot) -> ti.Snapshot:
        raise MemoryError("no room to merge")

    monkeypatch.setattr(ti, "compact", broken)
    s = TemporalStore.open(part, tmp_path / "log", max_blocks=2, compact_min_edges=10**9)
    opened.append(s)
    _one(s, 0)
    _one(s, 1)  # wakes the compactor, which fails

    def refused() -> bool:
        try:
            _one(s, s.info().seq)
        except FailedPrecondition as exc:
            assert "background compaction failed (no room to merge)" in str(exc)
            return True
        return False

    _wait(refused, "the compaction's failure to reach an append")
