"""One-hop neighbor sampling on a CSR: compiled loops (numba, GIL released), counter-based draws.

The draws are those of the GPU kernels (:mod:`graphfeed.gpu_kernels.reference` is the NumPy
specification of both): the ``j``-th 64-bit draw of the seed at batch position ``i`` is
``rand_u64(seed, i, j)``, a splitmix64 hash, so the sample is a pure function of
``(seed, rows, fanout, replace)`` — the same bytes on any thread, any process, CPU or GPU —
and rows can be sampled in any order or in parallel.

Per row of degree ``deg`` and fanout ``k``:

- ``k == -1`` or ``deg <= k`` (without replacement): every neighbor;
- ``k <= 64``: Floyd's algorithm (draw ``s`` picks ``t`` in ``[0, deg-k+s]``; take it unless
  taken, else take ``deg-k+s``): every ``k``-subset equally likely, ``O(k^2)``;
- ``k > 64``: reservoir (Algorithm R) over positions ``k..deg-1``, ``O(deg)``;
- with replacement: ``k`` independent uniform positions (rows of degree 0 get none).

Excluded edges (DGL's ``exclude_eids``, e.g. a link-prediction minibatch's seed edges) are
removed before selection: a row holding one is sampled over its other edges, gathered into a
scratch list, with the same draws, so it still gets ``min(fanout, remaining degree)``. Rows
without exclusions, and calls without any, run the loop unchanged
(:mod:`graphfeed.graph_store.exclusion`).

Output is "CSR order per seed": row ``i``'s edges are ``[offsets[i], offsets[i+1])`` in
ascending CSR position. The compiled functions release the GIL, so a graph-store's handler
threads sample concurrently.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence

import numba
import numpy as np

from graphfeed.common.cacheline import prefetch
from graphfeed.common.seeds import derive_seed
from graphfeed.graph_store.exclusion import LocalExclusion, holds_excluded, kept, kernel_exclusion

Alloc = Callable[[np.ndarray], tuple[np.ndarray, np.ndarray]]

# Above this fanout Floyd's O(k^2) per row loses to the reservoir (same constant as sample.cu).
SMALL_FANOUT = 64
_AHEAD = 8  # rows prefetched ahead (their indptr entry twice as far): 35 % faster than none
_PREFETCH_MAX_DEG = 128  # longer neighbor lists are sampled sparsely: not worth whole-list hints
_jit = numba.njit(cache=True, nogil=True, boundscheck=False)
_OUT_DTYPES = {np.dtype(np.int64), np.dtype(np.int32)}  # what the sample may be written into

_GOLDEN = np.uint64(0x9E3779B97F4A7C15)
_WEYL2 = np.uint64(0xD1B54A32D192ED03)
_MIX1 = np.uint64(0xBF58476D1CE4E5B9)
_MIX2 = np.uint64(0x94D049BB133111EB)
_M32 = np.uint64(0xFFFFFFFF)


@_jit
def _mix64(z):  # noqa: ANN001, ANN202
    z = (z ^ (z >> np.uint64(30))) * _MIX1
    z = (z ^ (z >> np.uint64(27))) * _MIX2
    return z ^ (z >> np.uint64(31))


@_jit
def _row_key(seed, i):  # noqa: ANN001, ANN202
    """The per-row half of ``rand_u64(seed, i, j)``."""
    return _mix64(seed + (np.uint64(i) + np.uint64(1)) * _GOLDEN)


@_jit
def _draw(key, j, m):  # noqa: ANN001, ANN202
    """``bounded(rand_u64(seed, i, j), m)``: uniform in ``[0, m)`` for ``m < 2**32``."""
    r = _mix64(key + (np.uint64(j) + np.uint64(1)) * _WEYL2)
    mm = np.uint64(m)
    hi = (r >> np.uint64(32)) * mm + (((r & _M32) * mm) >> np.uint64(32))
    return np.int64(hi >> np.uint64(32))


@_jit
def _counts(indptr, indices, edge_ids, rows, fanout, replace, excluded, lo, hi):  # noqa: ANN001, ANN202
    """Draws per row; rows outside ``[lo, hi)`` have no edges here and are not read (a typed
    graph's edge type has edges into one node type's rows only)."""
    n = len(rows)
    offsets = np.zeros(n + 1, dtype=np.int64)
    for i in range(n):
        if i + _AHEAD < n and lo <= rows[i + _AHEAD] < hi:
            prefetch(indptr, rows[i + _AHEAD])
        if not lo <= rows[i] < hi:
            offsets[i + 1] = offsets[i]
            continue
        deg = indptr[rows[i] + 1] - indptr[rows[i]]
        if excluded is not None:  # compiled out when None, as in _sample
            xrows, xeids, x_ind, x_eid, xfilter, efilter = excluded
            if holds_excluded(xfilter, xrows, rows[i]):  # its candidates: the edges not excluded (counted)
                begin, end = indptr[rows[i]], indptr[rows[i] + 1]
                deg = kept(indices, edge_ids, begin, end, xeids, efilter, False, x_ind, x_eid)
        if fanout == -1:
            c = deg
        elif replace:
            c = fanout if deg > 0 else 0
        else:
            c = min(deg, fanout)
        offsets[i + 1] = offsets[i] + c
    return offsets


@_jit
def _insertion_sort(a, lo, hi):  # noqa: ANN001, ANN202
    for x in range(lo + 1, hi):
        v = a[x]
        y = x - 1
        while y >= lo and a[y] > v:
            a[y + 1] = a[y]
            y -= 1
        a[y + 1] = v


@_jit
def _sample(indptr, indices, edge_ids, rows, fanout, replace, seed, base, offsets, starts, src, eids, excluded):  # noqa: ANN001, ANN202
    """Row ``i``'s ``offsets[i+1] - offsets[i]`` draws go to ``src``/``eids`` from ``starts[i]``
    (``offsets[:-1]`` for one edge type; a typed sample's row slots for several)."""
    useed = np.uint64(seed)
    pos = np.empty(max(fanout, 1), dtype=np.int64)
    n = len(rows)
    for i in range(n):
        # Rows with no draws (per the counts) are neither prefetched nor read.
        if i + 2 * _AHEAD < n and offsets[i + 2 * _AHEAD + 1] > offsets[i + 2 * _AHEAD]:
            prefetch(indptr, rows[i + 2 * _AHEAD])
        if i + _AHEAD < n and offsets[i + _AHEAD + 1] > offsets[i + _AHEAD]:  # the neighbor list of a row ahead
            b = indptr[rows[i + _AHEAD]]
            e = indptr[rows[i + _AHEAD] + 1]
            if e - b <= _PREFETCH_MAX_DEG:
                for q in range(b, e, 64 // indices.itemsize):
                    prefetch(indices, q)
                for q in range(b, e, 64 // edge_ids.itemsize):
                    prefetch(edge_ids, q)
                if e > b:
                    prefetch(indices, e - 1)
                    prefetch(edge_ids, e - 1)
        c = offsets[i + 1] - offsets[i]
        if c == 0:
            continue
        begin = indptr[rows[i]]
        deg = indptr[rows[i] + 1] - begin
        out = starts[i]
        key = _row_key(useed, base + i)
        ind, eid = indices, edge_ids
        # None: numba compiles this branch out, so a call without exclusions is today's loop.
        if excluded is not None:
            xrows, xeids, x_ind, x_eid, xfilter, efilter = excluded
            if holds_excluded(xfilter, xrows, rows[i]):
                # Sampled as if the excluded edges were not in the CSR: the same draws over the
                # gathered list of the others (DGL's exclude_eids: excluded before selection).
                deg = kept(indices, edge_ids, begin, begin + deg, xeids, efilter, True, x_ind, x_eid)
                ind, eid, begin = x_ind, x_eid, 0
        if fanout == -1 or (not replace and deg <= fanout):
            for s in range(c):
                src[out + s] = ind[begin + s]
                eids[out + s] = eid[begin + s]
            continue
        if replace:
            for s in range(fanout):
                pos[s] = _draw(key, s, deg)
        elif fanout <= SMALL_FANOUT:
            for s in range(fanout):
                j = deg - fanout + s
                t = _draw(key, s, j + 1)
                for q in range(s):
                    if pos[q] == t:
                        t = j
                        break
                pos[s] = t
        else:
            for s in range(fanout):
                pos[s] = s
            for idx in range(fanout, deg):
                r = _draw(key, idx, idx + 1)
                if r < fanout:
                    pos[r] = idx
        if fanout <= SMALL_FANOUT:
            _insertion_sort(pos, 0, fanout)
        else:
            pos[:fanout].sort()
        for s in range(fanout):
            src[out + s] = ind[begin + pos[s]]
            eids[out + s] = eid[begin + pos[s]]


def sample_csr(
    indptr: np.ndarray,
    indices: np.ndarray,
    edge_ids: np.ndarray,
    rows: np.ndarray,
    fanout: int,
    replace: bool,
    seed: int,
    alloc: Alloc | None = None,
    first_position: int = 0,
    exclude: LocalExclusion | None = None,
) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """Samples up to ``fanout`` neighbors of each row of a CSR, optionally excluding some edges.

    Args:
        indptr: int64 [R+1] CSR row pointers (every degree < 2**31).
        indices: int32/int64 [E] neighbor of each CSR position (returned as ``src``, int64).
        edge_ids: int32/int64 [E] id of each CSR position (returned as ``eids``, int64).
        rows: int64 [N] rows to sample, each in ``[0, R)`` (repeats are sampled independently:
            the draws depend on the batch position).
        fanout: ``-1`` takes every neighbor; ``0`` takes none; otherwise up to ``fanout``
            (without replacement: ``min(deg, fanout)``; with replacement: exactly ``fanout``
            for rows of degree > 0 and 0 otherwise).
        replace: sample with replacement.
        seed: uint64, the only source of randomness.
        alloc: ``alloc(offsets) -> (src, eids)``, called once the offsets are known, returns
            the int64 arrays (int32 where the caller knows the ids fit) of ``offsets[-1]``
            elements to sample into (e.g. views of a
            response's shared-memory segment, so the sample is written once); default: new arrays.
        first_position: batch position of ``rows[0]`` (draws depend on the position): sampling
            ``rows[k:]`` with ``first_position=k`` gives the tail of sampling ``rows``.
        exclude: ``(xrows, xeids)``, int64 sorted unique arrays: the rows that hold an excluded
            edge and the excluded edge ids (DGL's ``exclude_eids``). An excluded edge is no
            candidate (it is left out before selection, as DGL does), so a row still gets up to
            ``fanout`` of its other edges: the sample is byte-identical to that of the CSR
            without those edges (the others keeping their ids). Rows not in ``xrows`` are
            sampled as without ``exclude``. CPU only: the GPU kernels take no exclusion.

    Returns:
        ``(offsets, src, eids)``: int64 [N+1] offsets and the sampled ``indices`` /
        ``edge_ids`` (int64) in CSR order per row; without ``exclude``, bit-identical to
        :func:`graphfeed.gpu_kernels.reference.sample_csr`.

    Raises:
        ValueError: ``fanout < -1``, ``seed`` outside ``[0, 2**64)``, ``first_position`` outside
            ``[0, 2**63)``, or ``exclude`` not two 1-D int64 ascending arrays of unique values.
    """
    _check_draw(fanout, seed, first_position)
    indptr, indices, edge_ids = np.asarray(indptr), np.asarray(indices), np.asarray(edge_ids)
    rows = np.ascontiguousarray(rows, dtype=np.int64)
    excluded = kernel_exclusion(indptr, indices, edge_ids, exclude)
    offsets = _counts(indptr, indices, edge_ids, rows, int(fanout), bool(replace), excluded, 0, len(indptr) - 1)
    src, eids = _outputs(offsets, alloc)
    if len(src):
        _sample(
            indptr,
            indices,
            edge_ids,
            rows,
            int(fanout),
            bool(replace),
            _signed(seed),
            int(first_position),
            offsets,
            offsets[:-1],
            src,
            eids,
            excluded,
        )
    return offsets, src, eids


def _check_draw(fanout: int, seed: int, first_position: int) -> None:
    if fanout < -1:
        raise ValueError(f"fanout must be -1 or >= 0, got {fanout}")
    if not 0 <= int(seed) < 1 << 64:
        raise ValueError(f"seed must be in [0, 2**64), got {seed}")
    if not 0 <= int(first_position) < 1 << 63:
        raise ValueError(f"first_position must be in [0, 2**63), got {first_position}")


def _signed(seed: int) -> int:
    """A seed >= 2**63 does not fit numba's int64 argument: its two's-complement twin."""
    return int(seed) - (1 << 64) if int(seed) >= 1 << 63 else int(seed)


def _outputs(offsets: np.ndarray, alloc: Alloc | None) -> tuple[np.ndarray, np.ndarray]:
    """The ``(src, eids)`` arrays a sample of ``offsets`` is written into (``alloc``'s, checked)."""
    total = int(offsets[-1])
    if alloc is None:
        return np.empty(total, dtype=np.int64), np.empty(total, dtype=np.int64)
    src, eids = alloc(offsets)
    if src.shape != (total,) or eids.shape != (total,) or not {src.dtype, eids.dtype} <= _OUT_DTYPES:
        raise ValueError(f"alloc must return two int64 (or int32, for ids that fit) arrays of {total} elements")
    return src, eids


def etype_row_ranges(etype_indptr: np.ndarray) -> np.ndarray:
    """int64 [R, 2]: per edge type, ``[lo, hi)`` holding every row with an edge of that type
    (``[0, 0)`` for none). In a typed graph an edge type's edges end in one node type's rows, a
    range of a partition's rows, so the others need not be read (on the MAG-like preset each
    sampled row is in range for 2-3 of the 8 edge types)."""
    indptr = np.asarray(etype_indptr)
    out = np.zeros((len(indptr), 2), dtype=np.int64)
    for r in range(len(indptr)):
        rows = np.flatnonzero(indptr[r, 1:] != indptr[r, :-1])
        if len(rows):
            out[r] = rows[0], rows[-1] + 1
    return out


def sample_typed(
    etype_indptr: np.ndarray,
    indices: np.ndarray,
    edge_ids: np.ndarray,
    rows: np.ndarray,
    fanouts: Sequence[int],
    replace: bool,
    seed: int,
    alloc: Alloc | None = None,
    first_position: int = 0,
    exclude: LocalExclusion | None = None,
    row_ranges: np.ndarray | None = None,
) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """:func:`sample_csr` with a fanout per edge type: up to ``fanouts[r]`` in-neighbors of each
    row through edge type ``r`` (DGL's ``sample_neighbors`` with a ``{etype: k}`` fanout).

    ``etype_indptr`` is int64 [R, num_rows+1] (one CSR per edge type over the shared
    ``indices``/``edge_ids``). Each row's edges come out edge type by edge type, each type's in
    CSR order. With one edge type this is :func:`sample_csr` itself (the same draws); with
    several, type ``r`` draws from ``derive_seed(seed, "etype", r)``, so a type's sample does
    not depend on the other types' fanouts. ``exclude`` is :func:`sample_csr`'s, applied to every
    edge type (an edge id belongs to one type's CSR only). ``row_ranges`` (:func:`etype_row_ranges`
    of ``etype_indptr``): rows outside type ``r``'s ``[lo, hi)`` are not read for it.
    """
    indptr = np.asarray(etype_indptr)
    if len(indptr) != len(fanouts):
        raise ValueError(f"{len(fanouts)} fanouts for {len(indptr)} edge types")
    if len(indptr) == 1:
        return sample_csr(
            indptr[0], indices, edge_ids, rows, int(fanouts[0]), replace, seed, alloc, first_position, exclude
        )
    _check_draw(min((int(k) for k in fanouts), default=0), seed, first_position)
    indices, edge_ids = np.asarray(indices), np.asarray(edge_ids)
    rows = np.ascontiguousarray(rows, dtype=np.int64)
    # Each edge type's counts first, then every type's draws straight into its slots of each
    # row: no per-type temporaries and no interleaving pass.
    live = []
    for r, k in enumerate(fanouts):
        if int(k) != 0:
            excluded = kernel_exclusion(indptr[r], indices, edge_ids, exclude)
            lo, hi = (0, indptr.shape[1] - 1) if row_ranges is None else (int(x) for x in row_ranges[r])
            type_offsets = _counts(indptr[r], indices, edge_ids, rows, int(k), bool(replace), excluded, lo, hi)
            live.append((r, int(k), excluded, type_offsets, np.diff(type_offsets)))
    offsets = np.zeros(len(rows) + 1, dtype=np.int64)
    for *_, per_row in live:
        offsets[1:] += per_row
    np.cumsum(offsets, out=offsets)
    src, eids = _outputs(offsets, alloc)
    starts = offsets[:-1].copy()  # where the next edge type's edges of each row go
    for r, k, excluded, type_offsets, per_row in live:
        if type_offsets[-1]:
            seed_r = _signed(derive_seed(int(seed), "etype", r))
            _sample(
                indptr[r],
                indices,
                edge_ids,
                rows,
                k,
                bool(replace),
                seed_r,
                int(first_position),
                type_offsets,
                starts,
                src,
                eids,
                excluded,
            )
            starts += per_row
    return offsets, src, eids
