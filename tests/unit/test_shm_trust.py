"""Shared memory in a directory other local users can write to (``/dev/shm``): a file planted
under a graphfeed name is never read as a message, never written into, and never taken back
into a writer's pool; a gone segment is a terminal error, not a retryable one."""

from __future__ import annotations

import os
from pathlib import Path

import numpy as np
import pytest

from graphfeed.common import shm
from graphfeed.common.errors import DataLoss, FailedPrecondition
from graphfeed.common.shm.files import FREE_SUFFIX, LENT_SUFFIX
from tests.unit.shm_support import finished

NAME = "graphfeed-seg-1o0000abcd-7-0123abcd"
OTHER_UID = 54321
root_only = pytest.mark.skipif(os.geteuid() != 0, reason="chown to another user needs root")


def _plant(path: Path, payload: bytes = b"\xff" * 64, mode: int = 0o600) -> Path:
    path.write_bytes(payload)
    path.chmod(mode)
    return path


@root_only
def test_a_reader_refuses_a_segment_of_another_user(tmp_path: Path) -> None:
    planted = _plant(tmp_path / NAME)
    os.chown(planted, OTHER_UID, OTHER_UID)
    with pytest.raises(FailedPrecondition, match=f"belongs to uid {OTHER_UID}"):
        shm.SegmentReader(tmp_path).array(NAME, 0, (8,), np.int64)
    assert planted.exists()  # not claimed either


def test_a_reader_refuses_a_segment_others_can_write(tmp_path: Path) -> None:
    _plant(tmp_path / NAME, mode=0o644)
    os.chmod(tmp_path / NAME, 0o662)  # noqa: S103 - the point: a file others can write
    with pytest.raises(FailedPrecondition, match="writable by others"):
        shm.SegmentReader(tmp_path).array(NAME, 0, (8,), np.int64)


def test_a_reader_does_not_follow_a_symlink(tmp_path: Path) -> None:
    target = _plant(tmp_path / "elsewhere")
    (tmp_path / NAME).symlink_to(target)
    with pytest.raises(FailedPrecondition):
        shm.SegmentReader(tmp_path).array(NAME, 0, (8,), np.int64)
    assert target.exists()


@root_only
def test_a_server_never_writes_into_a_foreign_segment(tmp_path: Path) -> None:
    planted = _plant(tmp_path / NAME)
    os.chown(planted, OTHER_UID, OTHER_UID)
    peers = shm.PeerSegments()
    with pytest.raises(FailedPrecondition, match="belongs to uid"):
        peers.open(tmp_path, NAME)
    assert planted.read_bytes() == b"\xff" * 64
    peers.close()


def test_a_gone_segment_is_terminal_on_both_sides(tmp_path: Path) -> None:
    with pytest.raises(DataLoss, match="is gone"):
        shm.SegmentReader(tmp_path).array(NAME, 0, (1,), np.int64)
    peers = shm.PeerSegments()
    with pytest.raises(FailedPrecondition, match="is gone"):  # the caller's own segment: retrying cannot help
        peers.open(tmp_path, NAME)
    peers.close()


def test_a_planted_free_file_is_not_taken_back_into_the_pool(tmp_path: Path) -> None:
    pool = shm.SegmentPool(tmp_path)
    lent = pool.acquire(1000)
    lent.array(0, (4,), np.int64)[:] = 7
    lent.close()
    # Out with a reader (renamed .lent, as SegmentReader does), and someone plants <name>.free.
    os.rename(lent.path, tmp_path / (lent.name + LENT_SUFFIX))
    planted = _plant(tmp_path / (lent.name + FREE_SUFFIX), b"\xee" * 1000)
    nxt = pool.acquire(1000)
    assert nxt.name != lent.name and os.stat(nxt.path).st_ino != os.stat(planted).st_ino
    nxt.close()
    assert planted.read_bytes() == b"\xee" * 1000  # neither leased nor deleted
    # The real file, handed back (renamed over the planted one), is taken back.
    os.rename(tmp_path / (lent.name + LENT_SUFFIX), tmp_path / (lent.name + FREE_SUFFIX))
    os.unlink(nxt.path)
    again = pool.acquire(1000)
    assert again.array(0, (4,), np.int64).tolist() == [7, 7, 7, 7]  # the pool's own inode again
    again.close()
    pool.close()


def test_pool_close_leaves_other_files_alone(tmp_path: Path) -> None:
    pool = shm.SegmentPool(tmp_path)
    seg = pool.acquire(100)
    seg.close()
    os.unlink(seg.path)
    planted = _plant(tmp_path / (seg.name + FREE_SUFFIX))  # someone else's file under our name
    pool.close()
    assert planted.exists()


def test_own_segments_still_round_trip(tmp_path: Path) -> None:
    arena = shm.Arena(tmp_path)
    off = arena.put(np.arange(5, dtype=np.int64))
    finished(arena).close()
    assert shm.SegmentReader(tmp_path).array(arena.name, off, (5,), np.int64).tolist() == [0, 1, 2, 3, 4]
