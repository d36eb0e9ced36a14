"""Shared memory, recycled segments: a writer's pool of files, and a server's cached mappings of
a peer's files (PeerSegments)."""

from __future__ import annotations

import mmap
import os
from pathlib import Path

import numpy as np
import pytest

from graphfeed.common import shm
from graphfeed.common.errors import DataLoss, FailedPrecondition, InvalidArgument, Unavailable
from tests.unit.shm_support import FakeClock, finished, lend, segments, wait_for


def test_pool_reuses_a_file_once_its_reader_lets_go(tmp_path: Path) -> None:
    pool = shm.SegmentPool(tmp_path)
    first = pool.acquire(1000)
    assert first.recycle and first.nbytes >= 1000
    inode = os.stat(first.path).st_ino
    got = lend(tmp_path, first, np.arange(100, dtype=np.int64))
    # Claimed: the name is gone (back-pressure and registries see it claimed), the file is lent.
    assert not first.path.exists() and (tmp_path / (first.name + shm.LENT_SUFFIX)).exists()
    view = got[10:20]
    del got
    assert not (tmp_path / (first.name + shm.FREE_SUFFIX)).exists()  # a view still maps it
    del view
    assert (tmp_path / (first.name + shm.FREE_SUFFIX)).exists()
    second = pool.acquire(800, name="graphfeed-seg-1o0000abcd-2-0123abcd")
    assert second.name == "graphfeed-seg-1o0000abcd-2-0123abcd" and os.stat(second.path).st_ino == inode  # same pages
    assert segments(tmp_path) == [second.name] and pool.files == 1
    pool.close()
    assert segments(tmp_path) == []


def test_reader_never_sees_a_later_message_in_a_recycled_file(tmp_path: Path) -> None:
    pool = shm.SegmentPool(tmp_path)
    a = pool.acquire(64)
    held = lend(tmp_path, a, np.full(8, 1, dtype=np.int64))
    b = pool.acquire(64)  # the held file is not handed out again: the pool makes another
    assert os.stat(b.path).st_ino != os.stat(tmp_path / (a.name + shm.LENT_SUFFIX)).st_ino
    b.array(0, (8,), np.int64)[...] = 2
    assert held.tolist() == [1] * 8
    held[0] = 5  # private: the writer's file is unchanged
    assert pool.files == 2
    pool.close()


def test_pool_grows_a_free_file_rather_than_owning_more(tmp_path: Path) -> None:
    pool = shm.SegmentPool(tmp_path)
    lend(tmp_path, pool.acquire(10), np.zeros(2, dtype=np.int64))  # claimed and dropped at once
    big = pool.acquire(5 << 20)
    assert big.nbytes >= 5 << 20 and os.path.getsize(big.path) == big.nbytes
    big.array(0, (5 << 20,), np.uint8)[-1] = 7  # the writer's mapping covers the grown file
    assert pool.files == 1
    pool.close()


def test_pool_keeps_at_most_max_free_files(tmp_path: Path) -> None:
    pool = shm.SegmentPool(tmp_path, max_free=2)
    held = [lend(tmp_path, pool.acquire(100), np.zeros(1, dtype=np.int64)) for _ in range(5)]
    assert pool.files == 5
    held.clear()  # all five come back at once
    pool.acquire(100)  # collects: two kept (one of them leased now), three deleted
    assert pool.files == 2 and len(segments(tmp_path)) == 2
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
    with pytest.raises(DataLoss):
        shm.SegmentReader(tmp_path).array(dropped.name, 0, (1,), np.int64, recycle=True)
    pool.close()


def test_pool_forgets_files_removed_behind_its_back(tmp_path: Path) -> None:
    pool = shm.SegmentPool(tmp_path)
    idle, gone = pool.acquire(100), pool.acquire(100)
    lend(tmp_path, idle, np.zeros(1, dtype=np.int64))
    os.unlink(gone.path)  # e.g. removed by hand
    pool.acquire(10**6)  # collects: idle is back (and grown for this lease), gone is forgotten
    assert pool.files == 1
    pool.close()
    assert segments(tmp_path) == []


def _only(pool: shm.SegmentPool) -> tuple[str, Path, int, mmap.mmap]:
    ((name, (mm, cap, _)),) = pool._files.items()
    return name, pool.directory / name, cap, mm


