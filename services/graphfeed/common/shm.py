"""Shared-memory transport for bulk tensors between processes on one host.

The bytes travel through files in a tmpfs directory (default ``/dev/shm``); a gRPC message
only carries (segment name, byte offset). The writer creates one file per message
(:class:`Segment`, laid out by :class:`Arena`); the reader maps it copy-on-write and unlinks it
at once (:class:`SegmentReader`, "claiming" it). A mapping outlives the unlink, so the kernel
refcounts the memory and no ring buffer or cross-process slot tracking is needed. Files nobody
claims are removed by the writer's :class:`SegmentRegistry`. A writer that sends many
equally large messages (a loader's minibatch features) reuses its files instead
(:class:`SegmentPool`): allocating and zeroing fresh tmpfs pages costs more than the copy into
them, so the reader of a recycled segment renames it (``.lent``, then ``.free`` once unmapped)
rather than unlinking it, and the writer picks it up again. Both sides must see the same
directory (same host, same mount, same user): the client proves it with a probe file
(:class:`ShmOffer`) that the server checks (:class:`OfferVerifier`) before using shared memory.

A writer that dies without cleaning up (SIGKILL, the OOM killer) must not leave its files in
the tmpfs for good (they are memory). Every writing process holds an *owner lock* in the
directory (``graphfeed-owner-<token>``, ``flock``-ed until it exits; the kernel drops the lock
however the process ends), and its segment and probe names carry the token. The first process to write
into a directory sweeps the files of every owner whose lock is free (:func:`owner_token`).
``flock`` works across pods that share a node's ``/dev/shm``, where pids do not.
"""

from __future__ import annotations

import atexit
import contextlib
import errno
import fcntl
import hmac
import itertools
import logging
import math
import mmap
import os
import re
import secrets
import stat
import threading
import time
import weakref
from collections.abc import Callable, Iterable, Sequence
from pathlib import Path

import numpy as np

from graphfeed.common.errors import FailedPrecondition, InvalidArgument, ResourceExhausted, Unavailable

log = logging.getLogger(__name__)

SEGMENT_PREFIX = "graphfeed-seg-"
PROBE_PREFIX = "graphfeed-probe-"
OWNER_PREFIX = "graphfeed-owner-"
ALIGN = 64  # every array starts at a multiple of 64 bytes
METADATA_KEY = "graphfeed-shm"  # gRPC metadata key of a client's offer
DEFAULT_DIR = Path("/dev/shm")

LENT_SUFFIX = ".lent"  # a recycled segment a reader has mapped
FREE_SUFFIX = ".free"  # a recycled segment handed back to its writer's pool
# graphfeed-seg-<owner token: pid "o" 8 hex>-<counter>-<8 hex>
_SEGMENT_RE = re.compile(rf"^{SEGMENT_PREFIX}[0-9]+o[0-9a-f]{{8}}-[0-9]+-[0-9a-f]{{8}}$")
_PROBE_RE = re.compile(rf"^{PROBE_PREFIX}[0-9]+o[0-9a-f]{{8}}-[0-9a-f]{{16}}$")  # owner token, then its own
_OWNER_RE = re.compile(rf"^{OWNER_PREFIX}([0-9]+o[0-9a-f]{{8}})$")
_counter = itertools.count()
_owners: dict[Path, tuple[int, str, int]] = {}  # directory -> (pid, token, locked fd)
_owners_lock = threading.Lock()


def owner_token(directory: Path) -> str:
    """This process's owner token in ``directory`` (part of every segment name it writes there).

    The first call per process and directory creates the owner lock (under a temporary name,
    locked, then renamed into place, so no sweeper sees it unlocked) and sweeps the segment
    files of dead owners: those whose lock file can be locked.

    Raises:
        FailedPrecondition: the directory is not writable.
    """
    key = Path(directory)
    with _owners_lock:
        held = _owners.get(key)
        if held is not None and held[0] == os.getpid():
            return held[1]
        token = f"{os.getpid()}o{secrets.token_hex(4)}"
        tmp = key / f".{OWNER_PREFIX}{token}.tmp"
        try:
            fd = os.open(tmp, os.O_CREAT | os.O_EXCL | os.O_RDWR, 0o600)
            fcntl.flock(fd, fcntl.LOCK_EX)
            os.rename(tmp, key / f"{OWNER_PREFIX}{token}")
        except OSError as e:
            raise FailedPrecondition(f"cannot create the owner lock in {key}: {e.strerror}") from None
        if not _owners:
            atexit.register(_release_owners)
        _owners[key] = (os.getpid(), token, fd)
    swept = sweep_dead_owners(key)
    if swept:
        log.info("removed %d files of dead writers from %s", swept, key)
    return token


