"""Reader side: claiming a received message's segments (:class:`SegmentReader`), and a server's
cached mappings of a peer's segments it writes into (:class:`PeerSegments`)."""

from __future__ import annotations

import contextlib
import fcntl
import mmap
import os
import threading
import time
import weakref
from collections.abc import Callable
from pathlib import Path

import numpy as np
from numpy.typing import DTypeLike

from graphfeed.common.errors import DataLoss, FailedPrecondition, InvalidArgument
from graphfeed.common.shm.files import (
    FREE_SUFFIX,
    LENT_SUFFIX,
    SEGMENT_RE,
    map_existing,
    open_regular,
    start_trimmer,
    suffixed,
    try_rename,
    try_unlink,
    view,
)
from graphfeed.common.shm.segment import Segment


def _hand_back(lent: Path, free: Path, fd: int) -> None:
    """A recycled segment's reader is done with it: back to its writer's pool, lock released."""
    try_rename(lent, free)
    os.close(fd)


class SegmentReader:
    """Reader side for one received message: maps each named segment once and claims it
    (unlinks it, or, for a recycled one, renames it ``.lent`` and ``.free`` once unmapped).

    Only this user's ``0600`` regular files are accepted (:func:`~.files.check_trusted`). A
    segment that is gone when read is DATA_LOSS, not UNAVAILABLE: asking again for the same
    message cannot bring it back (the client re-asks for the step instead)."""

    _GONE = " (claimed twice, or expired before it was read)"

    def __init__(self, directory: Path) -> None:
        self.directory = Path(directory)
        self._maps: dict[str, tuple[mmap.mmap | None, int]] = {}

    def _claim(self, name: str, recycle: bool) -> tuple[mmap.mmap | None, int]:
        path = self.directory / name
        # Private copy-on-write: writable arrays (torch.from_numpy is happy) that change nobody else's.
        if not recycle:
            mapped = map_existing(path, os.O_RDONLY, self._GONE, DataLoss, access=mmap.ACCESS_COPY)
            try_unlink(path)  # a concurrent sweep/claim is fine: our mapping stays good
            return mapped
        # Recycled: the rename is the claim (atomic against the writer taking it back on expiry).
        # The writer rewrites the file only after it is ".free", i.e. after our mapping is gone,
        # so the private mapping never sees a later message's bytes.
        # While mapped, the reader holds a shared flock on the file: a writer whose reader died
        # (SIGKILL, no finalizer ran) finds it unlocked and takes the file back (SegmentPool).
        lent, free = suffixed(path, LENT_SUFFIX), suffixed(path, FREE_SUFFIX)
        if not try_rename(path, lent):
            raise DataLoss(f"shared-memory segment {name} is gone from {self.directory}{self._GONE}")
        try:
            fd, st = open_regular(lent, os.O_RDONLY, self._GONE, DataLoss)
        except BaseException:
            try_rename(lent, free)
            raise
        try:
            fcntl.flock(fd, fcntl.LOCK_SH)
            mm = mmap.mmap(fd, st.st_size, access=mmap.ACCESS_COPY) if st.st_size else None
        except BaseException:
            _hand_back(lent, free, fd)
            raise
        if mm is None:
            _hand_back(lent, free, fd)
        else:
            weakref.finalize(mm, _hand_back, lent, free, fd)
        return mm, st.st_size

    def array(
        self, name: str, offset: int, shape: tuple[int, ...], dtype: DTypeLike, recycle: bool = False
    ) -> np.ndarray:
        """The array stored at ``offset`` of segment ``name`` (mapped and claimed on first use;
        ``recycle``: the writer's pool gets the file back once every array over it is gone).

        The result is writable and keeps the mapping alive.

        Raises:
            InvalidArgument: a malformed name, or offset/shape/dtype outside the file.
            DataLoss: the segment file no longer exists.
            FailedPrecondition: the file exists but cannot be opened, or is not this user's.
        """
        if not isinstance(name, str) or not SEGMENT_RE.match(name):
            raise InvalidArgument(f"{name!r} is not a shared-memory segment name")
        entry = self._maps.get(name)
        if entry is None:
            entry = self._maps[name] = self._claim(name, recycle)
        mm, size = entry
        try:
            return view(mm, size, offset, shape, dtype)
        except (ValueError, TypeError) as e:
            raise InvalidArgument(
                f"segment {name} ({size} bytes) has no array of shape {shape!r}, dtype {dtype} at offset {offset}: {e}"
            ) from None