def test_idle_free_files_are_trimmed_without_further_acquires(tmp_path: Path) -> None:
    pool = shm.SegmentPool(tmp_path, idle_s=0.2)
    lend(tmp_path, pool.acquire(100), np.zeros(1, dtype=np.int64))
    pool.acquire(100)  # collects the first (free now), reuses it
    lend(tmp_path, shm.Segment(*_only(pool), recycle=True), np.zeros(1, dtype=np.int64))
    assert wait_for(lambda: segments(tmp_path) == [])
    assert segments(tmp_path) == [] and pool.files == 0
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
    finished(arena).close()
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
    mapping = seg._mm
    seg.close()
    assert lease.array(0, (6,), np.int32).tolist() == [1, 2, 3, 4, 7, 8]  # shared with the writer
    assert len(peers) == 1
    # The same file under its next lease name: the cached mapping is reused.
    lend(tmp_path, lease, np.zeros(1, dtype=np.int64))
    again = pool.acquire(4096)
    assert peers.open(tmp_path, again.name)._mm is mapping
    assert len(peers) == 1
    # A deleted file's mapping goes at the next open; the least recently used beyond max_maps too.
    others = [pool.acquire(4096) for _ in range(3)]
    pool.close()  # deletes every file
    fresh = shm.Segment.create(tmp_path, 64)
    peers.open(tmp_path, fresh.name).close()
    assert len(peers) == 1
    for other in others:
        with pytest.raises(FailedPrecondition, match="is gone"):  # terminal: asking again cannot help
            peers.open(tmp_path, other.name)
    with pytest.raises(InvalidArgument):
        peers.open(tmp_path, "../etc/passwd")
    peers.close()


def test_peer_segments_keep_mappings_of_every_file_a_loader_rotates_through(tmp_path: Path) -> None:
    """A loader's pool keeps up to 16 free files, plus those in flight; a graph-store cycling
    through more files than it keeps mappings of would map (and page-fault) every one anew."""
    pool = shm.SegmentPool(tmp_path, max_free=16)
    files = [pool.acquire(4096) for _ in range(24)]
    peers = shm.PeerSegments()
    first = {f.name: peers.open(tmp_path, f.name)._mm for f in files}
    for f in files:  # round robin again: each file's mapping from the first round
        assert peers.open(tmp_path, f.name)._mm is first[f.name]
    assert len(peers) == len(files)
    peers.close()
    pool.close()


def test_peer_segments_let_go_of_idle_mappings(tmp_path: Path) -> None:
    peers = shm.PeerSegments(idle_s=0.2)
    seg = shm.Segment.create(tmp_path, 64)
    peers.open(tmp_path, seg.name).close()
    assert wait_for(lambda: len(peers) == 0)
    peers.close()


def test_a_dead_readers_lent_segments_come_back_to_the_pool(tmp_path: Path) -> None:
    """A trainer SIGKILLed while holding minibatches never hands their files back itself; the
    writer's pool takes them back once no reader holds their lock (and leaves a live one's alone)."""
    import signal
    import subprocess
    import sys

    pool = shm.SegmentPool(tmp_path)
    pool.ABANDON_GRACE_S = 0.0
    segs = [pool.acquire(1 << 16) for _ in range(2)]
    for s in segs:
        s.close()
    reader_code = (
        "import sys, numpy as np\n"
        "from pathlib import Path\n"
        "from graphfeed.common import shm\n"
        "r = shm.SegmentReader(Path(sys.argv[1]))\n"
        "a = r.array(sys.argv[2], 0, (8,), np.int64, recycle=True)\n"
        "print('mapped', flush=True)\n"
        "sys.stdin.read()\n"  # holds the mapping until killed
    )
    procs = [
        subprocess.Popen(
            [sys.executable, "-c", reader_code, str(tmp_path), s.name],
            stdout=subprocess.PIPE,
            stdin=subprocess.PIPE,
            text=True,
        )
        for s in segs
    ]
    try:
        for p in procs:
            assert p.stdout is not None and p.stdout.readline().strip() == "mapped"
        dead = procs[0]
        dead.send_signal(signal.SIGKILL)
        dead.wait()
        got = pool.acquire(1 << 16)  # collects: the dead reader's file is free again, reused
        assert pool.files == 2, "no third file: the abandoned one was taken back"
        assert (tmp_path / (segs[1].name + shm.LENT_SUFFIX)).exists(), "a live reader's file stays lent"
        got.close()
    finally:
        for p in procs:
            if p.poll() is None:
                p.kill()
                p.wait()
        pool.close()
