"""A TGN job on a GPU (GNNFlow's other half): node memory and edge features in device memory.

With ``--device cuda`` the weights, the optimizer and the node memory (:class:`~.memory.
NodeMemory`) live on the GPU. The edge features of the stream go to an :class:`EdgeFeatureCache`
instead of the neighbour source: the whole stream's features sit in pinned, mapped host memory,
and the device keeps the features of the most recent ``capacity`` events, the ones a "recent"
temporal sample reads most. A sample's edges are looked up by event number with the loader's
``cache_gather`` kernel: a device hit is read from device memory, anything older zero-copy from
the pinned host table (PyTorch-Direct), so no edge feature is gathered on the CPU or copied up
by the host. The rows reach PyTorch through DLPack.

The cache runs on any :class:`~graphfeed.gpu_kernels.backend.Backend`: tests on machines without
a GPU pass the kernel emulator and check that training with the cache gives the same weights,
bit for bit, as training without it (the features are the same bytes).

On CUDA, :func:`resolve_device` turns on PyTorch's deterministic algorithms (and the cuBLAS
workspace setting they need) so that a replayed step is byte-identical there too: the memory
read's backward is a scatter-add, which on a GPU otherwise sums in whatever order atomics land.
"""

from __future__ import annotations

import os
from typing import Any

import numpy as np
import torch

from graphfeed.common.errors import InvalidArgument
from graphfeed.gpu_kernels import kernels
from graphfeed.gpu_kernels.backend import Backend
from graphfeed.gpu_kernels.memory import to_torch
from graphfeed.trainer.temporal.config import DEVICES


def resolve_device(name: str) -> torch.device:
    """``cpu``, ``cuda`` (an error without a usable GPU) or ``auto`` (cuda where there is one)."""
    if name not in DEVICES:
        raise InvalidArgument(f"device {name!r}: choose from {DEVICES}")
    if name == "auto":
        name = "cuda" if torch.cuda.is_available() else "cpu"
    if name == "cuda":
        if not torch.cuda.is_available():
            raise InvalidArgument("device cuda: PyTorch sees no CUDA GPU here (use --device cpu or auto)")
        os.environ.setdefault("CUBLAS_WORKSPACE_CONFIG", ":4096:8")  # read when cuBLAS starts
        torch.use_deterministic_algorithms(True)
    return torch.device(name)


class EdgeFeatureCache:
    """Edge features by event number: a ring of the latest events on the device, the rest zero-copy.

    Args:
        efeat: float32 [E, D], the features of the stream's events in stream order.
        capacity_rows: events whose features the device keeps (0: every read is zero-copy).
        backend: where the kernels run (the CUDA device, or the emulator in tests).

    :meth:`advance` moves the window to the events before a stop; :meth:`gather` reads rows.
    ``gpu_hits`` / ``host_hits`` count the rows each tier served.
    """

    def __init__(self, efeat: np.ndarray, capacity_rows: int, backend: Backend) -> None:
        if efeat.ndim != 2 or capacity_rows < 0:
            raise InvalidArgument(
                f"edge features must be [E, D] and the capacity >= 0, got {efeat.shape}, {capacity_rows}"
            )
        self.backend = backend
        xp = backend.xp
        host, self.host_rows = backend.mapped_empty(efeat.shape, np.dtype(np.float32))
        host[...] = efeat  # the device view keeps the pinned allocation alive
        self.num_events, dim = efeat.shape
        self.capacity = min(capacity_rows, self.num_events)
        self.gpu_rows = xp.zeros((max(self.capacity, 1), dim), dtype=np.float32)
        self.slot_of = xp.full(self.num_events, -1, dtype=np.int32)
        self.lo = self.hi = 0  # events [lo, hi) are on the device
        self._gpu_hits = xp.zeros((), dtype=np.int64)  # counted on the device: no sync per gather
        self._rows = 0

    @property
    def gpu_hits(self) -> int:
        """Rows served from device memory so far (reading it waits for the device)."""
        return int(self._gpu_hits)

    @property
    def host_hits(self) -> int:
        """Rows read zero-copy from the host table so far."""
        return self._rows - self.gpu_hits

    @property
    def nbytes(self) -> int:
        """Device bytes: the ring and the slot table."""
        return int(self.gpu_rows.nbytes + self.slot_of.nbytes)

    def advance(self, stop: int) -> None:
        """The device holds events ``[max(0, stop - capacity), stop)`` (a smaller ``stop`` than the
        last one starts over: a new epoch)."""
        if not 0 <= stop <= self.num_events:
            raise InvalidArgument(f"advance: stop {stop} outside [0, {self.num_events}]")
        if stop < self.hi:
            self.slot_of[self.lo : self.hi] = -1
            self.lo = self.hi = 0
        lo = max(0, stop - self.capacity)
        self.slot_of[self.lo : max(self.lo, min(lo, self.hi))] = -1  # fell out of the window
        first = max(self.hi, lo)
        if stop > first and self.capacity:
            xp = self.backend.xp
            slots = (xp.arange(first, stop, dtype=np.int64) % self.capacity).astype(np.int32)
            self.gpu_rows[slots] = self.host_rows[first:stop]  # a device copy from the mapped table
            self.slot_of[first:stop] = slots
        self.lo, self.hi = max(self.lo, lo), stop

    def gather(self, events: np.ndarray) -> torch.Tensor:
        """Rows of ``events`` (int64 event numbers < E) as a tensor on the device."""
        xp = self.backend.xp
        ids = xp.asarray(np.ascontiguousarray(events, dtype=np.int64))
        out, where = kernels.cache_gather(ids, self.slot_of, self.gpu_rows, self.host_rows, backend=self.backend)
        self._gpu_hits += (where == 0).sum()
        self._rows += int(ids.size)
        return _tensor(out)


def _tensor(arr: Any) -> torch.Tensor:
    """A device array as a tensor without a copy (NumPy: the emulator's "device")."""
    return torch.from_numpy(arr) if isinstance(arr, np.ndarray) else to_torch(arr)
