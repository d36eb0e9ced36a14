"""Pooled receive buffers: destination arrays whose pages are already mapped.

A fresh ``np.empty`` of 100 MB costs its page faults on first write (on this machine as much
as the copy itself); a receiver that takes its destinations from a :class:`BufferPool` writes
into memory it has used before. A buffer goes back to the pool when the last array over it is
gone, however that happens (consumed, dropped mid-stream, an exception), so nothing leaks.
"""

from __future__ import annotations

import threading
import weakref

import numpy as np


class _Lease:
    """Exposes ``nbytes`` of a pooled buffer to NumPy; every array made from it (views of views
    included) keeps it alive, and its death hands the buffer back."""

    __slots__ = ("__array_interface__", "__weakref__", "_memory")

    def __init__(self, memory: np.ndarray, nbytes: int) -> None:
        self._memory = memory
        self.__array_interface__ = {
            "shape": (nbytes,),
            "typestr": "|u1",
            "data": (memory.ctypes.data, False),
            "version": 3,
        }


class BufferPool:
    """Reusable byte buffers for arrays of varying size.

    Args:
        max_buffers: buffers kept for reuse once handed back (more may be out at once; those
            beyond are freed when handed back).
        max_bytes: a request larger than this gets a buffer that is never pooled.
    """

    def __init__(self, max_buffers: int = 4, max_bytes: int = 1 << 30) -> None:
        self.max_buffers = max_buffers
        self.max_bytes = max_bytes
        self._free: list[np.ndarray] = []
        self._lock = threading.Lock()
        self.outstanding = 0  # buffers handed out and not yet back
        self.allocated = 0  # buffers ever allocated (a steady stream stops allocating)

    def take(self, nbytes: int) -> np.ndarray:
        """A writable uint8 array of ``nbytes`` (contents undefined), 64-byte aligned."""
        with self._lock:
            fits = [i for i, m in enumerate(self._free) if len(m) >= nbytes]
            memory = self._free.pop(min(fits, key=lambda i: len(self._free[i]))) if fits else None
            self.outstanding += 1
        if memory is None:
            memory = _aligned(nbytes)
            self.allocated += 1
        lease = _Lease(memory, nbytes)
        weakref.finalize(lease, self._give_back, memory)
        return np.asarray(lease)

    def _give_back(self, memory: np.ndarray) -> None:
        with self._lock:
            self.outstanding -= 1
            if len(memory) <= self.max_bytes:
                self._free.append(memory)
                if len(self._free) > self.max_buffers:  # keep the largest: they fit any request
                    self._free.pop(min(range(len(self._free)), key=lambda i: len(self._free[i])))


def _aligned(nbytes: int) -> np.ndarray:
    """``nbytes`` of fresh memory starting at a 64-byte boundary."""
    raw = np.empty(nbytes + 64, dtype=np.uint8)
    skip = -raw.ctypes.data % 64
    return raw[skip : skip + nbytes]
