"""Shared-memory transport: arena layout, claim-on-read, registry cleanup, offer verification."""

from __future__ import annotations

import errno
import logging
import os
import signal
import subprocess
import sys
import threading
import time
from collections.abc import Callable
from pathlib import Path
from types import SimpleNamespace

import numpy as np
import pytest

from graphfeed.common import shm
from graphfeed.common.errors import FailedPrecondition, InvalidArgument, ResourceExhausted, Unavailable
from graphfeed.common.transport import Backpressure


class FakeClock:
    def __init__(self) -> None:
        self.now = 1000.0

    def __call__(self) -> float:
        return self.now


def _segments(directory: Path) -> list[str]:
    return sorted(p.name for p in directory.iterdir() if p.name.startswith(shm.SEGMENT_PREFIX))


def _within(seconds: float, fn: Callable[[], bool]) -> bool:
    """fn() run in a thread; fails the test (instead of hanging) if it does not return in time."""
    result: list[bool] = []
    t = threading.Thread(target=lambda: result.append(fn()), daemon=True)
    t.start()
    t.join(seconds)
    assert not t.is_alive(), f"did not return within {seconds} s"
    return result[0]


def test_arena_round_trip_through_reader(tmp_path: Path) -> None:
    rng = np.random.default_rng(0)
    arrays = [
        rng.random((7, 5), dtype=np.float32),
        rng.integers(-(1 << 40), 1 << 40, size=13, dtype=np.int64),
        np.empty((0, 4), dtype=np.float32),
        rng.random(9) > 0.5,
        np.arange(12, dtype=np.int32).reshape(3, 4).T,  # not C-contiguous
        np.array(3.5, dtype=np.float64),  # 0-d
    ]
    arena = shm.Arena(tmp_path)
    offsets = [arena.put(a) for a in arrays]
    seg = arena.finish()
    assert seg is not None and seg.name == arena.name and seg.nbytes == arena.nbytes
    assert seg.path.stat().st_size == arena.nbytes
    seg.close()
    assert _segments(tmp_path) == [arena.name]

    reader = shm.SegmentReader(tmp_path)
    out = [reader.array(arena.name, off, a.shape, a.dtype) for off, a in zip(offsets, arrays)]
    assert _segments(tmp_path) == []  # claimed: unlinked right after mapping
    for got, want in zip(out, arrays):
        assert got.dtype == want.dtype and got.shape == want.shape
        assert np.array_equal(got, want)
    # Reads after the unlink still resolve from the cached mapping.
    again = reader.array(arena.name, offsets[1], arrays[1].shape, arrays[1].dtype)
    assert np.array_equal(again, arrays[1])


def test_reader_arrays_are_private_and_writable(tmp_path: Path) -> None:
    arena = shm.Arena(tmp_path)
    off = arena.put(np.arange(16, dtype=np.int64))
    seg = arena.finish()
    assert seg is not None
    path = seg.path
    # Keep a second handle to the file so its content can be checked after the claim.
    with open(path, "rb") as f:
        got = shm.SegmentReader(tmp_path).array(arena.name, off, (16,), np.int64)
        assert not path.exists()
        assert got.flags.writeable
        got[:] = -1
        f.seek(off)
        assert np.array_equal(np.frombuffer(f.read(128), dtype=np.int64), np.arange(16))
    # The writer's shared mapping does not see the reader's (copy-on-write) writes either.
    assert np.array_equal(seg.array(off, (16,), np.int64), np.arange(16))
    seg.close()


def test_offsets_are_aligned(tmp_path: Path) -> None:
    arena = shm.Arena(tmp_path)
    offs = [
        arena.put(np.zeros(3, np.uint8)),
        arena.put(np.zeros(1, np.int64)),
        arena.reserve((0,), np.float32),
        arena.reserve((65,), np.uint8),
        arena.put(np.zeros(2, np.float32)),
    ]
    assert offs == [0, 64, 128, 128, 256]
    assert all(o % shm.ALIGN == 0 for o in offs)
    assert arena.nbytes == 256 + 8  # no trailing padding


