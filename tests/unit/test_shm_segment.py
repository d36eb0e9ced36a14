"""Shared memory, writer and reader of one segment: arena layout, claim-on-read, bounds and errors."""

from __future__ import annotations

import errno
import os
import subprocess
import sys
from pathlib import Path

import numpy as np
import pytest

from graphfeed.common import shm
from graphfeed.common.errors import DataLoss, FailedPrecondition, InvalidArgument, ResourceExhausted
from graphfeed.common.shm.files import SEGMENT_RE
from tests.unit.shm_support import finished, segments


def test_arena_round_trip_through_reader(tmp_path: Path) -> None:
    rng = np.random.default_rng(0)
    arrays: list[np.ndarray] = [
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
    assert segments(tmp_path) == [arena.name]

    reader = shm.SegmentReader(tmp_path)
    out = [reader.array(arena.name, off, a.shape, a.dtype) for off, a in zip(offsets, arrays)]
    assert segments(tmp_path) == []  # claimed: unlinked right after mapping
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
    assert segments(tmp_path) == []
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
    assert segments(tmp_path) == []
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
    assert segments(tmp_path) == []  # the half-made file is removed, never registered
    assert reg.outstanding(None) == 0
    with pytest.raises(FailedPrecondition):
        shm.Segment.create(tmp_path / "missing", 8)


def test_reader_errors(tmp_path: Path) -> None:
    reader = shm.SegmentReader(tmp_path)
    for bad in ["../etc/passwd", "graphfeed-seg-1-2-zzzzzzzz", "graphfeed-probe-1-0123456789abcdef", ""]:
        with pytest.raises(InvalidArgument):
            reader.array(bad, 0, (1,), np.int64)
    with pytest.raises(DataLoss, match="is gone from"):  # asking again cannot bring it back
        reader.array("graphfeed-seg-1o0000abcd-2-0123abcd", 0, (1,), np.int64)

    arena = shm.Arena(tmp_path)
    arena.put(np.arange(4, dtype=np.int64))
    finished(arena).close()
    with pytest.raises(InvalidArgument, match="offset 8"):
        reader.array(arena.name, 8, (4,), np.int64)
    with pytest.raises(InvalidArgument):
        reader.array(arena.name, 0, (4,), "not-a-dtype")
    with pytest.raises(InvalidArgument):
        reader.array(arena.name, 0, (4,), object)
    # Claimed by the first reader: a second one finds it gone.
    with pytest.raises(DataLoss):
        shm.SegmentReader(tmp_path).array(arena.name, 0, (4,), np.int64)


def test_segment_names_are_unique_and_valid(tmp_path: Path) -> None:
    names = {shm.Arena(tmp_path).name for _ in range(100)}
    assert len(names) == 100
    assert all(SEGMENT_RE.match(n) for n in names)


@pytest.mark.skipif(not shm.DEFAULT_DIR.is_dir() or not os.access(shm.DEFAULT_DIR, os.W_OK), reason="no /dev/shm")
def test_default_dir_round_trip() -> None:
    offer = shm.ShmOffer.create()
    assert offer is not None
    directory = shm.OfferVerifier([shm.DEFAULT_DIR]).accept(offer.metadata())
    assert directory == shm.DEFAULT_DIR.resolve()
    offer.close()
    arena = shm.Arena(directory)
    off = arena.put(np.arange(1000, dtype=np.float32))
    finished(arena).close()
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
