"""The kernels of this package run on the CPU, for tests on machines without a GPU.

``emu/harness.cpp`` includes the unmodified ``.cu`` files after ``emu/cuda_shim.h``, which
turns every GPU thread of a block into a ``std::thread`` and implements the warp collectives
with a barrier per warp. :class:`EmulatorBackend` compiles it with the host C++ compiler (once
per source version, into the temp dir) and plugs into :mod:`.kernels` in place of CUDA, with
NumPy arrays as "device" memory. So the kernels' indexing, warp logic, vector widths and the
host code around them are checked against :mod:`.reference` bit for bit; what it cannot check
is CuPy/NVRTC/driver behaviour, memory ordering and speed (see tests/gpu).
"""

from __future__ import annotations

import ctypes
import functools
import hashlib
import os
import shutil
import subprocess
import tempfile
from pathlib import Path
from typing import Any

import numpy as np

from graphfeed.gpu_kernels.backend import KERNEL_DIR, Backend

_SCALARS = {
    np.dtype(np.int64): ctypes.c_longlong,
    np.dtype(np.int32): ctypes.c_int,
    np.dtype(np.uint64): ctypes.c_ulonglong,
}


def compiler() -> str | None:
    """The C++ compiler the emulator is built with (``$CXX``, else g++/clang++), or None."""
    for name in (os.environ.get("CXX"), "g++", "clang++"):
        if name and shutil.which(name):
            return name
    return None


@functools.lru_cache(maxsize=1)
def _library() -> ctypes.CDLL:
    cxx = compiler()
    if cxx is None:
        raise RuntimeError("the kernel emulator needs a C++20 compiler (g++ or clang++)")
    sources = [p for p in sorted(KERNEL_DIR.glob("*.cu*")) + sorted((KERNEL_DIR / "emu").iterdir()) if p.is_file()]
    digest = hashlib.sha256(b"".join(p.name.encode() + p.read_bytes() for p in sources)).hexdigest()[:16]
    lib = Path(tempfile.gettempdir()) / f"graphfeed-kernel-emu-{digest}.so"
    if not lib.exists():
        tmp = lib.with_suffix(f".{os.getpid()}.tmp")
        cmd = [
            cxx,
            "-std=c++20",
            "-O1",
            "-shared",
            "-fPIC",
            "-pthread",
            f"-I{KERNEL_DIR}",
            f"-I{KERNEL_DIR / 'emu'}",
            str(KERNEL_DIR / "emu" / "harness.cpp"),
            "-o",
            str(tmp),
        ]
        res = subprocess.run(cmd, capture_output=True, text=True)
        if res.returncode:
            raise RuntimeError(f"building the kernel emulator failed:\n{res.stderr}")
        os.replace(tmp, lib)  # atomic: concurrent test processes never load a half-written file
    return ctypes.CDLL(str(lib))


class EmulatorBackend(Backend):
    """Runs the CUDA kernels on the CPU, NumPy arrays standing in for device memory.

    Args:
        block: threads per block (a multiple of 32; each is an OS thread while its block runs).
        max_blocks: grid cap; small values exercise the kernels' grid-stride loops.
    """

    name = "emulator"
    xp = np

    def __init__(self, block: int = 64, max_blocks: int = 4) -> None:
        if block % 32:
            raise ValueError(f"block must be a multiple of 32, got {block}")
        self.block = block
        self.max_blocks = max_blocks
        self._lib = _library()

    def launch(self, kernel: str, grid: int, args: tuple[Any, ...]) -> None:
        values: list[Any] = []
        for a in args:
            if isinstance(a, np.ndarray):
                values.append(ctypes.c_void_p(a.ctypes.data))
            elif isinstance(a, np.generic) and a.dtype in _SCALARS:
                values.append(_SCALARS[a.dtype](a.item()))
            else:
                raise TypeError(f"kernel argument of unsupported type {type(a).__name__}")
        argv = (ctypes.c_void_p * len(values))(*[ctypes.addressof(v) for v in values])
        getattr(self._lib, f"emu_{kernel}")(ctypes.c_int(grid), ctypes.c_int(self.block), argv)

    def ptr(self, arr: Any) -> int:
        return int(arr.ctypes.data)

    def is_host_memory(self, arr: Any) -> bool:
        return True  # NumPy arrays: the default paths are those of pinned host memory on a GPU

    def to_host(self, arr: Any) -> np.ndarray:
        return np.asarray(arr)

    def mapped_empty(self, shape: tuple[int, ...], dtype: np.dtype) -> tuple[np.ndarray, Any]:
        arr = np.empty(shape, dtype=dtype)
        return arr, arr