def test_reserved_space_is_filled_after_finish(tmp_path: Path) -> None:
    arena = shm.Arena(tmp_path)
    a = arena.put(np.ones(3, np.float32))
    r = arena.reserve((2, 3), np.int16)
    seg = arena.finish()
    assert seg is not None
    seg.array(r, (2, 3), np.int16)[...] = [[1, 2, 3], [4, 5, 6]]
    seg.close()
    seg.close()  # idempotent
    with pytest.raises(ValueError):
        seg.array(r, (2, 3), np.int16)
    reader = shm.SegmentReader(tmp_path)
    assert np.array_equal(reader.array(arena.name, r, (2, 3), np.int16), [[1, 2, 3], [4, 5, 6]])
    assert np.array_equal(reader.array(arena.name, a, (3,), np.float32), np.ones(3))


def test_empty_arena_creates_no_file(tmp_path: Path) -> None:
    arena = shm.Arena(tmp_path)
    assert arena.finish() is None
    assert _segments(tmp_path) == []
    with pytest.raises(ValueError):
        arena.put(np.zeros(1))


def test_zero_byte_segment_resolves_empty_arrays(tmp_path: Path) -> None:
    arena = shm.Arena(tmp_path)
    offs = [arena.put(np.empty(0, np.int64)), arena.put(np.empty((3, 0), np.float32))]
    seg = arena.finish()
    assert seg is not None and seg.nbytes == 0 and seg.path.stat().st_size == 0
    seg.close()
    reader = shm.SegmentReader(tmp_path)
    a = reader.array(arena.name, offs[0], (0,), np.int64)
    b = reader.array(arena.name, offs[1], (3, 0), np.float32)
    assert a.shape == (0,) and a.dtype == np.int64 and b.shape == (3, 0)
    assert _segments(tmp_path) == []
    with pytest.raises(InvalidArgument):
        reader.array(arena.name, 0, (1,), np.int64)


def test_segment_array_bounds(tmp_path: Path) -> None:
    seg = shm.Segment.create(tmp_path, 64)
    assert seg.array(56, (1,), np.int64).shape == (1,)
    with pytest.raises(ValueError, match="offset 60"):
        seg.array(60, (1,), np.int64)
    with pytest.raises(ValueError):
        seg.array(-8, (1,), np.int64)
    with pytest.raises(ValueError):
        seg.array(0, (-1,), np.int64)
    with pytest.raises(ValueError):
        seg.array(0, (9,), np.int64)
    seg.close()


def test_close_with_live_arrays_keeps_them_valid(tmp_path: Path) -> None:
    seg = shm.Segment.create(tmp_path, 32)
    view = seg.array(0, (4,), np.int64)
    view[:] = 7
    seg.close()  # the mapping is released once the view dies; no BufferError
    assert np.array_equal(view, [7, 7, 7, 7])
    assert np.array_equal(shm.SegmentReader(tmp_path).array(seg.name, 0, (4,), np.int64), [7, 7, 7, 7])


