"""Random rows of a flat feature file, read with coalesced preads (optionally ``O_DIRECT``).

A request's rows are sorted and deduplicated, turned into a read plan (:func:`plan_reads`:
rows in the same or adjacent blocks share one read, no read longer than ``max_read_bytes``),
and the plan is cut into pieces of about ``piece_bytes`` that a pool of threads reads into
per-thread buffers with ``pread`` called from compiled code (no GIL, so several reads are in
flight) before copying the rows out. Memory beyond the caller's output is one buffer per I/O thread
(per calling thread without a pool): every read runs on the pool, even a request's only piece,
so that many gRPC handler threads do not each hold one.

With ``direct=True`` the file is opened ``O_DIRECT``: reads are whole logical blocks (512 bytes
on most disks) into page-aligned buffers and bypass the page cache, which a pod's memory cgroup
would otherwise be charged for: that is what makes a memory budget real. Without it, readahead
is switched off (``POSIX_FADV_RANDOM``): the default window (8 MiB on the bench machine) reads
a whole small file for a few rows.
"""

from __future__ import annotations

import itertools
import mmap
import os
import threading
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass
from pathlib import Path

import numba
import numpy as np
from numba import types

from graphfeed.common.errors import DataLoss, FailedPrecondition
from graphfeed.common.limits import DISK_ROWS_READ_BYTES

DIRECT_ALIGN = 4096  # O_DIRECT alignment where the device's logical block size cannot be read
# Bytes of reads one thread does before copying its rows out. Small, so that a small request
# is still several pieces in flight: 1000 random rows, O_DIRECT, 8 threads read 7k rows/s in
# 512 KiB pieces (one piece, one thread) and 33k rows/s in 64 KiB pieces.
PIECE_BYTES = 64 << 10
_THREAD = threading.local()  # each thread's read buffer


@numba.njit(cache=True, nogil=True)
def plan_reads(offsets, row_bytes, align, max_read):  # noqa: ANN001, ANN201
    """Coalesced reads covering rows at ascending byte ``offsets``.

    Each row's span is widened to ``align`` boundaries; a row whose span touches or overlaps
    the current read joins it unless the read would grow past ``max_read``.

    Returns:
        ``(read_off, read_len, read_of)``: int64 arrays, one entry per read, and the read of each row.
    """
    n = len(offsets)
    read_off = np.empty(n, np.int64)
    read_len = np.empty(n, np.int64)
    read_of = np.empty(n, np.int64)
    k, lo_cur, hi_cur = -1, 0, 0
    for j in range(n):
        lo = offsets[j] // align * align
        hi = (offsets[j] + row_bytes + align - 1) // align * align
        if k >= 0 and lo <= hi_cur and max(hi, hi_cur) - lo_cur <= max_read:
            hi_cur = max(hi, hi_cur)
        else:
            if k >= 0:
                read_len[k] = hi_cur - lo_cur
            k += 1
            lo_cur, hi_cur = lo, hi
            read_off[k] = lo
        read_of[j] = k
    if k >= 0:
        read_len[k] = hi_cur - lo_cur
    return read_off[: k + 1], read_len[: k + 1], read_of


# pread(int fd, void *buf, size_t count, off_t offset), called from compiled code so that a
# thread's reads run without the GIL and without Python's ~6 us per call (10k warm 512-byte
# preads: 38 ms against 100 ms with os.preadv); the pointer passes as an integer (one ABI on 64-bit).
_pread = types.ExternalFunction("pread", types.int64(types.int32, types.intp, types.intp, types.int64))


@numba.njit(cache=True, nogil=True)
def _pread_all(fd, buf, offsets, lengths, at, file_bytes):  # noqa: ANN001, ANN202
    """Reads ``lengths[i]`` bytes at ``offsets[i]`` into ``buf[at[i]:]``; returns the first read
    that failed or came out short (-1 if none), for the caller to redo and report."""
    for i in range(len(offsets)):
        want = min(lengths[i], file_bytes - offsets[i])
        if _pread(fd, buf.ctypes.data + at[i], lengths[i], offsets[i]) < want:
            return i
    return -1


