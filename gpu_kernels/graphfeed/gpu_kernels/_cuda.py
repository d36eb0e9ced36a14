"""Lazy CUDA detection. Importing this module imports nothing GPU-related; CuPy is imported
on the first call that needs it, and :func:`gpu_available` never raises."""

from __future__ import annotations

import functools
import logging
import os
from types import ModuleType

log = logging.getLogger(__name__)

# Set to "0" to keep graphfeed off the GPU even where one is present (read at call time).
DISABLE_ENV = "GRAPHFEED_GPU"


@functools.lru_cache(maxsize=1)
def _probe() -> str:
    """ "" when CuPy can run a kernel on device 0, else why not (cached for the process)."""
    try:
        import cupy  # noqa: PLC0415 - lazy by design: no CuPy import on machines without CUDA

        if cupy.cuda.runtime.getDeviceCount() < 1:
            return "no CUDA device"
        cupy.arange(2).sum().item()  # a context, a kernel and a copy: the driver really works
        return ""
    except Exception as exc:  # noqa: BLE001 - ImportError, CUDARuntimeError, driver mismatch, ...
        return f"{type(exc).__name__}: {exc}"


def gpu_available() -> bool:
    """True when CuPy is installed and a CUDA device runs kernels; never raises."""
    if os.environ.get(DISABLE_ENV, "1") == "0":
        return False
    try:
        return _probe() == ""
    except Exception:  # noqa: BLE001 - the contract is "never raises"
        return False


def unavailable_reason() -> str:
    """Why :func:`gpu_available` is False ("" when it is True)."""
    if os.environ.get(DISABLE_ENV, "1") == "0":
        return f"disabled by {DISABLE_ENV}=0"
    return _probe()


def cupy_module() -> ModuleType:
    """The ``cupy`` module.

    Raises:
        RuntimeError: no usable GPU (the message says why).
    """
    if not gpu_available():
        raise RuntimeError(f"graphfeed.gpu_kernels needs a CUDA GPU and CuPy: {unavailable_reason()}")
    import cupy  # noqa: PLC0415

    return cupy


# Share of the device's free memory an automatically sized GPU cache tier takes: the rest stays
# for the model, activations and the minibatches in flight.
AUTO_CACHE_FRACTION = 0.25


def auto_cache_bytes(fraction: float = AUTO_CACHE_FRACTION) -> int:
    """A GPU cache tier budget: ``fraction`` of the current device's free memory, or 0 without
    a usable GPU; never raises."""
    if not gpu_available():
        return 0
    try:
        free, _total = cupy_module().cuda.runtime.memGetInfo()
    except Exception:  # noqa: BLE001 - same contract as gpu_available
        return 0
    return int(free * fraction)