class PeerSegments:
    """Mappings of peers' segment files a server writes into (a loader's minibatch features),
    kept across calls: a loader recycles those files, so a graph-store that keeps its mapping
    writes into pages that are already mapped instead of faulting each one in again. Keyed by
    inode (a recycled file gets a new name per lease). A mapping is dropped when its file is
    deleted, when it is the least recently used beyond ``max_maps``, or after ``idle_s``
    unused. Thread-safe.

    ``max_maps`` must exceed the files one loader rotates through (its pool keeps up to 16 free
    ones, plus those in flight): with 8, a typed job's loader (two feature files per minibatch,
    ~12 in use) made each call map anew, and each graph-store took 15-25k page faults a second
    writing into pages it had mapped before (300-550 with 64, MAG-like edge job, shm). A mapping
    costs address space, and page tables only for the pages written.
    """

    def __init__(self, max_maps: int = 64, idle_s: float = 30.0, clock: Callable[[], float] = time.monotonic) -> None:
        self.max_maps = max_maps
        self.idle_s = idle_s
        self._clock = clock
        self._lock = threading.Lock()
        # (dev, inode) -> (fd, mapping, size, last use)
        self._maps: dict[tuple[int, int], tuple[int, mmap.mmap, int, float]] = {}
        self._closed = False
        self._trimmer: threading.Thread | None = None

    def _trim(self) -> bool:
        with self._lock:
            if not self._closed:
                self._expire(self._clock(), keep=None)
            return not self._closed

    def open(self, directory: Path, name: str) -> Segment:
        """The peer's segment ``name`` mapped read-write (shared); closing it keeps the mapping here.

        Raises:
            InvalidArgument: a name that is not a graphfeed segment.
            FailedPrecondition: no such segment in ``directory`` (the caller's own segment: asking
                again cannot help), or it cannot be opened or mapped, or is not this user's.
        """
        if not SEGMENT_RE.match(name or ""):
            raise InvalidArgument(f"{name!r} is not a graphfeed shared-memory segment name")
        path = Path(directory) / name
        fd, st = open_regular(path, os.O_RDWR, " (the caller removed it, or it expired)", FailedPrecondition)
        with self._lock:
            try:
                key, now = (st.st_dev, st.st_ino), self._clock()
                self._expire(now, keep=key)
                hit = self._maps.pop(key, None)
                mm: mmap.mmap | None  # None: an empty file, which cannot be mapped
                if hit is not None and hit[2] == st.st_size:
                    os.close(fd)
                    fd, mm = hit[0], hit[1]
                else:
                    if hit is not None:
                        self._close(hit)
                    mm = mmap.mmap(fd, st.st_size, flags=mmap.MAP_SHARED) if st.st_size else None
                if mm is None:
                    os.close(fd)
                    return Segment(name, path, 0, None)
                self._maps[key] = (fd, mm, st.st_size, now)  # most recently used last
                if self._trimmer is None:
                    self._trimmer = start_trimmer("peer-segments-trim", max(0.1, self.idle_s / 2), self._trim)
                while len(self._maps) > self.max_maps:
                    self._close(self._maps.pop(next(iter(self._maps))))
                return Segment(name, path, st.st_size, mm, recycle=True)
            except OSError as e:
                os.close(fd)
                raise FailedPrecondition(f"cannot map shared-memory segment {path}: {e.strerror}") from None

    def _expire(self, now: float, keep: tuple[int, int] | None) -> None:
        for key, entry in list(self._maps.items()):
            if key == keep:
                continue
            try:
                gone = os.fstat(entry[0]).st_nlink == 0
            except OSError:
                gone = True
            if gone or now - entry[3] > self.idle_s:
                self._close(self._maps.pop(key))

    @staticmethod
    def _close(entry: tuple[int, mmap.mmap, int, float]) -> None:
        os.close(entry[0])
        with contextlib.suppress(BufferError):  # a writer still holds a view: unmapped when it is done
            entry[1].close()

    def __len__(self) -> int:
        with self._lock:
            return len(self._maps)

    def close(self) -> None:
        with self._lock:
            self._closed = True
            maps, self._maps = self._maps, {}
        for entry in maps.values():
            self._close(entry)