@numba.njit(cache=True, nogil=True)
def _copy_out(buf, src, out, dst):  # noqa: ANN001, ANN202
    """``out[dst[i]] = buf[src[i] : src[i] + row_bytes]`` for byte views ``buf`` [B], ``out`` [n, row_bytes]."""
    width = out.shape[1]
    for i in range(len(src)):
        out[dst[i], :] = buf[src[i] : src[i] + width]


@dataclass(frozen=True)
class ReadCount:
    """What one :meth:`FlatRows.read` did on disk."""

    bytes: int
    reads: int


class FlatRows:
    """Rows ``[num_rows, row_bytes]`` of a flat file, read on demand; safe to share between threads.

    Args:
        path: the flat file (raw C-order rows, no header).
        num_rows: rows it must hold; a shorter or longer file is refused (FailedPrecondition).
        row_bytes: bytes per row (> 0).
        direct: open with ``O_DIRECT`` (page cache bypassed).
        pool: threads that run the reads; None reads in the calling thread.
        max_read_bytes: longest single read.
        piece_bytes: bytes read per piece of work (one thread's buffer holds a piece).
    """

    def __init__(
        self,
        path: Path,
        num_rows: int,
        row_bytes: int,
        *,
        direct: bool = False,
        pool: ThreadPoolExecutor | None = None,
        max_read_bytes: int = DISK_ROWS_READ_BYTES,
        piece_bytes: int = PIECE_BYTES,
    ) -> None:
        self.path, self.num_rows, self.row_bytes, self.direct = Path(path), num_rows, row_bytes, direct
        self.file_bytes = num_rows * row_bytes
        self._fd = _open(self.path, self.file_bytes, direct)
        self.align = _checked_alignment(self._fd, direct_alignment(self.path)) if direct else 1
        self._max_read = max(max_read_bytes, _round_up(row_bytes, DIRECT_ALIGN) + DIRECT_ALIGN)  # one row's widest span
        self._piece = max(1, piece_bytes)  # a piece overruns by at most one read: buffers hold piece + max read
        self._pool = pool

    def read(self, rows: np.ndarray, out: np.ndarray, positions: np.ndarray) -> ReadCount:
        """``out[positions[i]] = row rows[i]`` for valid local ``rows`` (repeats read once).

        Args:
            rows: int64 row indices in ``[0, num_rows)`` (not checked here).
            out: C-contiguous rows ``[m, ...]`` of ``row_bytes`` each.
            positions: int64 rows of ``out``, one per entry of ``rows``.

        Raises:
            DataLoss: the file came out shorter than at open (truncated since).
        """
        if len(rows) == 0:
            return ReadCount(0, 0)
        uniq, inverse = np.unique(rows, return_inverse=True)
        read_off, read_len, read_of = plan_reads(uniq * self.row_bytes, self.row_bytes, self.align, self._max_read)
        # The request entries grouped by unique row: those of uniq[a:b] are by_row[first[a]:first[b]].
        by_row = np.argsort(inverse, kind="stable")
        first = np.searchsorted(inverse[by_row], np.arange(len(uniq) + 1))
        pieces = _pieces(read_len, self._piece)
        target = out.reshape(len(out), -1).view(np.uint8)
        args = [
            (int(a), int(b), uniq, read_off, read_len, read_of, by_row, first, target, positions) for a, b in pieces
        ]
        if self._pool is None:
            for a in args:
                self._read_piece(*a)
        else:
            for f in [self._pool.submit(self._read_piece, *a) for a in args]:
                f.result()  # re-raises a reader's error here
        return ReadCount(int(read_len.sum()), len(read_len))

    def _read_piece(
        self,
        a: int,
        b: int,
        uniq: np.ndarray,
        read_off: np.ndarray,
        read_len: np.ndarray,
        read_of: np.ndarray,
        by_row: np.ndarray,
        first: np.ndarray,
        target: np.ndarray,
        positions: np.ndarray,
    ) -> None:
        """Reads ``read_off[a:b]`` into this thread's buffer, then copies their rows to ``target``."""
        buf = self._buffer()
        at = np.zeros(b - a + 1, np.int64)
        np.cumsum(read_len[a:b], out=at[1:])  # where each read lands in the buffer
        bad = _pread_all(self._fd, buf, read_off[a:b], read_len[a:b], at, self.file_bytes)
        if bad >= 0:  # redone in Python, which raises with the reason
            for i in range(a + bad, b):
                self._pread(buf[at[i - a] : at[i - a + 1]].data, int(read_off[i]))
        lo, hi = np.searchsorted(read_of, [a, b])  # the unique rows these reads hold
        rows_src = at[read_of[lo:hi] - a] + uniq[lo:hi] * self.row_bytes - read_off[read_of[lo:hi]]
        entries = by_row[first[lo] : first[hi]]
        per_row = np.diff(first[lo : hi + 1])
        _copy_out(buf, np.repeat(rows_src, per_row), target, positions[entries])

    def _pread(self, into: memoryview, offset: int) -> None:
        want = min(len(into), self.file_bytes - offset)  # an O_DIRECT read may run past the end
        got = os.preadv(self._fd, [into], offset)
        if got < want:
            raise DataLoss(f"{self.path}: {got} bytes at offset {offset}, expected {want}: the file was truncated")

    def _buffer(self) -> np.ndarray:
        """This thread's read buffer, shared by every table it reads (one per thread, not per table)."""
        buf: np.ndarray | None = getattr(_THREAD, "buf", None)
        if buf is None or len(buf) < self._piece + self._max_read:
            buf = np.frombuffer(
                mmap.mmap(-1, self._piece + self._max_read), np.uint8
            )  # page-aligned, as O_DIRECT wants
            _THREAD.buf = buf
        return buf

    def close(self) -> None:
        """Closes the file; idempotent. Read buffers go with their threads."""
        if self._fd >= 0:
            os.close(self._fd)
            self._fd = -1