def test_full_directory_is_resource_exhausted(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    def no_space(fd: int, offset: int, length: int) -> None:
        raise OSError(errno.ENOSPC, "No space left on device")

    monkeypatch.setattr(os, "posix_fallocate", no_space)
    reg = shm.SegmentRegistry()
    with pytest.raises(ResourceExhausted, match="no room"):
        shm.Segment.create(tmp_path, 1 << 20, reg)
    assert _segments(tmp_path) == []  # the half-made file is removed, never registered
    assert reg.outstanding(None) == 0
    with pytest.raises(FailedPrecondition):
        shm.Segment.create(tmp_path / "missing", 8)


def test_reader_errors(tmp_path: Path) -> None:
    reader = shm.SegmentReader(tmp_path)
    for bad in ["../etc/passwd", "graphfeed-seg-1-2-zzzzzzzz", "graphfeed-probe-1-0123456789abcdef", ""]:
        with pytest.raises(InvalidArgument):
            reader.array(bad, 0, (1,), np.int64)
    with pytest.raises(Unavailable, match="is gone from"):
        reader.array("graphfeed-seg-1o0000abcd-2-0123abcd", 0, (1,), np.int64)

    arena = shm.Arena(tmp_path)
    arena.put(np.arange(4, dtype=np.int64))
    arena.finish().close()
    with pytest.raises(InvalidArgument, match="offset 8"):
        reader.array(arena.name, 8, (4,), np.int64)
    with pytest.raises(InvalidArgument):
        reader.array(arena.name, 0, (4,), "not-a-dtype")
    with pytest.raises(InvalidArgument):
        reader.array(arena.name, 0, (4,), object)
    # Claimed by the first reader: a second one finds it gone.
    with pytest.raises(Unavailable):
        shm.SegmentReader(tmp_path).array(arena.name, 0, (4,), np.int64)


def test_registry_outstanding_counts_unclaimed(tmp_path: Path) -> None:
    reg = shm.SegmentRegistry()
    owner = object()
    segs = []
    for _ in range(3):
        arena = shm.Arena(tmp_path, reg, owner)
        arena.put(np.arange(4))
        segs.append(arena.finish())
    assert reg.outstanding(owner) == 3
    assert reg.outstanding(object()) == 0
    shm.SegmentReader(tmp_path).array(segs[0].name, 0, (4,), np.int64)
    assert reg.outstanding(owner) == 2
    for seg in segs:
        seg.close()


class _Context:
    """The one ServicerContext method Backpressure uses: callbacks run when the call ends."""

    def __init__(self) -> None:
        self.callbacks: list[Callable[[], None]] = []

    def add_callback(self, fn: Callable[[], None]) -> None:
        self.callbacks.append(fn)

    def end(self) -> None:
        for fn in self.callbacks:
            fn()


def test_stream_back_pressure_waits_for_claims_and_stops_with_the_call(tmp_path: Path) -> None:
    ctx = _Context()
    pressure = Backpressure(ctx, limit=2)
    segs = []
    for _ in range(3):
        arena = shm.Arena(tmp_path)
        arena.put(np.arange(4))
        segs.append(arena.finish())
    assert pressure.wait()  # nothing sent yet
    pressure.sent([segs[0].path])
    assert pressure.wait()  # one unclaimed < 2
    pressure.sent([segs[1].path, segs[2].path])  # a message may name several segments

    def claim_later() -> None:
        time.sleep(0.05)
        shm.SegmentReader(tmp_path).array(segs[0].name, 0, (4,), np.int64)

    t = threading.Thread(target=claim_later)
    start = time.monotonic()  # before start(): a loaded machine may run the claim at once
    t.start()
    assert _within(5, pressure.wait)
    assert time.monotonic() - start >= 0.04
    t.join()

    # The second message counts until both its segments are claimed.
    shm.SegmentReader(tmp_path).array(segs[1].name, 0, (4,), np.int64)
    pressure.sent([tmp_path / "graphfeed-seg-1o0000abcd-1-00000000"])  # already gone: never counts
    pressure.sent([segs[1].path, segs[2].path])
    threading.Timer(0.05, ctx.end).start()
    assert _within(5, pressure.wait) is False  # the call ended first
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
    assert _segments(tmp_path) == []
    assert reg.outstanding(owner) == 0
    for seg in (a, b, c):
        seg.close()


def test_segment_names_are_unique_and_valid(tmp_path: Path) -> None:
    names = {shm.Arena(tmp_path).name for _ in range(100)}
    assert len(names) == 100
    assert all(shm._SEGMENT_RE.match(n) for n in names)


def test_offer_accepted_for_same_allowed_dir(tmp_path: Path) -> None:
    offer = shm.ShmOffer.create(tmp_path)
    assert offer is not None
    (key, value), = offer.metadata()
    assert key == shm.METADATA_KEY
    probe = tmp_path / value.split("|")[1]
    assert probe.read_text() == value.split("|")[2]
    verifier = shm.OfferVerifier([tmp_path])
    assert verifier.accept(offer.metadata()) == tmp_path.resolve()
    # gRPC's metadata objects carry .key/.value.
    grpc_style = [SimpleNamespace(key="user-agent", value="x"), SimpleNamespace(key=key, value=value)]
    assert verifier.accept(grpc_style) == tmp_path.resolve()
    offer.close()
    offer.close()
    assert not probe.exists()
    assert verifier.accept(offer.metadata()) == tmp_path.resolve()  # verified offers are cached
    assert shm.OfferVerifier([tmp_path]).accept(offer.metadata()) is None  # probe gone


def test_offer_rejected(tmp_path: Path) -> None:
    other = tmp_path / "other"
    other.mkdir()
    offer = shm.ShmOffer.create(tmp_path)
    assert offer is not None
    (key, value), = offer.metadata()
    dir_s, probe, token = value.split("|")
    assert shm.OfferVerifier([other]).accept(offer.metadata()) is None
    assert shm.OfferVerifier([]).accept(offer.metadata()) is None
    verifier = shm.OfferVerifier([tmp_path, other])
    wrong_token = "0" * 16 if token != "0" * 16 else "1" * 16
    assert verifier.accept([(key, f"{dir_s}|{probe}|{wrong_token}")]) is None
    assert verifier.accept([(key, f"{other}|{probe}|{token}")]) is None  # probe is not in that dir
    assert verifier.accept([(key, f"{dir_s}|../{probe}|{token}")]) is None
    assert verifier.accept([(key, f"relative|{probe}|{token}")]) is None
    assert verifier.accept([("other-key", value)]) is None
    assert verifier.accept(offer.metadata()) == tmp_path.resolve()
    offer.close()


def test_rejection_is_logged_once_per_offer(tmp_path: Path, caplog: pytest.LogCaptureFixture) -> None:
    verifier = shm.OfferVerifier([tmp_path])
    bad = [(shm.METADATA_KEY, f"{tmp_path}|graphfeed-probe-1o0000abcd-0123456789abcdef|0123456789abcdef")]
    with caplog.at_level(logging.INFO, logger="graphfeed.common.shm"):
        assert verifier.accept(bad) is None
        assert verifier.accept(bad) is None
    assert len([r for r in caplog.records if "declined" in r.getMessage()]) == 1
    assert "not readable here" in caplog.records[0].getMessage()


@pytest.mark.parametrize(
    "metadata",
    [None, [], 42, [("graphfeed-shm",)], [("graphfeed-shm", "no-pipes")], [("graphfeed-shm", "a|b|c|d")],
     [("graphfeed-shm", b"\xff\xfe|x|y")], [("graphfeed-shm", None)], [object()], [("graphfeed-shm", "/\x00|p|t")]],
)
def test_garbage_metadata_never_raises(tmp_path: Path, metadata: object) -> None:
    assert shm.OfferVerifier([tmp_path]).accept(metadata) is None


def test_offer_for_missing_dir_is_none(tmp_path: Path) -> None:
    assert shm.ShmOffer.create(tmp_path / "missing") is None
    assert shm.shared_offer(tmp_path / "missing") is None


def test_shared_offer_is_cached(tmp_path: Path) -> None:
    a = shm.shared_offer(tmp_path)
    assert a is not None
    assert shm.shared_offer(tmp_path) is a
    assert len([p for p in tmp_path.iterdir() if p.name.startswith(shm.PROBE_PREFIX)]) == 1
    a.close()


@pytest.mark.skipif(not shm.DEFAULT_DIR.is_dir() or not os.access(shm.DEFAULT_DIR, os.W_OK), reason="no /dev/shm")
def test_default_dir_round_trip() -> None:
    offer = shm.ShmOffer.create()
    assert offer is not None
    directory = shm.OfferVerifier([shm.DEFAULT_DIR]).accept(offer.metadata())
    assert directory == shm.DEFAULT_DIR.resolve()
    offer.close()
    arena = shm.Arena(directory)
    off = arena.put(np.arange(1000, dtype=np.float32))
    arena.finish().close()
    got = shm.SegmentReader(offer.directory).array(arena.name, off, (1000,), np.float32)
    assert np.array_equal(got, np.arange(1000))
    assert not (shm.DEFAULT_DIR / arena.name).exists()


def test_bytes_outlive_the_writer_process(tmp_path: Path) -> None:
    code = (
        "import sys, numpy as np\n"
        "from pathlib import Path\n"
        "from graphfeed.common import shm\n"
        "arena = shm.Arena(Path(sys.argv[1]))\n"
        "arena.put(np.zeros(3, np.uint8))\n"
        "off = arena.put(np.arange(100, dtype=np.float64).reshape(10, 10) * 1.5)\n"
        "arena.finish().close()\n"
        "print(arena.name, off)\n"
    )
    proc = subprocess.run([sys.executable, "-c", code, str(tmp_path)], capture_output=True, text=True, timeout=60)
    assert proc.returncode == 0, proc.stderr
    name, off = proc.stdout.split()
    got = shm.SegmentReader(tmp_path).array(name, int(off), (10, 10), np.float64)
    assert np.array_equal(got, np.arange(100, dtype=np.float64).reshape(10, 10) * 1.5)
    assert not (tmp_path / name).exists()


# -- recycled segments (SegmentPool) ---------------------------------------------------------


def _lend(directory: Path, seg: shm.Segment, values: np.ndarray) -> np.ndarray:
    """Writer fills a lease; a reader claims it as a recycled segment and returns its array."""
    seg.array(0, values.shape, values.dtype)[...] = values
    return shm.SegmentReader(directory).array(seg.name, 0, values.shape, values.dtype, recycle=True)


def test_pool_reuses_a_file_once_its_reader_lets_go(tmp_path: Path) -> None:
    pool = shm.SegmentPool(tmp_path)
    first = pool.acquire(1000)
    assert first.recycle and first.nbytes >= 1000
    inode = os.stat(first.path).st_ino
    got = _lend(tmp_path, first, np.arange(100, dtype=np.int64))
    # Claimed: the name is gone (back-pressure and registries see it claimed), the file is lent.
    assert not first.path.exists() and (tmp_path / (first.name + shm.LENT_SUFFIX)).exists()
    view = got[10:20]
    del got
    assert not (tmp_path / (first.name + shm.FREE_SUFFIX)).exists()  # a view still maps it
    del view
    assert (tmp_path / (first.name + shm.FREE_SUFFIX)).exists()
    second = pool.acquire(800, name="graphfeed-seg-1o0000abcd-2-0123abcd")
    assert second.name == "graphfeed-seg-1o0000abcd-2-0123abcd" and os.stat(second.path).st_ino == inode  # same pages
    assert _segments(tmp_path) == [second.name] and pool.files == 1
    pool.close()
    assert _segments(tmp_path) == []


def test_reader_never_sees_a_later_message_in_a_recycled_file(tmp_path: Path) -> None:
    pool = shm.SegmentPool(tmp_path)
    a = pool.acquire(64)
    held = _lend(tmp_path, a, np.full(8, 1, dtype=np.int64))
    b = pool.acquire(64)  # the held file is not handed out again: the pool makes another
    assert os.stat(b.path).st_ino != os.stat(tmp_path / (a.name + shm.LENT_SUFFIX)).st_ino
    b.array(0, (8,), np.int64)[...] = 2
    assert held.tolist() == [1] * 8
    held[0] = 5  # private: the writer's file is unchanged
    assert pool.files == 2
    pool.close()


def test_pool_grows_a_free_file_rather_than_owning_more(tmp_path: Path) -> None:
    pool = shm.SegmentPool(tmp_path)
    _lend(tmp_path, pool.acquire(10), np.zeros(2, dtype=np.int64))  # claimed and dropped at once
    big = pool.acquire(5 << 20)
    assert big.nbytes >= 5 << 20 and os.path.getsize(big.path) == big.nbytes
    big.array(0, (5 << 20,), np.uint8)[-1] = 7  # the writer's mapping covers the grown file
    assert pool.files == 1
    pool.close()


def test_pool_keeps_at_most_max_free_files(tmp_path: Path) -> None:
    pool = shm.SegmentPool(tmp_path, max_free=2)
    held = [_lend(tmp_path, pool.acquire(100), np.zeros(1, dtype=np.int64)) for _ in range(5)]
    assert pool.files == 5
    held.clear()  # all five come back at once
    pool.acquire(100)  # collects: two kept (one of them leased now), three deleted
    assert pool.files == 2 and len(_segments(tmp_path)) == 2
    pool.close()


def test_unclaimed_recycled_segments_go_back_to_the_pool(tmp_path: Path) -> None:
    clock = FakeClock()
    registry = shm.SegmentRegistry(ttl_s=10, clock=clock)
    pool = shm.SegmentPool(tmp_path)
    owner = object()
    dropped, expired = pool.acquire(100), pool.acquire(100)
    registry.add(dropped.path, owner, recycle=True)
    registry.add(expired.path, None, recycle=True)
    assert registry.drop(owner) == 1  # a cancelled stream's file is free again at once
    assert (tmp_path / (dropped.name + shm.FREE_SUFFIX)).exists()
    clock.now += 11
    assert registry.sweep() == 1  # a one-off's file after the TTL
    assert (tmp_path / (expired.name + shm.FREE_SUFFIX)).exists()
    pool.acquire(100)
    pool.acquire(100)
    assert pool.files == 2  # both reused
    # A reader that claims after the writer took it back finds it gone (never a reused file).
    with pytest.raises(Unavailable):
        shm.SegmentReader(tmp_path).array(dropped.name, 0, (1,), np.int64, recycle=True)
    pool.close()


def test_pool_forgets_files_removed_behind_its_back(tmp_path: Path) -> None:
    pool = shm.SegmentPool(tmp_path)
    idle, gone = pool.acquire(100), pool.acquire(100)
    _lend(tmp_path, idle, np.zeros(1, dtype=np.int64))
    os.unlink(gone.path)  # e.g. removed by hand
    pool.acquire(10**6)  # collects: idle is back (and grown for this lease), gone is forgotten
    assert pool.files == 1
    pool.close()
    assert _segments(tmp_path) == []


def _only(pool: shm.SegmentPool) -> tuple:
    (name, (mm, cap, _)), = pool._files.items()  # noqa: SLF001 - the lease handed out last
    return name, pool.directory / name, cap, mm


def test_idle_free_files_are_trimmed_without_further_acquires(tmp_path: Path) -> None:
    pool = shm.SegmentPool(tmp_path, idle_s=0.2)
    _lend(tmp_path, pool.acquire(100), np.zeros(1, dtype=np.int64))
    pool.acquire(100)  # collects the first (free now), reuses it
    _lend(tmp_path, shm.Segment(*_only(pool), recycle=True), np.zeros(1, dtype=np.int64))
    deadline = time.monotonic() + 10
    while _segments(tmp_path) and time.monotonic() < deadline:
        time.sleep(0.05)
    assert _segments(tmp_path) == [] and pool.files == 0
    pool.close()


def test_closed_pool_refuses(tmp_path: Path) -> None:
    pool = shm.SegmentPool(tmp_path)
    out = pool.acquire(100)
    pool.close()
    assert not out.path.exists()
    with pytest.raises(Unavailable, match="closed"):
        pool.acquire(100)


def test_a_zero_byte_lease_is_a_real_file(tmp_path: Path) -> None:
    pool = shm.SegmentPool(tmp_path)
    seg = pool.acquire(0)
    assert seg.nbytes > 0  # rounded up: a pool file always has pages to reuse
    arr = shm.SegmentReader(tmp_path).array(seg.name, 0, (0,), np.float32, recycle=True)
    assert arr.shape == (0,)
    pool.close()


def test_pooled_arena_marks_its_references_recycled(tmp_path: Path) -> None:
    from graphfeed.common import codec
    from graphfeed.common.v1 import tensor_pb2

    pool, registry = shm.SegmentPool(tmp_path), shm.SegmentRegistry()
    arena = shm.Arena(tmp_path, registry, pool=pool)
    msg = codec.encode(np.arange(5, dtype=np.int32), tensor_pb2.Tensor(), arena)
    arena.finish().close()
    assert msg.shm.recycle and msg.shm.segment == arena.name
    got = codec.decode(msg, segments=shm.SegmentReader(tmp_path))
    assert got.tolist() == [0, 1, 2, 3, 4]
    del got
    assert (tmp_path / (arena.name + shm.FREE_SUFFIX)).exists()
    pool.close()


def test_peer_segments_keep_one_mapping_per_live_file(tmp_path: Path) -> None:
    pool = shm.SegmentPool(tmp_path)
    peers = shm.PeerSegments(max_maps=2)
    lease = pool.acquire(4096)
    lease.array(0, (4,), np.int32)[...] = [1, 2, 3, 4]
    seg = peers.open(tmp_path, lease.name)
    seg.array(16, (2,), np.int32)[...] = [7, 8]  # a graph-store writes rows
    mapping = seg._mm  # noqa: SLF001
    seg.close()
    assert lease.array(0, (6,), np.int32).tolist() == [1, 2, 3, 4, 7, 8]  # shared with the writer
    assert len(peers) == 1
    # The same file under its next lease name: the cached mapping is reused.
    _lend(tmp_path, lease, np.zeros(1, dtype=np.int64))
    again = pool.acquire(4096)
    assert peers.open(tmp_path, again.name)._mm is mapping  # noqa: SLF001
    assert len(peers) == 1
    # A deleted file's mapping goes at the next open; the least recently used beyond max_maps too.
    others = [pool.acquire(4096) for _ in range(3)]
    pool.close()  # deletes every file
    fresh = shm.Segment.create(tmp_path, 64)
    peers.open(tmp_path, fresh.name).close()
    assert len(peers) == 1
    for other in others:
        with pytest.raises(Unavailable):
            peers.open(tmp_path, other.name)
    with pytest.raises(InvalidArgument):
        peers.open(tmp_path, "../etc/passwd")
    peers.close()


def test_peer_segments_let_go_of_idle_mappings(tmp_path: Path) -> None:
    peers = shm.PeerSegments(idle_s=0.2)
    seg = shm.Segment.create(tmp_path, 64)
    peers.open(tmp_path, seg.name).close()
    deadline = time.monotonic() + 10
    while len(peers) and time.monotonic() < deadline:
        time.sleep(0.05)
    assert len(peers) == 0
    peers.close()


def test_files_of_a_killed_writer_are_swept_and_a_live_one_s_are_not(tmp_path: Path) -> None:
    """A writer SIGKILLed with a pooled, an unclaimed and a lent segment leaves them behind;
    the next process to write into the directory removes them (its owner lock is free), but
    never the files of a writer that is alive."""
    code = (
        "import os, signal, sys\n"
        "from pathlib import Path\n"
        "from graphfeed.common import shm\n"
        "d = Path(sys.argv[1])\n"
        "pool = shm.SegmentPool(d)\n"
        "a = pool.acquire(4096); b = pool.acquire(4096)\n"
        "os.rename(a.path, str(a.path) + shm.LENT_SUFFIX)\n"  # as a reader's claim
        "shm.Segment.create(d, 100)\n"
        "assert shm.ShmOffer.create(d) is not None\n"  # a client's probe file
        "print(shm.owner_token(d), flush=True)\n"
        "os.kill(os.getpid(), signal.SIGKILL)\n"
    )
    res = subprocess.run([sys.executable, "-c", code, str(tmp_path)], capture_output=True, text=True, timeout=60)
    assert res.returncode == -signal.SIGKILL, res.stderr
    dead = res.stdout.strip()
    left = [n for n in os.listdir(tmp_path) if dead in n]
    assert len(left) == 5 and f"{shm.OWNER_PREFIX}{dead}" in left  # 3 segments, a probe, the owner lock
    live = shm.Segment.create(tmp_path, 64)  # this process's first write here sweeps
    assert not [n for n in os.listdir(tmp_path) if dead in n]
    assert shm.sweep_dead_owners(tmp_path) == 0 and live.path.exists()
    assert f"{shm.OWNER_PREFIX}{shm.owner_token(tmp_path)}" in os.listdir(tmp_path)
    live.close()