def _release_owners() -> None:
    """At a graceful exit: this process's owner locks go (its segments are gone by then)."""
    with _owners_lock:
        mine = [(d, token, fd) for d, (pid, token, fd) in _owners.items() if pid == os.getpid()]
        _owners.clear()
    for directory, token, fd in mine:
        _unlink(directory / f"{OWNER_PREFIX}{token}")
        with contextlib.suppress(OSError):
            os.close(fd)


def sweep_dead_owners(directory: Path) -> int:
    """Removes the segment and probe files (and owner locks) of every owner in ``directory`` whose lock is
    free: its process is gone. Returns the files removed. Readers still mapping such a file keep
    their mapping (an unlink never invalidates one)."""
    directory = Path(directory)
    removed = 0
    try:
        names = os.listdir(directory)
    except OSError:
        return 0
    for name in names:
        m = _OWNER_RE.match(name)
        if m is None:
            continue
        try:
            fd = os.open(directory / name, os.O_RDWR)
        except OSError:
            continue  # swept by someone else meanwhile
        try:
            fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
        except OSError:
            continue  # alive
        finally:
            os.close(fd)  # also releases our lock if we got it
        prefixes = (f"{SEGMENT_PREFIX}{m.group(1)}-", f"{PROBE_PREFIX}{m.group(1)}-")
        removed += sum(_unlink(directory / n) for n in names if n.startswith(prefixes))
        removed += _unlink(directory / name)
    return removed


def _new_name(directory: Path) -> str:
    return f"{SEGMENT_PREFIX}{owner_token(directory)}-{next(_counter)}-{secrets.token_hex(4)}"


def _unlink(path: Path) -> bool:
    try:
        os.unlink(path)
        return True
    except OSError:  # already claimed / swept
        return False


def _rename(src: Path, dst: Path) -> bool:
    try:
        os.rename(src, dst)
        return True
    except OSError:  # claimed / handed back / removed meanwhile
        return False


def _start_trimmer(name: str, interval_s: float, trim: Callable[[], bool]) -> threading.Thread:
    """A daemon thread that calls ``trim()`` every ``interval_s`` until it returns False: how
    a pool or a mapping cache lets go of memory while its owner is idle."""

    def loop() -> None:
        while True:
            time.sleep(interval_s)
            if not trim():
                return

    thread = threading.Thread(target=loop, name=name, daemon=True)
    thread.start()
    return thread


def _suffixed(path: Path, suffix: str) -> Path:
    return path.with_name(path.name + suffix)


