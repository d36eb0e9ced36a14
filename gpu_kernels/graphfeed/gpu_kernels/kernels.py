"""The GPU kernels behind Python functions with the signatures of :mod:`.reference`.

The host logic around the launches (validation, launch geometry, vector width, read order,
offsets, the sort of the large-fanout sampling path) is written once against a
:class:`~graphfeed.gpu_kernels.backend.Backend`: the CUDA backend runs it on the GPU with CuPy
arrays (the ``.cu`` sources next to this file, compiled on first use); the emulator
(``graphfeed.gpu_kernels.emulator``) runs the very same kernels on the CPU (NumPy arrays, a
thread per GPU thread), so everything but CuPy itself is tested on machines without a GPU.
Importing this module does not import CuPy.
"""

from __future__ import annotations

import math
from typing import Any

import numpy as np

from graphfeed.gpu_kernels.backend import UNITS, Backend, cuda_backend
from graphfeed.gpu_kernels.reference import SMALL_FANOUT, check_temporal_args

# By default a gather reads its rows in ascending id order (gather.cu says why) when it takes at
# least SORTED_READS_MIN rows from at least SORTED_READS_MIN_BYTES of host memory. Measured on
# an H100 (bench/gpu.py): from a 10M-row (5 GB) pinned table sorted reads ran 1.5x faster for
# 100k random rows and 2.7x for 1M; from a 1M-row (512 MB) table, within the translation's
# reach, 100k sorted rows ran 0.86x as fast (the sort costs more than it saves).
SORTED_READS_MIN = 1 << 15
SORTED_READS_MIN_BYTES = 1 << 30


def _unit(row_bytes: int, pointers: list[int]) -> int:
    """Widest load that divides the row pitch and every base pointer."""
    return next(u for u in UNITS if row_bytes % u == 0 and all(p % u == 0 for p in pointers))


def _row_bytes(arr: Any) -> int:
    return int(arr.dtype.itemsize) * int(np.prod(arr.shape[1:], dtype=np.int64))


def _require_rows(arr: Any, what: str) -> None:
    if arr.ndim < 1 or not arr.flags.c_contiguous:
        raise ValueError(f"{what} must be a C-contiguous array of rows, got shape {arr.shape}")


def _check_ids(be: Backend, ids: Any, num_rows: int | None, what: str = "ids") -> Any:
    """``ids`` as a device int64 vector, checked against ``[0, num_rows)`` unless None."""
    ids = be.xp.asarray(ids)
    if ids.ndim != 1 or ids.dtype.kind not in "iu":
        raise ValueError(f"{what} must be a 1-D integer array, got shape {ids.shape} dtype {ids.dtype}")
    ids = ids.astype(be.xp.int64, copy=False)
    if ids.size and num_rows is not None:
        lo, hi = (int(v) for v in be.to_host(be.xp.stack([ids.min(), ids.max()])))  # one device sync
        _check_range(what, lo, hi, num_rows)
    return ids


def _check_range(what: str, lo: int, hi: int, num_rows: int) -> None:
    """Refuses ids whose smallest is ``lo`` and largest ``hi`` unless all lie in ``[0, num_rows)``."""
    if lo < 0 or hi >= num_rows:
        raise ValueError(f"{what} must be in [0, {num_rows}), got [{lo}, {hi}]")


def _read_order(be: Backend, ids: Any, sources: list[Any], sorted_reads: bool | None) -> Any:
    """The order in which warps take ``ids`` (``argsort(ids)``), or a null pointer for "as
    given": sorted when asked, or by default for large batches from large host tables."""
    if sorted_reads is None:
        sorted_reads = int(ids.size) >= SORTED_READS_MIN and any(
            int(a.nbytes) >= SORTED_READS_MIN_BYTES and be.is_host_memory(a) for a in sources
        )
    return be.xp.argsort(ids).astype(be.xp.int64, copy=False) if sorted_reads else np.uint64(0)


