"""Pinned, mapped host memory (zero-copy) and the DLPack hand-off to PyTorch.

:class:`MappedHostArray` allocates with ``cudaHostAlloc(cudaHostAllocMapped |
cudaHostAllocPortable)``: page-locked host memory mapped into every device's address space.
Under unified virtual addressing (every 64-bit CUDA platform) the device address equals the
host address, so one allocation has two views: ``.host`` (NumPy, for the CPU to write rows)
and ``.device`` (a CuPy array whose loads go over PCIe/NVLink). Kernels read ``.device``
directly: no staging buffer, no ``cudaMemcpy``. Only this module and :mod:`.kernels` touch
CuPy, and only when called.
"""

from __future__ import annotations

import ctypes
import weakref
from collections.abc import Sequence
from typing import Any

import numpy as np

from graphfeed.gpu_kernels._cuda import cupy_module

# cudaHostAlloc flags (driver_types.h); CuPy does not export all of them under stable names.
_HOST_ALLOC_PORTABLE = 0x01
_HOST_ALLOC_MAPPED = 0x02


class MappedHostArray:
    """A C-contiguous array in pinned host memory that kernels read in place.

    Args:
        shape: array shape.
        dtype: element type.

    Attributes:
        host: NumPy view (CPU reads/writes).
        device: CuPy view of the same bytes (GPU reads/writes over the bus).
    """

    def __init__(self, shape: Sequence[int], dtype: np.dtype | type) -> None:
        cp = cupy_module()
        self.shape = tuple(int(d) for d in shape)
        self.dtype = np.dtype(dtype)
        self.nbytes = int(np.prod(self.shape, dtype=np.int64)) * self.dtype.itemsize
        rt = cp.cuda.runtime
        ptr = rt.hostAlloc(max(self.nbytes, 1), _HOST_ALLOC_PORTABLE | _HOST_ALLOC_MAPPED)
        self._free = weakref.finalize(self, rt.freeHost, ptr)
        self._free.atexit = False  # at exit the OS reclaims it; the CUDA context may be gone already
        buf = (ctypes.c_byte * max(self.nbytes, 1)).from_address(ptr)
        # .host keeps buf alive (through the memoryview), buf keeps this owner (and the allocation) alive.
        # ctypes instances take attributes (they have a __dict__); typeshed does not declare that.
        buf.owner = self  # type: ignore[attr-defined]
        self.host = np.frombuffer(memoryview(buf), dtype=self.dtype, count=self.nbytes // self.dtype.itemsize).reshape(
            self.shape
        )
        dev_ptr = rt.pointerGetAttributes(ptr).devicePointer  # == ptr under UVA; asked, not assumed
        mem = cp.cuda.UnownedMemory(dev_ptr, max(self.nbytes, 1), self, rt.getDevice())
        self.device = cp.ndarray(self.shape, self.dtype, cp.cuda.MemoryPointer(mem, 0))

    @classmethod
    def from_array(cls, arr: np.ndarray) -> MappedHostArray:
        """A pinned copy of ``arr`` (copied by the CPU, once)."""
        arr = np.ascontiguousarray(arr)
        out = cls(arr.shape, arr.dtype)
        out.host[...] = arr
        return out

    def close(self) -> None:
        """Frees the pinned memory now; both views must not be used afterwards."""
        self._free()


def to_torch(arr: Any) -> Any:
    """A ``torch.Tensor`` on the same GPU sharing ``arr``'s memory (DLPack, no copy).

    Works for any object with ``__dlpack__`` (CuPy arrays). Imports torch on call only.
    """
    import torch  # noqa: PLC0415 - optional: only an embedded trainer needs it

    return torch.from_dlpack(arr)
