"""Writer side: reusable segment files, so that a message does not pay for fresh tmpfs pages."""

from __future__ import annotations

import contextlib
import errno
import fcntl
import mmap
import os
import threading
import time
from collections.abc import Callable
from pathlib import Path

from graphfeed.common.errors import FailedPrecondition, ResourceExhausted, Unavailable
from graphfeed.common.shm.files import FREE_SUFFIX, LENT_SUFFIX, start_trimmer, suffixed, try_rename, try_unlink
from graphfeed.common.shm.owner_locks import new_segment_name
from graphfeed.common.shm.segment import Segment


class SegmentPool:
    """A writer's reusable segment files in one directory. Thread-safe.

    Fresh tmpfs pages are allocated and zeroed by the kernel on first touch, which costs more
    than the copy into them (143 MB: ~35 ms to allocate vs ~17 ms to copy, measured); a pool
    hands out files whose pages already exist. A lease is renamed to a fresh name each time,
    so a name still means one message (registries and back-pressure that watch names need no
    change) while the inode, and the graph-stores' mappings of it, stay. A file comes back
    when its reader unmaps it (renamed ``.free``, see :class:`SegmentReader`) or when it
    expires unclaimed (:class:`SegmentRegistry`). A ``.free`` file counts as handed back only
    if it is the pool's own inode: another local user can create ``<name>.free`` in a shared
    tmpfs, and taking that for ours would send their bytes, or lose ours, as a message. The pool
    never refuses: with every file out (a reader that keeps its minibatches) it makes another,
    and it keeps at most ``max_free`` of the files that come back.

    Args:
        directory: the shared-memory directory.
        max_free: handed-back files kept for reuse; more are deleted as they come back.
        headroom: a new file is this much larger than asked, so that the next, slightly larger
            message still fits.
        idle_s: a handed-back file unused this long is deleted at the next :meth:`acquire`.
    """

    _ROUND = 64 << 10
    ABANDON_GRACE_S = 5.0  # a lent file younger than this is never taken for abandoned

    def __init__(
        self,
        directory: Path,
        max_free: int = 8,
        headroom: float = 0.125,
        idle_s: float = 30.0,
        clock: Callable[[], float] = time.monotonic,
    ) -> None:
        self.directory = Path(directory)
        self.max_free = max_free
        self.headroom = headroom
        self.idle_s = idle_s
        self._clock = clock
        self._lock = threading.Lock()
        # current name -> (mapping, capacity, time it was handed back or None while out)
        self._files: dict[str, tuple[mmap.mmap, int, float | None]] = {}
        self._inodes: dict[str, tuple[int, int]] = {}  # current name -> (st_dev, st_ino) of its file
        self._closed = False
        self._trimmer: threading.Thread | None = None

    def _trim(self) -> bool:
        """Background: an idle writer's handed-back files go after ``idle_s`` even if it never
        acquires again. False once closed."""
        with self._lock:
            if not self._closed:
                self._collect(self._clock())
            return not self._closed

    def acquire(self, nbytes: int, name: str | None = None) -> Segment:
        """A lease of at least ``nbytes`` (its ``nbytes`` is the file's capacity), named
        ``name`` (default: a fresh name), mapped read-write; close it when written.

        Raises:
            Unavailable: the pool is closed (server shutdown).
            ResourceExhausted / FailedPrecondition: as :meth:`Segment.create`.
        """
        name = name or new_segment_name(self.directory)
        with self._lock:
            if self._closed:
                raise Unavailable(f"the segment pool in {self.directory} is closed (server shutting down)")
            self._collect(self._clock())
            free = [(cap, old) for old, (_, cap, since) in self._files.items() if since is not None]
            fits = sorted(x for x in free if x[0] >= nbytes)
            if fits:
                return self._lease(fits[0][1], name)
            if free:  # grow the largest free file rather than own one more
                return self._lease(max(free)[1], name, self._capacity(nbytes))
            seg = Segment.create(self.directory, self._capacity(nbytes), name=name)
            mm = seg.mapping
            if mm is None:  # a capacity is a positive multiple of _ROUND, so create() maps it
                raise FailedPrecondition(f"pool segment {seg.path} of {seg.nbytes} bytes has no mapping")
            self._files[name] = (mm, seg.nbytes, None)
            st = os.stat(seg.path, follow_symlinks=False)
            self._inodes[name] = (st.st_dev, st.st_ino)
            if self._trimmer is None:
                self._trimmer = start_trimmer("segment-pool-trim", max(0.1, self.idle_s / 2), self._trim)
            return Segment(name, seg.path, seg.nbytes, mm, recycle=True)

    def _capacity(self, nbytes: int) -> int:
        want = max(1, int(nbytes * (1 + self.headroom)))
        return -(-want // self._ROUND) * self._ROUND

    def _collect(self, now: float) -> None:
        """Takes back files readers handed back; forgets ones removed behind its back; deletes
        ones idle past ``idle_s`` and the oldest beyond ``max_free``."""
        free: list[tuple[float, str]] = []
        for name, (mm, cap, since) in list(self._files.items()):
            path = self.directory / name
            if since is None:
                if self._is_ours(name, suffixed(path, FREE_SUFFIX)) or self._reclaim_abandoned(name, path):
                    self._files[name] = (mm, cap, now)
                    free.append((now, name))
                elif not (os.path.lexists(path) or os.path.lexists(suffixed(path, LENT_SUFFIX))):
                    self._drop(name)
            elif now - since > self.idle_s:
                self._drop(name)
            else:
                free.append((since, name))
        for _, name in sorted(free, reverse=True)[self.max_free :]:
            self._drop(name)

    def _is_ours(self, name: str, path: Path) -> bool:
        """Whether ``path`` is the file the pool created for ``name`` (same inode, not a link)."""
        try:
            st = os.stat(path, follow_symlinks=False)
        except OSError:
            return False
        return (st.st_dev, st.st_ino) == self._inodes.get(name) and st.st_uid == os.geteuid()

    def _reclaim_abandoned(self, name: str, path: Path) -> bool:
        """Takes back a lent file whose reader died without handing it back: readers hold a
        shared flock while mapped, so an exclusive one succeeds only when none is alive. A file
        lent less than ``ABANDON_GRACE_S`` ago is left alone (its reader may be about to lock)."""
        lent = suffixed(path, LENT_SUFFIX)
        try:
            fd = os.open(lent, os.O_RDONLY | os.O_NOFOLLOW)
        except OSError:
            return False
        try:
            st = os.fstat(fd)
            if (st.st_dev, st.st_ino) != self._inodes.get(name) or time.time() - st.st_ctime < self.ABANDON_GRACE_S:
                return False
            try:
                fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
            except BlockingIOError:
                return False  # a live reader
            return try_rename(lent, suffixed(path, FREE_SUFFIX))
        finally:
            os.close(fd)

    def _drop(self, name: str) -> None:
        mm = self._files.pop(name)[0]
        if self._is_ours(name, self.directory / (name + FREE_SUFFIX)):
            try_unlink(self.directory / (name + FREE_SUFFIX))
        self._inodes.pop(name, None)
        with contextlib.suppress(BufferError):
            mm.close()

    def _lease(self, old: str, name: str, grow_to: int | None = None) -> Segment:
        mm, cap, _ = self._files.pop(old)
        inode = self._inodes.pop(old)
        path = self.directory / name
        try:
            if os.path.lexists(path):
                raise FileExistsError(errno.EEXIST, "segment name in use")
            os.rename(self.directory / (old + FREE_SUFFIX), path)
            st = os.stat(path, follow_symlinks=False)
            if (st.st_dev, st.st_ino) != inode:  # swapped between the check and the rename
                raise FileExistsError(errno.EEXIST, f"{old}.free was replaced by another file")
            if grow_to is not None and grow_to > cap:
                with contextlib.suppress(BufferError):
                    mm.close()
                fd = os.open(path, os.O_RDWR)
                try:
                    os.posix_fallocate(fd, 0, grow_to)
                    mm, cap = mmap.mmap(fd, grow_to, flags=mmap.MAP_SHARED), grow_to
                finally:
                    os.close(fd)
        except OSError as e:
            try_unlink(path)
            try_unlink(self.directory / (old + FREE_SUFFIX))
            if e.errno in (errno.ENOSPC, errno.EDQUOT, errno.ENOMEM):
                raise ResourceExhausted(f"no room for a {grow_to}-byte segment in {self.directory}") from None
            raise FailedPrecondition(f"cannot reuse shared-memory segment {old} as {name}: {e.strerror}") from None
        self._files[name] = (mm, cap, None)
        self._inodes[name] = inode
        return Segment(name, path, cap, mm, recycle=True)

    def reusable(self, nbytes: int) -> bool:
        """Whether a handed-back file takes ``nbytes`` as it is (no new room in the directory)."""
        with self._lock:
            if self._closed:
                return False
            self._collect(self._clock())
            return any(since is not None and cap >= nbytes for _, cap, since in self._files.values())

    @property
    def files(self) -> int:
        """Files the pool owns (out or free)."""
        with self._lock:
            return len(self._files)

    def close(self) -> None:
        """Deletes every file of the pool in whatever state (readers keep their mappings); idempotent."""
        with self._lock:
            self._closed = True
            files, self._files = self._files, {}
            inodes, self._inodes = self._inodes, {}
        for name, (mm, _, _) in files.items():
            for suffix in ("", LENT_SUFFIX, FREE_SUFFIX):
                path = self.directory / (name + suffix)
                with contextlib.suppress(OSError):
                    st = os.stat(path, follow_symlinks=False)
                    if (st.st_dev, st.st_ino) == inodes.get(name):  # never another user's file
                        try_unlink(path)
            with contextlib.suppress(BufferError):
                mm.close()
