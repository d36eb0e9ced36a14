"""NumPy references of the GPU kernels: same signatures, same semantics, same bytes.

Each function here is the CPU twin of the function of the same name in
:mod:`graphfeed.gpu_kernels.kernels`. Gathers are exact by construction. Sampling uses the
kernels' counter-based draws (:func:`rand_u64`, :func:`bounded`) and the same algorithm per
path (take all / Floyd for ``fanout <= 64`` / parallel reservoir above / independent draws with
replacement), so kernel and reference agree bit for bit, and the tests also check that the
output is uniform. The semantics are those of ``graphfeed.graph_store.sampling.sample_csr``:
offsets from ``min(deg, k)`` (``k`` or 0 with replacement, ``deg`` for ``-1``), ascending CSR
positions within a seed, repeated rows sampled independently. The graph-store's compiled CPU
sampler draws the same stream, so CPU, GPU and this reference agree bit for bit.
:func:`sample_temporal` (issue 16) samples among the edges of a time-sorted row strictly before
each root's time: the most recent ones, or uniformly with ``sample_csr``'s draws for a row of
degree ``n_i`` (the number of edges before the time).

Imports nothing but NumPy, so it runs on any machine, including the GPU image.
"""

from __future__ import annotations

import numpy as np
from numpy.typing import ArrayLike

# Above this fanout Floyd's O(k^2) per seed loses to the reservoir (same constant as sample.cu).
SMALL_FANOUT = 64
_M32 = np.uint64(0xFFFFFFFF)
_GOLDEN = np.uint64(0x9E3779B97F4A7C15)
_WEYL2 = np.uint64(0xD1B54A32D192ED03)


def _mix64(z: np.ndarray) -> np.ndarray:
    """splitmix64's finalizer on uint64 arrays (wrapping arithmetic, as in common.cuh)."""
    z = (z ^ (z >> np.uint64(30))) * np.uint64(0xBF58476D1CE4E5B9)
    z = (z ^ (z >> np.uint64(27))) * np.uint64(0x94D049BB133111EB)
    return z ^ (z >> np.uint64(31))


def rand_u64(seed: int, i: np.ndarray, j: ArrayLike) -> np.ndarray:
    """The 64-bit draw for (seed, batch position i, counter j); broadcasts ``i`` against ``j``."""
    with np.errstate(over="ignore"):
        i1 = np.asarray(i, dtype=np.int64).astype(np.uint64) + np.uint64(1)
        j1 = np.asarray(j, dtype=np.int64).astype(np.uint64) + np.uint64(1)
        a = _mix64(np.uint64(seed) + i1 * _GOLDEN)
        return _mix64(a + j1 * _WEYL2)


def bounded(r: np.ndarray, m: np.ndarray) -> np.ndarray:
    """``floor(r * m / 2**64)`` exactly (CUDA's ``__umul64hi``), for ``0 <= m < 2**32``."""
    r = np.asarray(r, dtype=np.uint64)
    m = np.asarray(m, dtype=np.int64).astype(np.uint64)
    with np.errstate(over="ignore"):
        hi = (r >> np.uint64(32)) * m + (((r & _M32) * m) >> np.uint64(32))
    return (hi >> np.uint64(32)).astype(np.int64)


def _check_ids(ids: np.ndarray, num_rows: int, what: str = "ids") -> np.ndarray:
    ids = np.asarray(ids)
    if ids.ndim != 1 or ids.dtype.kind not in "iu":
        raise ValueError(f"{what} must be a 1-D integer array, got shape {ids.shape} dtype {ids.dtype}")
    ids = ids.astype(np.int64, copy=False)
    if ids.size and (ids.min() < 0 or ids.max() >= num_rows):
        raise ValueError(f"{what} must be in [0, {num_rows}), got [{ids.min()}, {ids.max()}]")
    return ids


def gather_rows(table: np.ndarray, ids: np.ndarray, *, out: np.ndarray | None = None) -> np.ndarray:
    """``table[ids]``: rows of ``table`` (any dtype, any row shape) in ``ids`` order.

    Args:
        table: [R, *row_shape], C-contiguous.
        ids: int [N] row numbers in ``[0, R)``.
        out: optional [N, *row_shape] destination of ``table``'s dtype.

    Returns:
        ``out`` (or a new array) holding the rows.

    Raises:
        ValueError: ids out of range or ``out`` of the wrong shape/dtype.
    """
    ids = _check_ids(ids, table.shape[0])
    shape = (len(ids), *table.shape[1:])
    if out is None:
        return table[ids]
    if out.shape != shape or out.dtype != table.dtype:
        raise ValueError(f"out must be {shape} {table.dtype}, got {out.shape} {out.dtype}")
    np.take(table, ids, axis=0, out=out)
    return out


