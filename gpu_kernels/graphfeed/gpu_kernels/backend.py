"""Where the kernels run: :class:`Backend` (an array module and a launcher) and
:class:`CudaBackend`, which compiles each ``.cu`` file with ``cupy.RawModule`` (NVRTC; CuPy also
caches the binaries on disk) the first time one of its kernels is launched. The emulator
(``graphfeed.gpu_kernels.emulator``) is the other backend. Importing this module does not
import CuPy.
"""

from __future__ import annotations

import functools
import math
import re
import threading
from abc import ABC, abstractmethod
from pathlib import Path
from types import ModuleType
from typing import Any

import numpy as np

from graphfeed.gpu_kernels._cuda import cupy_module

KERNEL_DIR = Path(__file__).resolve().parent
# kernel name prefix -> source file
SOURCES = {
    "gather_rows": "gather.cu",
    "cache_gather": "cache_lookup.cu",
    "sample_": "sample.cu",
    "temporal": "temporal.cu",
}
_INCLUDE = re.compile(r'^#include "([\w.]+)"$', re.MULTILINE)
UNITS = (16, 8, 4, 2, 1)  # bytes per load, widest first


class Backend(ABC):
    """Where kernels run: an array module and a launcher."""

    name: str
    xp: ModuleType  # cupy or numpy
    block: int  # threads per block (a multiple of 32)
    max_blocks: int  # grid cap: enough warps to fill the device, grid-stride beyond

    @abstractmethod
    def launch(self, kernel: str, grid: int, args: tuple[Any, ...]) -> None:
        """Runs ``kernel`` on ``grid`` blocks of :attr:`block` threads; arrays are passed as
        pointers, NumPy scalars by value with their width (int64 = ``long long`` ...)."""

    @abstractmethod
    def ptr(self, arr: Any) -> int:
        """Address of ``arr``'s first element."""

    @abstractmethod
    def is_host_memory(self, arr: Any) -> bool:
        """Whether the device reads ``arr`` over the bus (pinned, mapped host memory)."""

    @abstractmethod
    def to_host(self, arr: Any) -> np.ndarray:
        """A NumPy copy (or view, where already on the host) of ``arr``."""

    @abstractmethod
    def mapped_empty(self, shape: tuple[int, ...], dtype: np.dtype) -> tuple[np.ndarray, Any]:
        """``(host view, device view)`` of one new allocation that the device reads in place."""

    def grid(self, items: int) -> int:
        """Blocks for one warp per item, capped at :attr:`max_blocks` (kernels grid-stride)."""
        return max(1, min(math.ceil(items / (self.block // 32)), self.max_blocks))


def _kernel_names(source: str) -> list[str]:
    """The ``extern "C"`` kernels a .cu file defines (the unit-width variants included)."""
    if source == "sample.cu":
        return ["sample_count", "sample_uniform"]
    if source == "temporal.cu":
        return ["temporal_count", "temporal_sample"]
    prefix = "gather_rows" if source == "gather.cu" else "cache_gather"
    return [f"{prefix}_u{u}" for u in UNITS]


def _module_source(path: Path) -> str:
    """The source with its local headers (``#include "common.cuh"``, ...) inlined, recursively,
    so that CuPy's compile cache (keyed by the source text) sees changes to any header (include
    guards drop the repeats)."""
    return _INCLUDE.sub(lambda m: _module_source(KERNEL_DIR / m.group(1)), path.read_text())


_CUDA_MEMORY_TYPE_HOST = 1  # cudaMemoryTypeHost (driver_types.h): pinned host memory


class CudaBackend(Backend):
    """Kernels on the current CUDA device through CuPy; each .cu file is compiled on first use."""

    name = "cuda"
    block = 256

    def __init__(self) -> None:
        cp = cupy_module()
        self.xp = cp
        sms = cp.cuda.Device().attributes["MultiProcessorCount"]
        self.max_blocks = int(sms) * (2048 // self.block)  # every thread slot of every SM
        self._functions: dict[str, Any] = {}
        self._lock = threading.Lock()  # loader threads may launch the first kernel concurrently

    def _function(self, kernel: str) -> Any:
        with self._lock:
            if kernel not in self._functions:
                source = next(f for prefix, f in SOURCES.items() if kernel.startswith(prefix))
                module = self.xp.RawModule(code=_module_source(KERNEL_DIR / source), options=("-std=c++17",))
                for name in _kernel_names(source):
                    self._functions[name] = module.get_function(name)
            return self._functions[kernel]

    def launch(self, kernel: str, grid: int, args: tuple[Any, ...]) -> None:
        self._function(kernel)((grid,), (self.block,), args)

    def ptr(self, arr: Any) -> int:
        return int(arr.data.ptr)

    def is_host_memory(self, arr: Any) -> bool:
        return int(self.xp.cuda.runtime.pointerGetAttributes(self.ptr(arr)).type) == _CUDA_MEMORY_TYPE_HOST

    def to_host(self, arr: Any) -> np.ndarray:
        return self.xp.asnumpy(arr)

    def mapped_empty(self, shape: tuple[int, ...], dtype: np.dtype) -> tuple[np.ndarray, Any]:
        from graphfeed.gpu_kernels.memory import MappedHostArray  # noqa: PLC0415

        m = MappedHostArray(shape, dtype)
        return m.host, m.device


@functools.lru_cache(maxsize=1)
def cuda_backend() -> CudaBackend:
    """The process's CUDA backend (raises RuntimeError without a GPU)."""
    return CudaBackend()
