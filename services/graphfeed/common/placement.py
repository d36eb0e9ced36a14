"""Where a minibatch's features are assembled: the loader core asks a :class:`Placement` for an
array and gets a :class:`Placed` back; it knows where the bytes go, not how they travel.

:class:`HostPlacement` is ordinary (pooled) memory. The shared-memory placement
(:class:`graphfeed.common.shm.placement.ShmPlacement`, made by the loader's servicer for a
trainer that shares a directory with it) puts each minibatch in a segment the trainer maps;
graph-stores on the same host then write their rows straight into it (``Placed.region``).
"""

from __future__ import annotations

from abc import ABC, abstractmethod
from collections.abc import Sequence
from dataclasses import dataclass

import numpy as np

from graphfeed.common.buffers import BufferPool


@dataclass(frozen=True)
class SharedRegion:
    """Where an array lies in a shared-memory file: its ``segment`` name and byte ``offset``."""

    segment: str
    offset: int


@dataclass(frozen=True)
class Placed:
    """An array to assemble features in.

    ``region``: where the array lies in shared memory (graph-stores on the same host may write
    rows into it themselves); None for private memory. ``declined``: the placement asked for
    could not take this minibatch (its consumer holds its share of shared memory unclaimed, or
    the directory is nearly full), so the array is private and the whole minibatch travels by
    value.
    """

    array: np.ndarray
    region: SharedRegion | None = None
    declined: bool = False

    def close(self) -> None:
        """Releases the placement's handle (the array stays valid while referenced)."""


class Placement(ABC):
    """Gives each minibatch of a stream the array its features are assembled in."""

    @abstractmethod
    def place(self, shape: Sequence[int], dtype: np.dtype) -> Placed:
        """An array of ``shape`` and ``dtype`` (contents undefined)."""

    def abandon(self) -> None:  # noqa: B027 - nothing to drop by default
        """The consumer went away mid-stream: drops what was placed for it and not taken."""


class HostPlacement(Placement):
    """Private memory: arrays from ``pool`` (pages already mapped, back in the pool once the
    minibatch is sent and dropped), or new arrays without one."""

    def __init__(self, pool: BufferPool | None = None) -> None:
        self.pool = pool

    def place(self, shape: Sequence[int], dtype: np.dtype) -> Placed:
        dtype = np.dtype(dtype)
        if self.pool is None:
            return Placed(np.empty(tuple(shape), dtype=dtype))
        nbytes = dtype.itemsize * int(np.prod(tuple(shape), dtype=np.int64))
        return Placed(self.pool.take(nbytes).view(dtype).reshape(tuple(shape)))
