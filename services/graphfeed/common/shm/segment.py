"""Writer side: one segment file (:class:`Segment`) and the layout of a message's arrays in it
(:class:`Arena`)."""

from __future__ import annotations

import contextlib
import errno
import mmap
import os
from collections.abc import Sequence
from pathlib import Path
from typing import TYPE_CHECKING

import numpy as np
from numpy.typing import DTypeLike

from graphfeed.common.errors import FailedPrecondition, InvalidArgument, ResourceExhausted
from graphfeed.common.shm.files import aligned, layout, view
from graphfeed.common.shm.owner_locks import new_segment_name

if TYPE_CHECKING:  # both use Segment at run time
    from graphfeed.common.shm.pool import SegmentPool
    from graphfeed.common.shm.registry import SegmentRegistry


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
        cls,
        directory: Path,
        nbytes: int,
        registry: SegmentRegistry | None = None,
        owner: object = None,
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
        name = name or new_segment_name(Path(directory))
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

    @property
    def mapping(self) -> mmap.mmap | None:
        """The writer's read-write mapping; None for an empty segment or once closed."""
        return self._mm

    def array(self, offset: int, shape: tuple[int, ...], dtype: DTypeLike) -> np.ndarray:
        """A writable view of ``shape``/``dtype`` at byte ``offset``; ValueError if it does not fit."""
        if self._closed:
            raise ValueError(f"segment {self.name} is closed")
        return view(self._mm, self.nbytes, offset, shape, dtype)

    def close(self) -> None:
        """Drops the writer's mapping (the data stays in the file; a pool's lease leaves the
        mapping to the pool); idempotent."""
        self._closed = True
        mm, self._mm = self._mm, None
        if mm is not None and not self.recycle:
            with contextlib.suppress(BufferError):  # arrays still exported: unmapped when the last dies
                mm.close()


class Arena:
    """Lays out several arrays in one segment: :meth:`put` returns the offset at once, :meth:`finish` copies.

    With a ``pool`` the segment is a recycled file (``recycle`` is True, and the references to
    it must say so: :func:`graphfeed.common.codec.encode` does). With a ``client`` the segment
    counts toward what that client holds unclaimed in ``registry``."""

    def __init__(
        self,
        directory: Path,
        registry: SegmentRegistry | None = None,
        owner: object = None,
        pool: SegmentPool | None = None,
        client: str = "",
    ) -> None:
        self.directory = Path(directory)
        self.name = new_segment_name(self.directory)
        self.recycle = pool is not None
        self._registry = registry
        self._owner = owner
        self.pool = pool
        self.client = client
        self._items: list[tuple[int, np.ndarray | None]] = []
        self._end = 0
        self._finished = False

    def _place(self, nbytes: int) -> int:
        if self._finished:
            raise ValueError(f"arena {self.name} is already finished")
        offset = aligned(self._end)
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

    def reserve(self, shape: Sequence[int], dtype: DTypeLike) -> int:
        """Places space for an array the caller fills via ``segment.array`` after :meth:`finish`."""
        _, _, nbytes = layout(shape, dtype)
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
        if self.pool is not None:
            seg = self.pool.acquire(self._end, self.name)
        else:
            seg = Segment.create(self.directory, self._end, name=self.name)
        if self._registry is not None:
            self._registry.add(seg.path, self._owner, seg.recycle, self.client, self._end)
        for offset, arr in items:
            if arr is not None and arr.nbytes:
                seg.array(offset, arr.shape, arr.dtype)[...] = arr
        return seg