def _round_up(n: int, align: int) -> int:
    return -(-n // align) * align


def _pieces(read_len: np.ndarray, piece_bytes: int) -> list[tuple[int, int]]:
    """Consecutive runs of reads ``[a, b)`` of at most about ``piece_bytes`` each (at least one read)."""
    ends = np.cumsum(read_len)
    piece_of = (ends - read_len) // piece_bytes  # by where each read starts: a piece may overrun by one read
    cuts = np.flatnonzero(np.diff(piece_of)) + 1
    bounds = [0, *cuts.tolist(), len(read_len)]
    return list(itertools.pairwise(bounds))


def direct_alignment(path: Path) -> int:
    """The ``O_DIRECT`` alignment of ``path``'s device: its logical block size (often 512 bytes,
    so that a 512-byte row is one 512-byte read), or 4096 where sysfs does not say."""
    dev = os.stat(path).st_dev
    block = Path(f"/sys/dev/block/{os.major(dev)}:{os.minor(dev)}")
    for queue in (block / "queue", block / ".." / "queue"):  # a disk, or the disk of a partition
        try:
            return int((queue / "logical_block_size").read_text())
        except (OSError, ValueError):
            continue
    return DIRECT_ALIGN


def _checked_alignment(fd: int, align: int) -> int:
    """``align`` if an ``O_DIRECT`` read of one block at offset ``align`` works, else 4096
    (a file system may ask for more than its device's logical block)."""
    buf = mmap.mmap(-1, DIRECT_ALIGN)
    try:
        os.preadv(fd, [memoryview(buf)[:align]], align)
    except OSError:
        return max(align, DIRECT_ALIGN)
    finally:
        buf.close()
    return align


def _open(path: Path, file_bytes: int, direct: bool) -> int:
    """Opens the flat file for reading, refusing one of the wrong size."""
    try:
        size = path.stat().st_size
    except FileNotFoundError:
        raise FailedPrecondition(f"{path} is missing: the flat copy of a node-data table") from None
    if size != file_bytes:
        raise FailedPrecondition(f"{path} holds {size} bytes, expected {file_bytes}: truncated or from another ingest")
    flags = os.O_RDONLY | (os.O_DIRECT if direct else 0)
    try:
        fd = os.open(path, flags)
    except OSError as e:
        raise FailedPrecondition(f"cannot open {path}{' with O_DIRECT' if direct else ''}: {e}") from e
    if not direct:  # no readahead: it would read (and cache) megabytes around every wanted row
        os.posix_fadvise(fd, 0, 0, os.POSIX_FADV_RANDOM)
    return fd