def gather_rows(
    table: Any,
    ids: Any,
    *,
    out: Any = None,
    check_ids: bool = True,
    sorted_reads: bool | None = None,
    backend: Backend | None = None,
) -> Any:
    """``table[ids]`` by a warp per row; ``table`` may be pinned mapped host memory (zero-copy).

    Args:
        table: [R, *row_shape] C-contiguous device array, or the ``.device`` view of a
            :class:`~graphfeed.gpu_kernels.memory.MappedHostArray`.
        ids: int [N] row numbers in ``[0, R)`` (host arrays are copied to the device).
        out: optional [N, *row_shape] device destination of ``table``'s dtype.
        check_ids: verify ``0 <= ids < R`` (two reductions and a device sync); pass False only
            for ids valid by construction (an out-of-range id reads out of bounds).
        sorted_reads: read the rows in ascending id order (the results are the same bytes);
            default: for :data:`SORTED_READS_MIN` rows or more from a host-memory table of
            :data:`SORTED_READS_MIN_BYTES` or more.
        backend: where to run; default :func:`cuda_backend`.

    Returns:
        ``out`` (or a new device array), bit-identical to ``reference.gather_rows``.

    Raises:
        ValueError: ids out of range, or bad shapes/dtypes.
    """
    be = backend or cuda_backend()
    _require_rows(table, "table")
    ids = _check_ids(be, ids, table.shape[0] if check_ids else None)
    shape = (int(ids.size), *table.shape[1:])
    if out is None:
        out = be.xp.empty(shape, dtype=table.dtype)
    elif tuple(out.shape) != shape or out.dtype != table.dtype or not out.flags.c_contiguous:
        raise ValueError(f"out must be a C-contiguous {shape} {table.dtype} array, got {out.shape} {out.dtype}")
    row_bytes = _row_bytes(table)
    if ids.size == 0 or row_bytes == 0:
        return out
    u = _unit(row_bytes, [be.ptr(table), be.ptr(out)])
    order = _read_order(be, ids, [table], sorted_reads)
    args = (table, ids, order, np.int64(ids.size), np.int64(row_bytes // u), out)
    be.launch(f"gather_rows_u{u}", be.grid(int(ids.size)), args)
    return out


def cache_gather(
    ids: Any,
    gpu_slot_of: Any,
    gpu_rows: Any,
    host_rows: Any = None,
    host_slot_of: Any = None,
    *,
    check_ids: bool = True,
    sorted_reads: bool | None = None,
    backend: Backend | None = None,
) -> tuple[Any, Any]:
    """Rows of ``ids`` from the GPU cache, else zero-copy from host memory, else zeros (a miss).

    Same arguments and results as ``reference.cache_gather`` (``where``: 0 GPU hit, 1 host
    hit, -1 miss), as device arrays. ``gpu_slot_of``/``gpu_rows`` live on the device;
    ``host_rows``/``host_slot_of`` are device-readable (mapped pinned memory or device memory).
    ``check_ids=False`` skips the range check and ``sorted_reads`` orders the reads, as in
    :func:`gather_rows` (``host_rows`` decides the default). Sorting costs about as much as
    it saves when most ids hit the GPU (H100, 100k ids at 90 % hits, 10M-row host table: 178
    GB/s sorted, 286 as given): pass False where hit rates are that high.
    """
    be = backend or cuda_backend()
    xp = be.xp
    _require_rows(gpu_rows, "gpu_rows")
    ids = _check_ids(be, ids, int(gpu_slot_of.shape[0]) if check_ids else None)
    for what, arr in (("gpu_slot_of", gpu_slot_of), ("host_slot_of", host_slot_of)):
        if arr is not None and (arr.dtype != np.int32 or arr.shape != gpu_slot_of.shape):
            raise ValueError(f"{what} must be int32 of shape {gpu_slot_of.shape}, got {arr.dtype} {arr.shape}")
    if host_rows is not None:
        _require_rows(host_rows, "host_rows")
        if host_rows.shape[1:] != gpu_rows.shape[1:] or host_rows.dtype != gpu_rows.dtype:
            want = f"{gpu_rows.shape[1:]} {gpu_rows.dtype}"
            raise ValueError(f"host_rows must be rows of {want}, got {host_rows.shape} {host_rows.dtype}")
    host = host_rows if host_rows is not None and host_rows.size else None
    n = int(ids.size)
    out = xp.empty((n, *gpu_rows.shape[1:]), dtype=gpu_rows.dtype)
    where = xp.empty(n, dtype=xp.int8)
    if n == 0:
        return out, where
    row_bytes = _row_bytes(gpu_rows)
    pointers = [be.ptr(out)] + [be.ptr(a) for a in (gpu_rows, host) if a is not None]
    u = _unit(row_bytes, pointers)
    null = np.uint64(0)
    args = (
        ids,
        _read_order(be, ids, [] if host is None else [host], sorted_reads),
        np.int64(n),
        np.int64(row_bytes // u),
        gpu_slot_of,
        gpu_rows if gpu_rows.size else null,
        null if host_slot_of is None else host_slot_of,
        null if host is None else host,
        out,
        where,
    )
    be.launch(f"cache_gather_u{u}", be.grid(n), args)
    return out, where


def sample_csr(
    indptr: Any,
    indices: Any,
    edge_ids: Any,
    rows: Any,
    fanout: int,
    replace: bool,
    seed: int,
    *,
    backend: Backend | None = None,
) -> tuple[Any, Any, Any]:
    """Uniform neighbor sampling, a warp per seed; bit-identical to ``reference.sample_csr``
    (see there for arguments and results, returned here as device arrays)."""
    be = backend or cuda_backend()
    xp = be.xp
    if fanout < -1:
        raise ValueError(f"fanout must be -1 or >= 0, got {fanout}")
    indptr = xp.asarray(indptr, dtype=xp.int64)
    indices = xp.asarray(indices, dtype=xp.int64)
    edge_ids = xp.asarray(edge_ids, dtype=xp.int64)
    rows = _check_ids(be, rows, None, "rows")  # the range is checked at the one device sync below
    n, k, num_rows = int(rows.size), int(fanout), int(indptr.shape[0]) - 1
    if n == 0:
        return xp.zeros(1, dtype=xp.int64), xp.empty(0, dtype=xp.int64), xp.empty(0, dtype=xp.int64)
    deg, counts = xp.empty(n, dtype=xp.int64), xp.empty(n, dtype=xp.int64)
    count_args = (indptr, rows, np.int64(n), np.int64(num_rows), np.int64(k), np.int32(bool(replace)), deg, counts)
    be.launch("sample_count", be.grid(math.ceil(n / 32)), count_args)
    offsets = xp.zeros(n + 1, dtype=xp.int64)
    xp.cumsum(counts, out=offsets[1:])
    stats = xp.stack([offsets[-1], deg.max(), rows.min(), rows.max()])
    total, max_deg, lo, hi = (int(v) for v in be.to_host(stats))  # the one device sync
    _check_range("rows", lo, hi, num_rows)
    if max_deg >= 2**31:
        raise ValueError("degrees must be < 2**31")
    src, eids = xp.empty(total, dtype=xp.int64), xp.empty(total, dtype=xp.int64)
    if total == 0:
        return offsets, src, eids
    small = k <= SMALL_FANOUT
    tmp = src[:0] if small else xp.empty(total, dtype=xp.int32)
    args = (
        indptr,
        indices,
        edge_ids,
        rows,
        np.int64(n),
        offsets,
        np.int64(k),
        np.int32(bool(replace)),
        np.uint64(int(seed) % 2**64),
        np.int32(small),
        src,
        eids,
        tmp if tmp.size else np.uint64(0),
    )
    be.launch("sample_uniform", be.grid(n), args)
    if small:
        return offsets, src, eids
    # Large fanouts: sort (segment, local position) keys, then gather (kernels leave them unsorted).
    seg = xp.searchsorted(offsets[1:], xp.arange(total, dtype=xp.int64), side="right").astype(xp.int64)
    keys = xp.sort((seg << 32) | tmp.astype(xp.int64))
    pos = indptr[rows][keys >> 32] + (keys & 0xFFFFFFFF)
    return offsets, indices[pos], edge_ids[pos]


def _temporal_inputs(be: Backend, csr: tuple[Any, ...], rows: Any, times: Any) -> list[Any]:
    """``indptr, nbr, ts, eid, rows, times`` as device int64 vectors, checked as
    ``reference.sample_temporal`` checks them (one device sync)."""
    named = zip(("indptr", "nbr", "ts", "eid", "rows", "times"), (*csr, rows, times))
    arrays = [_check_ids(be, a, None, what) for what, a in named]
    indptr, _, _, _, rows, times = arrays
    sizes = [int(a.size) for a in arrays]
    if sizes[0] == 0:
        raise ValueError("indptr must have at least one entry")
    if len(set(sizes[1:4])) != 1 or sizes[5] != sizes[4]:
        raise ValueError(f"nbr, ts, eid must have one length and times one entry per row, got sizes {sizes[1:]}")
    stats = be.xp.stack([rows.min(), rows.max(), indptr[-1]]) if sizes[4] else indptr[-1:]
    values = [int(v) for v in be.to_host(stats)]
    if values[-1] > sizes[1]:
        raise ValueError(f"nbr, ts and eid must have one length >= indptr[-1] = {values[-1]}, got {sizes[1]}")
    if sizes[4]:
        _check_range("rows", values[0], values[1], sizes[0] - 1)
    return arrays


def sample_temporal(
    indptr: Any,
    nbr: Any,
    ts: Any,
    eid: Any,
    rows: Any,
    times: Any,
    fanout: int,
    strategy: str,
    seed: int,
    first_position: int = 0,
    *,
    backend: Backend | None = None,
) -> tuple[Any, Any, Any, Any]:
    """Temporal neighbor sampling (edges strictly before each root's time, ``"recent"`` or
    ``"uniform"``): a thread per root finds ``n_i``, then a warp per root samples. Bit-identical
    to ``reference.sample_temporal`` (see there for arguments and results, returned here as
    device arrays)."""
    be = backend or cuda_backend()
    xp = be.xp
    k = check_temporal_args(fanout, strategy, seed, first_position)
    indptr, nbr, ts, eid, rows, times = _temporal_inputs(be, (indptr, nbr, ts, eid), rows, times)
    n = int(rows.size)
    if n == 0:
        return xp.zeros(1, dtype=xp.int64), *(xp.empty(0, dtype=xp.int64) for _ in range(3))
    before = xp.empty(n, dtype=xp.int64)
    be.launch("temporal_count", be.grid(math.ceil(n / 32)), (indptr, ts, rows, times, np.int64(n), before))
    offsets = xp.zeros(n + 1, dtype=xp.int64)
    offsets[1:] = xp.cumsum(before if k == -1 else xp.minimum(before, k))
    total, most = (int(v) for v in be.to_host(xp.stack([offsets[-1], before.max()])))  # one device sync
    uniform = strategy == "uniform"
    if uniform and most >= 2**31:
        raise ValueError("uniform sampling needs fewer than 2**31 edges before a root's time")
    out = [xp.empty(total, dtype=xp.int64) for _ in range(3)]
    if total == 0:
        return offsets, *out
    small = not uniform or k <= SMALL_FANOUT  # "recent" copies a range: never the host-sorted path
    tmp = out[0][:0] if small else xp.empty(total, dtype=xp.int32)
    args = (
        indptr,
        nbr,
        ts,
        eid,
        rows,
        before,
        np.int64(n),
        offsets,
        np.int64(k),
        np.int32(not uniform),
        np.uint64(int(seed)),
        np.int64(first_position),
        np.int32(small),
        *out,
        tmp if tmp.size else np.uint64(0),
    )
    be.launch("temporal_sample", be.grid(n), args)
    if small:
        return offsets, *out
    # Uniform with k > 64: sort (root, local position) keys, then gather, as sample_csr does.
    seg = xp.searchsorted(offsets[1:], xp.arange(total, dtype=xp.int64), side="right").astype(xp.int64)
    keys = xp.sort((seg << 32) | tmp.astype(xp.int64))
    pos = indptr[rows][keys >> 32] + (keys & 0xFFFFFFFF)
    return offsets, nbr[pos], ts[pos], eid[pos]