def cache_gather(
    ids: np.ndarray,
    gpu_slot_of: np.ndarray,
    gpu_rows: np.ndarray,
    host_rows: np.ndarray | None = None,
    host_slot_of: np.ndarray | None = None,
) -> tuple[np.ndarray, np.ndarray]:
    """Rows of ``ids`` from the GPU cache, else from host memory, else zeros (a miss).

    Args:
        ids: int [N] node ids in ``[0, len(gpu_slot_of))``.
        gpu_slot_of: int32 [num_nodes] slot of each node in ``gpu_rows``, -1 if not cached.
        gpu_rows: [C, *row_shape] the GPU cache slab.
        host_rows: [H, *row_shape] rows in host memory, or None (no host tier).
        host_slot_of: int32 [num_nodes] slot of each node in ``host_rows`` (-1: not there), or
            None when ``host_rows`` is a full table indexed by node id.

    Returns:
        ``(out, where)``: [N, *row_shape] rows and int8 [N] provenance: 0 GPU hit, 1 host hit,
        -1 miss (its row is zero).
    """
    ids = _check_ids(ids, len(gpu_slot_of))
    out = np.zeros((len(ids), *gpu_rows.shape[1:]), dtype=gpu_rows.dtype)
    where = np.full(len(ids), -1, dtype=np.int8)
    slot = np.asarray(gpu_slot_of)[ids].astype(np.int64)
    hit = slot >= 0
    out[hit] = gpu_rows[slot[hit]]
    where[hit] = 0
    if host_rows is not None:
        hslot = ids if host_slot_of is None else np.asarray(host_slot_of)[ids].astype(np.int64)
        host_hit = ~hit & (hslot >= 0)
        out[host_hit] = host_rows[hslot[host_hit]]
        where[host_hit] = 1
    return out, where


def _segment_arange(counts: np.ndarray) -> np.ndarray:
    """``concat([arange(c) for c in counts])`` without a Python loop."""
    starts = np.cumsum(counts) - counts
    return np.arange(int(counts.sum()), dtype=np.int64) - np.repeat(starts, counts)


def _floyd(i: np.ndarray, deg: np.ndarray, k: int, seed: int) -> np.ndarray:
    """Floyd's k-subsets of ``range(deg)`` for batch positions ``i``, draw s = rand(seed, i, s)."""
    chosen = np.empty((len(i), k), dtype=np.int64)
    for s in range(k):
        j = deg - k + s
        t = bounded(rand_u64(seed, i, np.int64(s)), j + 1)
        taken = (chosen[:, :s] == t[:, None]).any(axis=1)
        chosen[:, s] = np.where(taken, j, t)
    return chosen


def _reservoir(i: np.ndarray, deg: np.ndarray, k: int, seed: int) -> np.ndarray:
    """Algorithm R with the kernel's draws: slot r keeps the largest idx in [k, deg) whose draw
    ``bounded(rand(seed, i, idx), idx + 1)`` is r, else r."""
    chosen = np.tile(np.arange(k, dtype=np.int64), (len(i), 1))
    extra = deg - k
    which = np.repeat(np.arange(len(i), dtype=np.int64), extra)
    idx = k + _segment_arange(extra)
    r = bounded(rand_u64(seed, i[which], idx), idx + 1)
    keep = r < k
    np.maximum.at(chosen.reshape(-1), which[keep] * k + r[keep], idx[keep])
    return chosen