def _aligned(n: int) -> int:
    return -(-n // ALIGN) * ALIGN


def _layout(shape: Sequence[int], dtype: object) -> tuple[tuple[int, ...], np.dtype, int]:
    """Checked (shape, dtype, byte count); ValueError/TypeError on nonsense."""
    dt = np.dtype(dtype)
    if dt.hasobject:
        raise ValueError(f"dtype {dt} holds Python objects and cannot be shared")
    shp = tuple(int(d) for d in shape)
    if any(d < 0 for d in shp):
        raise ValueError(f"shape {shp} has a negative dimension")
    return shp, dt, math.prod(shp) * dt.itemsize


def _view(buf: mmap.mmap | None, size: int, offset: int, shape: Sequence[int], dtype: object) -> np.ndarray:
    """An array over ``buf[offset:]``; ValueError/TypeError when it does not fit."""
    shp, dt, nbytes = _layout(shape, dtype)
    offset = int(offset)
    if offset < 0 or offset + nbytes > size:
        raise ValueError(f"{nbytes} bytes at offset {offset} do not fit in {size} bytes")
    if nbytes == 0 or buf is None:
        return np.empty(shp, dt)
    return np.frombuffer(buf, dtype=dt, count=nbytes // dt.itemsize, offset=offset).reshape(shp)


def _open_regular(path: Path, mode: int, gone_hint: str = "") -> tuple[int, os.stat_result]:
    """``(fd, stat)`` of an existing regular segment file; the caller closes the fd.

    Raises:
        Unavailable: the file is gone. FailedPrecondition: it cannot be opened or is not a file.
    """
    try:
        fd = os.open(path, mode | os.O_NOFOLLOW)
    except FileNotFoundError:
        raise Unavailable(f"shared-memory segment {path.name} is gone from {path.parent}{gone_hint}") from None
    except OSError as e:
        raise FailedPrecondition(f"cannot open shared-memory segment {path}: {e.strerror}") from None
    try:
        st = os.fstat(fd)
        if not stat.S_ISREG(st.st_mode):
            raise FailedPrecondition(f"shared-memory segment {path} is not a regular file")
    except BaseException:
        os.close(fd)
        raise
    return fd, st


def _map_existing(path: Path, mode: int, gone_hint: str, **mmap_args: int) -> tuple[mmap.mmap | None, int]:
    """Maps an existing regular segment file; ``(None, 0)`` for an empty one (raises as :func:`_open_regular`)."""
    fd, st = _open_regular(path, mode, gone_hint)
    try:
        return (mmap.mmap(fd, st.st_size, **mmap_args) if st.st_size else None), st.st_size
    finally:
        os.close(fd)


class Segment:
    """Writer side: one file of exactly ``nbytes``, mapped read-write (shared).

    ``recycle`` marks a lease from a :class:`SegmentPool`: the pool keeps the mapping, so
    :meth:`close` only ends this handle, and the reader hands the file back instead of unlinking it.
    """

    def __init__(self, name: str, path: Path, nbytes: int, mm: mmap.mmap | None, recycle: bool = False) -> None:
        self.name = name
        self.path = path
        self.nbytes = nbytes
        self.recycle = recycle
        self._mm = mm
        self._closed = False

    @classmethod
    def create(
        cls, directory: Path, nbytes: int, registry: SegmentRegistry | None = None, owner: object = None,
        name: str | None = None,
    ) -> Segment:
        """Creates and maps a new segment file.

        Args:
            directory: the shared-memory directory.
            nbytes: exact file size; may be 0.
            registry: records the file so it is removed if nobody claims it.
            owner: the registry owner (e.g. a stream); None for one-off messages.
            name: the file name (default: a fresh unique one).

        Raises:
            ResourceExhausted: the directory has no room for ``nbytes``.
            FailedPrecondition: the file could not be created or mapped.
        """
        if nbytes < 0:
            raise ValueError(f"segment size {nbytes} is negative")
        name = name or _new_name(Path(directory))
        path = Path(directory) / name
        try:
            fd = os.open(path, os.O_CREAT | os.O_EXCL | os.O_RDWR, 0o600)
        except OSError as e:
            raise FailedPrecondition(f"cannot create shared-memory segment {path}: {e.strerror}") from None
        try:
            if nbytes:
                # Allocate now: a sparse tmpfs file that runs out of room kills the writer with
                # SIGBUS on the copy; fallocate fails cleanly with ENOSPC instead.
                try:
                    os.posix_fallocate(fd, 0, nbytes)
                except OSError as e:
                    if e.errno not in (errno.EOPNOTSUPP, errno.EINVAL):
                        raise
                    os.ftruncate(fd, nbytes)
                # Not MAP_POPULATE: prefaulting a tmpfs mapping costs ~2x the first-touch faults it saves
                # (143 MB: 67 ms vs ~10 ms, measured), and a loader's feature segment is written
                # by the graph-stores, not by its creator.
                mm = mmap.mmap(fd, nbytes, flags=mmap.MAP_SHARED)
            else:
                mm = None
        except OSError as e:
            os.close(fd)
            os.unlink(path)
            if e.errno in (errno.ENOSPC, errno.EDQUOT, errno.ENOMEM):
                raise ResourceExhausted(f"no room for a {nbytes}-byte segment in {directory}") from None
            raise FailedPrecondition(f"cannot size/map shared-memory segment {path}: {e.strerror}") from None
        os.close(fd)
        if registry is not None:
            registry.add(path, owner)
        return cls(name, path, nbytes, mm)

    def array(self, offset: int, shape: tuple[int, ...], dtype: object) -> np.ndarray:
        """A writable view of ``shape``/``dtype`` at byte ``offset``; ValueError if it does not fit."""
        if self._closed:
            raise ValueError(f"segment {self.name} is closed")
        return _view(self._mm, self.nbytes, offset, shape, dtype)

    def close(self) -> None:
        """Drops the writer's mapping (the data stays in the file; a pool's lease leaves the
        mapping to the pool); idempotent."""
        self._closed = True
        mm, self._mm = self._mm, None
        if mm is not None and not self.recycle:
            with contextlib.suppress(BufferError):  # arrays still exported: unmapped when the last dies
                mm.close()


class PeerSegments:
    """Mappings of peers' segment files a server writes into (a loader's minibatch features),
    kept across calls: a loader recycles those files, so a graph-store that keeps its mapping
    writes into pages that are already mapped instead of faulting each one in again. Keyed by
    inode (a recycled file gets a new name per lease). A mapping is dropped when its file is
    deleted, when it is the least recently used beyond ``max_maps``, or after ``idle_s``
    unused. Thread-safe.
    """

    def __init__(self, max_maps: int = 8, idle_s: float = 30.0, clock: Callable[[], float] = time.monotonic) -> None:
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
            Unavailable: no such segment in ``directory``.
            FailedPrecondition: it cannot be opened or mapped.
        """
        if not _SEGMENT_RE.match(name or ""):
            raise InvalidArgument(f"{name!r} is not a graphfeed shared-memory segment name")
        path = Path(directory) / name
        fd, st = _open_regular(path, os.O_RDWR)
        with self._lock:
            try:
                key, now = (st.st_dev, st.st_ino), self._clock()
                self._expire(now, keep=key)
                hit = self._maps.pop(key, None)
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
                    self._trimmer = _start_trimmer("peer-segments-trim", max(0.1, self.idle_s / 2), self._trim)
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


class Arena:
    """Lays out several arrays in one segment: :meth:`put` returns the offset at once, :meth:`finish` copies.

    With a ``pool`` the segment is a recycled file (``recycle`` is True, and the references to
    it must say so: :func:`graphfeed.common.codec.encode` does)."""

    def __init__(
        self, directory: Path, registry: SegmentRegistry | None = None, owner: object = None, pool: SegmentPool | None = None
    ) -> None:
        self.directory = Path(directory)
        self.name = _new_name(self.directory)
        self.recycle = pool is not None
        self._registry = registry
        self._owner = owner
        self._pool = pool
        self._items: list[tuple[int, np.ndarray | None]] = []
        self._end = 0
        self._finished = False

    def _place(self, nbytes: int) -> int:
        if self._finished:
            raise ValueError(f"arena {self.name} is already finished")
        offset = _aligned(self._end)
        self._end = offset + nbytes
        return offset

    def put(self, array: np.ndarray) -> int:
        """Places an array (copied C-contiguous at :meth:`finish`); returns its byte offset.

        Raises:
            InvalidArgument: the array holds Python objects.
        """
        arr = np.asarray(array)
        if arr.dtype.hasobject:
            raise InvalidArgument(f"dtype {arr.dtype} holds Python objects and cannot be shared")
        offset = self._place(arr.nbytes)
        self._items.append((offset, arr))
        return offset

    def reserve(self, shape: Sequence[int], dtype: object) -> int:
        """Places space for an array the caller fills via ``segment.array`` after :meth:`finish`."""
        _, _, nbytes = _layout(shape, dtype)
        offset = self._place(nbytes)
        self._items.append((offset, None))
        return offset

    @property
    def nbytes(self) -> int:
        """Size of the segment :meth:`finish` creates (end of the last array)."""
        return self._end

    def finish(self) -> Segment | None:
        """Creates the segment, copies every put array; None (no file) if nothing was placed.

        The returned segment is still mapped so reserved parts can be filled; the caller closes it.
        """
        if self._finished:
            raise ValueError(f"arena {self.name} is already finished")
        self._finished = True
        items, self._items = self._items, []
        if not items:
            return None
        if self._pool is not None:
            seg = self._pool.acquire(self._end, self.name)
            if self._registry is not None:
                self._registry.add(seg.path, self._owner, recycle=True)
        else:
            seg = Segment.create(self.directory, self._end, self._registry, self._owner, name=self.name)
        for offset, arr in items:
            if arr is not None and arr.nbytes:
                seg.array(offset, arr.shape, arr.dtype)[...] = arr
        return seg


class SegmentReader:
    """Reader side for one received message: maps each named segment once and claims it
    (unlinks it, or, for a recycled one, renames it ``.lent`` and ``.free`` once unmapped)."""

    _GONE = " (claimed twice, or expired before it was read)"

    def __init__(self, directory: Path) -> None:
        self.directory = Path(directory)
        self._maps: dict[str, tuple[mmap.mmap | None, int]] = {}

    def _claim(self, name: str, recycle: bool) -> tuple[mmap.mmap | None, int]:
        path = self.directory / name
        # Private copy-on-write: writable arrays (torch.from_numpy is happy) that change nobody else's.
        if not recycle:
            mapped = _map_existing(path, os.O_RDONLY, self._GONE, access=mmap.ACCESS_COPY)
            _unlink(path)  # a concurrent sweep/claim is fine: our mapping stays good
            return mapped
        # Recycled: the rename is the claim (atomic against the writer taking it back on expiry).
        # The writer rewrites the file only after it is ".free", i.e. after our mapping is gone,
        # so the private mapping never sees a later message's bytes.
        lent = _suffixed(path, LENT_SUFFIX)
        if not _rename(path, lent):
            raise Unavailable(f"shared-memory segment {name} is gone from {self.directory}{self._GONE}")
        try:
            mm, size = _map_existing(lent, os.O_RDONLY, self._GONE, access=mmap.ACCESS_COPY)
        except BaseException:
            _rename(lent, _suffixed(path, FREE_SUFFIX))
            raise
        if mm is None:
            _rename(lent, _suffixed(path, FREE_SUFFIX))
        else:
            weakref.finalize(mm, _rename, lent, _suffixed(path, FREE_SUFFIX))
        return mm, size

    def array(self, name: str, offset: int, shape: tuple[int, ...], dtype: object, recycle: bool = False) -> np.ndarray:
        """The array stored at ``offset`` of segment ``name`` (mapped and claimed on first use;
        ``recycle``: the writer's pool gets the file back once every array over it is gone).

        The result is writable and keeps the mapping alive.

        Raises:
            InvalidArgument: a malformed name, or offset/shape/dtype outside the file.
            Unavailable: the segment file no longer exists.
            FailedPrecondition: the file exists but cannot be opened.
        """
        if not isinstance(name, str) or not _SEGMENT_RE.match(name):
            raise InvalidArgument(f"{name!r} is not a shared-memory segment name")
        entry = self._maps.get(name)
        if entry is None:
            entry = self._maps[name] = self._claim(name, recycle)
        mm, size = entry
        try:
            return _view(mm, size, offset, shape, dtype)
        except (ValueError, TypeError) as e:
            raise InvalidArgument(
                f"segment {name} ({size} bytes) has no array of shape {shape!r}, dtype {dtype} at offset {offset}: {e}"
            ) from None


class SegmentRegistry:
    """Writer-side bookkeeping so that unclaimed segments never leak. Thread-safe.

    A segment of owner None may be swept ``ttl_s`` after creation; one of a live owner never,
    until :meth:`release` (then ``ttl_s`` after the release).
    """

    def __init__(self, ttl_s: float = 300.0, clock: Callable[[], float] = time.monotonic) -> None:
        self.ttl_s = ttl_s
        self._clock = clock
        self._lock = threading.Lock()
        # id(owner) -> (owner, {path: deadline or None while the owner is live})
        self._groups: dict[int, tuple[object, dict[Path, float | None]]] = {}
        self._recycled: set[Path] = set()
        self._last_sweep = clock()

    def _expire(self, path: Path) -> bool:
        if path in self._recycled:
            self._recycled.discard(path)
            return _rename(path, _suffixed(path, FREE_SUFFIX))
        return _unlink(path)

    def _forget(self, paths: dict[Path, float | None], path: Path) -> None:
        del paths[path]
        self._recycled.discard(path)

    def add(self, path: Path, owner: object = None, recycle: bool = False) -> None:
        """Records a new segment file of ``owner``; a ``recycle`` one (from a :class:`SegmentPool`)
        expires by going back to its pool (renamed ``.free``) instead of being unlinked."""
        with self._lock:
            now = self._clock()
            group = self._groups.setdefault(id(owner), (owner, {}))[1]
            group[Path(path)] = now + self.ttl_s if owner is None else None
            if recycle:
                self._recycled.add(Path(path))
            if now - self._last_sweep >= 1.0:
                self._sweep_locked(now)

    def outstanding(self, owner: object) -> int:
        """How many segments of ``owner`` are still unclaimed (their file exists)."""
        with self._lock:
            entry = self._groups.get(id(owner))
            if entry is None:
                return 0
            paths = entry[1]
            for path in [p for p in paths if not os.path.lexists(p)]:
                self._forget(paths, path)
            if not paths:
                del self._groups[id(owner)]
            return len(paths)

    def release(self, owner: object) -> None:
        """The owner is done: its unclaimed segments become sweepable ``ttl_s`` from now."""
        with self._lock:
            entry = self._groups.get(id(owner))
            if entry is not None and owner is not None:
                deadline = self._clock() + self.ttl_s
                for path in entry[1]:
                    entry[1][path] = deadline

    def drop(self, owner: object) -> int:
        """Unlinks (or hands back to their pool) the owner's unclaimed segments now (its reader
        is gone, e.g. a cancelled stream); returns the count."""
        with self._lock:
            entry = self._groups.pop(id(owner), None)
            return sum(self._expire(path) for path in entry[1]) if entry is not None else 0

    def sweep(self) -> int:
        """Unlinks unclaimed segments past their deadline, forgets claimed ones; returns the count unlinked."""
        with self._lock:
            return self._sweep_locked(self._clock())

    def _sweep_locked(self, now: float) -> int:
        self._last_sweep = now
        unlinked = 0
        for key, (_, paths) in list(self._groups.items()):
            for path, deadline in list(paths.items()):
                if deadline is not None and now >= deadline:
                    unlinked += self._expire(path)
                    self._forget(paths, path)
                elif not os.path.lexists(path):
                    self._forget(paths, path)
            if not paths:
                del self._groups[key]
        return unlinked

    def close(self) -> None:
        """Unlinks every segment still unclaimed (server shutdown)."""
        with self._lock:
            groups, self._groups = self._groups, {}
            self._recycled.clear()
        for _, paths in groups.values():
            for path in paths:
                _unlink(path)


class SegmentPool:
    """A writer's reusable segment files in one directory. Thread-safe.

    Fresh tmpfs pages are allocated and zeroed by the kernel on first touch, which costs more
    than the copy into them (143 MB: ~35 ms to allocate vs ~17 ms to copy, measured); a pool
    hands out files whose pages already exist. A lease is renamed to a fresh name each time,
    so a name still means one message (registries and back-pressure that watch names need no
    change) while the inode, and the graph-stores' mappings of it, stay. A file comes back
    when its reader unmaps it (renamed ``.free``, see :class:`SegmentReader`) or when it
    expires unclaimed (:class:`SegmentRegistry`). The pool never refuses: with every file out
    (a reader that keeps its minibatches) it makes another, and it keeps at most ``max_free``
    of the files that come back.

    Args:
        directory: the shared-memory directory.
        max_free: handed-back files kept for reuse; more are deleted as they come back.
        headroom: a new file is this much larger than asked, so that the next, slightly larger
            message still fits.
        idle_s: a handed-back file unused this long is deleted at the next :meth:`acquire`.
    """

    _ROUND = 64 << 10

    def __init__(self, directory: Path, max_free: int = 8, headroom: float = 0.125, idle_s: float = 30.0,
                 clock: Callable[[], float] = time.monotonic) -> None:  # fmt: skip
        self.directory = Path(directory)
        self.max_free = max_free
        self.headroom = headroom
        self.idle_s = idle_s
        self._clock = clock
        self._lock = threading.Lock()
        # current name -> (mapping, capacity, time it was handed back or None while out)
        self._files: dict[str, tuple[mmap.mmap, int, float | None]] = {}
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
        name = name or _new_name(self.directory)
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
            self._files[name] = (seg._mm, seg.nbytes, None)
            if self._trimmer is None:
                self._trimmer = _start_trimmer("segment-pool-trim", max(0.1, self.idle_s / 2), self._trim)
            return Segment(name, seg.path, seg.nbytes, seg._mm, recycle=True)

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
                if os.path.lexists(_suffixed(path, FREE_SUFFIX)):
                    self._files[name] = (mm, cap, now)
                    free.append((now, name))
                elif not (os.path.lexists(path) or os.path.lexists(_suffixed(path, LENT_SUFFIX))):
                    self._drop(name)
            elif now - since > self.idle_s:
                self._drop(name)
            else:
                free.append((since, name))
        for _, name in sorted(free, reverse=True)[self.max_free :]:
            self._drop(name)

    def _drop(self, name: str) -> None:
        mm = self._files.pop(name)[0]
        _unlink(self.directory / (name + FREE_SUFFIX))
        with contextlib.suppress(BufferError):
            mm.close()

    def _lease(self, old: str, name: str, grow_to: int | None = None) -> Segment:
        mm, cap, _ = self._files.pop(old)
        path = self.directory / name
        try:
            if os.path.lexists(path):
                raise FileExistsError(errno.EEXIST, "segment name in use")
            os.rename(self.directory / (old + FREE_SUFFIX), path)
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
            _unlink(path)
            _unlink(self.directory / (old + FREE_SUFFIX))
            if e.errno in (errno.ENOSPC, errno.EDQUOT, errno.ENOMEM):
                raise ResourceExhausted(f"no room for a {grow_to}-byte segment in {self.directory}") from None
            raise FailedPrecondition(f"cannot reuse shared-memory segment {old} as {name}: {e.strerror}") from None
        self._files[name] = (mm, cap, None)
        return Segment(name, path, cap, mm, recycle=True)

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
        for name, (mm, _, _) in files.items():
            for suffix in ("", LENT_SUFFIX, FREE_SUFFIX):
                _unlink(self.directory / (name + suffix))
            with contextlib.suppress(BufferError):
                mm.close()


class ShmOffer:
    """Client side: a probe file that proves to a server that both see the same directory."""

    def __init__(self, directory: Path, probe: str, token: str) -> None:
        self.directory = directory
        self.probe = probe
        self._token = token
        self._pid = os.getpid()
        self._closed = False
        atexit.register(self.close)

    @classmethod
    def create(cls, directory: Path = DEFAULT_DIR) -> ShmOffer | None:
        """Writes a probe file; None (debug log) if ``directory`` is missing or not writable."""
        directory = Path(directory).absolute()
        if not directory.is_dir() or not os.access(directory, os.W_OK | os.X_OK):
            log.debug("no shared-memory transport: %s is not a writable directory", directory)
            return None
        token = secrets.token_hex(8)
        try:
            probe = f"{PROBE_PREFIX}{owner_token(directory)}-{token}"  # swept with its owner if this process is killed
        except FailedPrecondition as e:
            log.debug("no shared-memory transport: %s", e)
            return None
        try:
            fd = os.open(directory / probe, os.O_CREAT | os.O_EXCL | os.O_WRONLY, 0o600)
            try:
                os.write(fd, token.encode())
            finally:
                os.close(fd)
        except OSError as e:
            log.debug("no shared-memory transport: cannot write a probe in %s: %s", directory, e)
            return None
        return cls(directory, probe, token)

    def metadata(self) -> tuple[tuple[str, str], ...]:
        """The gRPC metadata that carries the offer."""
        return ((METADATA_KEY, f"{self.directory}|{self.probe}|{self._token}"),)

    def close(self) -> None:
        """Removes the probe file now (only in the process that wrote it); idempotent."""
        if self._closed or os.getpid() != self._pid:
            return
        self._closed = True
        _unlink(self.directory / self.probe)


_offers: dict[tuple[Path, int], ShmOffer | None] = {}
_offers_lock = threading.Lock()


def shared_offer(directory: Path = DEFAULT_DIR) -> ShmOffer | None:
    """The process-wide :class:`ShmOffer` for ``directory`` (one probe file per process and directory)."""
    key = (Path(directory), os.getpid())  # a forked child writes its own probe
    with _offers_lock:
        if key not in _offers:
            _offers[key] = ShmOffer.create(key[0])
        return _offers[key]


class OfferVerifier:
    """Server side: accepts a client's offer only for an allowed directory whose probe it can read."""

    _MAX_REMEMBERED = 4096

    def __init__(self, allowed_dirs: Sequence[Path]) -> None:
        self.allowed_dirs = frozenset(Path(d).resolve() for d in allowed_dirs)
        self._lock = threading.Lock()
        self._verified: dict[str, Path] = {}  # offer value -> resolved directory
        self._logged: set[str] = set()

    def accept(self, metadata: Iterable[object] | None) -> Path | None:
        """The directory to put segments in for this call, or None to send bytes inline. Never raises.

        Args:
            metadata: (key, value) pairs as from ``ServicerContext.invocation_metadata()``
                (objects with ``.key``/``.value``, or 2-tuples).
        """
        if not self.allowed_dirs or not metadata:
            return None
        try:
            value = None
            for item in metadata:
                key, val = (item.key, item.value) if hasattr(item, "key") else item
                if key == METADATA_KEY:
                    value = val.decode() if isinstance(val, bytes) else str(val)
                    break
            if value is None:
                return None
            with self._lock:
                hit = self._verified.get(value)
            if hit is not None:
                return hit
            directory, reason = self._check(value)
        except Exception as e:  # noqa: BLE001 - bad metadata must never fail a call
            directory, value, reason = None, repr(metadata)[:200], f"unreadable offer ({e})"
        with self._lock:
            if directory is not None:
                if len(self._verified) >= self._MAX_REMEMBERED:
                    self._verified.clear()
                self._verified[value] = directory
            elif value not in self._logged and len(self._logged) < self._MAX_REMEMBERED:
                self._logged.add(value)
                log.info("client's shared-memory offer declined, sending bytes inline: %s", reason)
        return directory

    def _check(self, value: str) -> tuple[Path | None, str]:
        parts = value.rsplit("|", 2)
        if len(parts) != 3:
            return None, f"malformed offer {value[:200]!r}"
        dir_s, probe, token = parts
        if not os.path.isabs(dir_s):
            return None, f"offered directory {dir_s!r} is not absolute"
        directory = Path(dir_s).resolve()
        if directory not in self.allowed_dirs:
            return None, f"directory {directory} is not one of {sorted(map(str, self.allowed_dirs))}"
        if not _PROBE_RE.match(probe):
            return None, f"malformed probe name {probe[:100]!r}"
        try:
            fd = os.open(directory / probe, os.O_RDONLY | os.O_NOFOLLOW | os.O_NONBLOCK)
        except OSError as e:
            return None, f"probe {directory / probe} not readable here ({e.strerror}): another host or mount?"
        try:
            st = os.fstat(fd)
            if not stat.S_ISREG(st.st_mode) or st.st_uid != os.geteuid():
                return None, f"probe {directory / probe} is not a regular file of this server's user"
            content = os.read(fd, 64)
        finally:
            os.close(fd)
        if not hmac.compare_digest(content, token.encode()):
            return None, f"probe {directory / probe} does not hold the offered token"
        return directory, ""