def _without_replacement(deg: np.ndarray, k: int, seed: int, position: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """Counts ``min(deg, k)`` and the concatenated, ascending local positions of a uniform
    ``min(deg, k)``-subset of ``range(deg)`` per item (``k >= 0``), drawn at batch ``position``."""
    counts = np.minimum(deg, k)
    local = _segment_arange(counts)
    big = np.flatnonzero(deg > k)
    if len(big):
        pick = _floyd if k <= SMALL_FANOUT else _reservoir
        chosen = np.sort(pick(position[big], deg[big], k, seed), axis=1)
        starts = np.cumsum(counts) - counts
        local[(starts[big][:, None] + np.arange(k, dtype=np.int64)).reshape(-1)] = chosen.reshape(-1)
    return counts, local


def sample_csr(
    indptr: np.ndarray,
    indices: np.ndarray,
    edge_ids: np.ndarray,
    rows: np.ndarray,
    fanout: int,
    replace: bool,
    seed: int,
) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """Samples up to ``fanout`` neighbors of each row of a CSR, uniformly.

    Args:
        indptr: int64 [R+1] CSR row pointers (every degree < 2**31).
        indices: [E] neighbor of each CSR position (returned as ``src``).
        edge_ids: [E] id of each CSR position (returned as ``eids``).
        rows: int64 [N] rows to sample (repeats allowed; each is sampled independently).
        fanout: ``-1`` all neighbors, ``0`` none, else up to ``fanout`` (without replacement
            ``min(deg, fanout)``; with replacement exactly ``fanout`` if ``deg > 0``, else 0).
        replace: sample with replacement.
        seed: uint64; the only source of randomness.

    Returns:
        ``(offsets, src, eids)``: int64 [N+1] offsets and the sampled ``indices`` /
        ``edge_ids``, ascending CSR position within each row.

    Raises:
        ValueError: ``fanout < -1``, rows out of range, or a degree >= 2**31.
    """
    if fanout < -1:
        raise ValueError(f"fanout must be -1 or >= 0, got {fanout}")
    indptr = np.asarray(indptr, dtype=np.int64)
    rows = _check_ids(rows, len(indptr) - 1, "rows")
    begin = indptr[rows]
    deg = indptr[rows + 1] - begin
    if deg.size and deg.max() >= 2**31:
        raise ValueError("degrees must be < 2**31")
    k = int(fanout)
    if k == -1:
        counts, local = deg, _segment_arange(deg)
    elif k == 0:
        counts, local = np.zeros(len(rows), dtype=np.int64), np.empty(0, dtype=np.int64)
    elif replace:
        counts = np.where(deg > 0, k, 0).astype(np.int64)
        has = np.flatnonzero(deg > 0)
        draws = bounded(rand_u64(seed, has[:, None], np.arange(k, dtype=np.int64)[None, :]), deg[has][:, None])
        draws.sort(axis=1)
        local = draws.reshape(-1)
    else:
        counts, local = _without_replacement(deg, k, seed, np.arange(len(rows), dtype=np.int64))
    offsets = np.zeros(len(rows) + 1, dtype=np.int64)
    np.cumsum(counts, out=offsets[1:])
    pos = np.repeat(begin, counts) + local
    return offsets, np.asarray(indices)[pos].astype(np.int64), np.asarray(edge_ids)[pos].astype(np.int64)


# -- temporal sampling -------------------------------------------------------------------------

STRATEGIES = ("recent", "uniform")


def check_temporal_args(fanout: int, strategy: str, seed: int, first_position: int) -> int:
    """Validates the scalar arguments of ``sample_temporal`` (shared with the kernel's wrapper);
    returns ``fanout`` as an int."""
    if int(fanout) < -1:
        raise ValueError(f"fanout must be -1 or >= 0, got {fanout}")
    if strategy not in STRATEGIES:
        raise ValueError(f"strategy must be one of {STRATEGIES}, got {strategy!r}")
    if not 0 <= int(seed) < 1 << 64:
        raise ValueError(f"seed must be in [0, 2**64), got {seed}")
    if not 0 <= int(first_position) < 1 << 63:
        raise ValueError(f"first_position must be in [0, 2**63), got {first_position}")
    return int(fanout)


def _int_vector(a: ArrayLike, what: str) -> np.ndarray:
    arr = np.asarray(a)
    if arr.ndim != 1 or arr.dtype.kind not in "iu":
        raise ValueError(f"{what} must be a 1-D integer array, got shape {arr.shape} dtype {arr.dtype}")
    return arr.astype(np.int64, copy=False)


def _check_temporal_csr(indptr: ArrayLike, nbr: ArrayLike, ts: ArrayLike, eid: ArrayLike) -> list[np.ndarray]:
    """``indptr, nbr, ts, eid`` as int64 vectors: ``indptr`` non-empty, the three per-position
    arrays of one length, at least ``indptr[-1]``."""
    arrays = [_int_vector(a, what) for a, what in ((indptr, "indptr"), (nbr, "nbr"), (ts, "ts"), (eid, "eid"))]
    if len(arrays[0]) == 0:
        raise ValueError("indptr must have at least one entry")
    lengths = {len(a) for a in arrays[1:]}
    if len(lengths) != 1 or lengths.pop() < arrays[0][-1]:
        raise ValueError(
            f"nbr, ts and eid must have one length >= indptr[-1] = {arrays[0][-1]}, got {[len(a) for a in arrays[1:]]}"
        )
    return arrays


def count_before(begin: np.ndarray, end: np.ndarray, ts: np.ndarray, times: np.ndarray) -> np.ndarray:
    """``n_i`` = how many of ``ts[begin[i]:end[i]]`` (ascending) are ``< times[i]``: one binary
    search per root, all roots a step at a time (the kernel runs the same search per thread)."""
    lo, hi = begin.copy(), end.copy()
    active = np.flatnonzero(lo < hi)
    while active.size:
        left, right = lo[active], hi[active]
        mid = (left + right) >> 1
        before = ts[mid] < times[active]
        lo[active] = np.where(before, mid + 1, left)
        hi[active] = np.where(before, right, mid)
        active = active[lo[active] < hi[active]]
    return lo - begin


def sample_temporal(
    indptr: ArrayLike,
    nbr: ArrayLike,
    ts: ArrayLike,
    eid: ArrayLike,
    rows: ArrayLike,
    times: ArrayLike,
    fanout: int,
    strategy: str,
    seed: int,
    first_position: int = 0,
) -> tuple[np.ndarray, np.ndarray, np.ndarray, np.ndarray]:
    """Samples up to ``fanout`` edges of each root's row that are strictly before its time.

    Args:
        indptr: int [R+1] row pointers of a time-sorted CSR (ascending ``ts`` within a row:
            a precondition, not checked).
        nbr, ts, eid: int [E] neighbour, timestamp and edge id of each position.
        rows: int [N] root rows in ``[0, R)``; repeats are sampled independently.
        times: int [N] root times; root ``i`` sees the ``n_i`` edges of its row with
            ``ts < times[i]`` (an event never sees itself or later events).
        fanout: ``-1`` all ``n_i``, else ``c_i = min(n_i, fanout)``.
        strategy: ``"recent"`` (the last ``c_i`` of the ``n_i``) or ``"uniform"`` (a uniform
            ``c_i``-subset of them, exactly ``sample_csr``'s draws for a row of degree ``n_i``).
        seed: uint64, the only source of randomness (``"uniform"`` only).
        first_position: batch position of ``rows[0]``: sampling ``rows[j:]`` with
            ``first_position=j`` gives the tail of sampling ``rows``.

    Returns:
        ``(offsets, nbr, ts, eid)``: int64 [N+1] offsets and the sampled edges' ``nbr``,
        ``ts`` and ``eid`` (int64), in ascending row position (= time) per root.

    Raises:
        ValueError: bad shapes/dtypes, rows out of range, ``fanout < -1``, an unknown strategy,
            ``seed``/``first_position`` out of range, or (uniform) an ``n_i >= 2**31``.
    """
    k = check_temporal_args(fanout, strategy, seed, first_position)
    indptr_, nbr_, ts_, eid_ = _check_temporal_csr(indptr, nbr, ts, eid)
    rows_ = _check_ids(np.asarray(rows), len(indptr_) - 1, "rows")
    times_ = _int_vector(times, "times")
    if times_.shape != rows_.shape:
        raise ValueError(f"times must have one entry per row ({len(rows_)}), got {len(times_)}")
    begin = indptr_[rows_]
    before = count_before(begin, indptr_[rows_ + 1], ts_, times_)
    if k == -1:
        counts, local = before, _segment_arange(before)
    elif strategy == "recent":
        counts = np.minimum(before, k)
        local = np.repeat(before - counts, counts) + _segment_arange(counts)
    else:
        if before.size and before.max() >= 2**31:
            raise ValueError("uniform sampling needs fewer than 2**31 edges before a root's time")
        positions = np.arange(len(rows_), dtype=np.int64) + int(first_position)
        counts, local = _without_replacement(before, k, int(seed), positions)
    offsets = np.zeros(len(rows_) + 1, dtype=np.int64)
    np.cumsum(counts, out=offsets[1:])
    pos = np.repeat(begin, counts) + local
    return offsets, nbr_[pos], ts_[pos], eid_[pos]
