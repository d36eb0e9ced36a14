"""Temporal neighbour sampling over a time-indexed adjacency: compiled loops (numba, GIL released).

The adjacency is a :class:`~graphfeed.graph_store.temporal.index.Snapshot`: a base time-sorted
CSR plus the append blocks since the last compaction, kept in an append-only arena. Row ``r``'s
logical timeline is its base segment followed by its block *entries* (one per block that touched
``r``), oldest first; entries are chained newest to oldest (``e_prev``), starting at
``head[r]``, and ``e_cum[k]`` counts the row's block edges up to and including entry ``k``. So
logical position ``p`` of row ``r`` lies in the base when ``p < deg_base(r)``, else in the entry
``k`` whose range ``[deg_base + e_cum[k] - len_k, deg_base + e_cum[k])`` holds it.

Per root ``i`` (row ``rows[i]``, time ``times[i]``), two passes:

1. :func:`_locate`: walk the row's chain back from its newest entry while the entry's first
   timestamp is ``>= times[i]`` (recent queries stop at once), then one binary search inside the
   first entry (or the base segment) that starts before ``times[i]``: ``n_i`` = edges strictly
   before ``times[i]``, and ``c_i = min(n_i, fanout)``. With ``max_eid`` (the graph as of an
   append) the same walk on edge ids caps ``n_i``: a row's ids ascend along its timeline (ingest
   ids, below every appended id, then appends in order), so "id < max_eid" is a prefix too.
2. :func:`_fill`: the logical positions, ``[n_i - c_i, n_i)`` for ``recent`` or the draws of
   :func:`graphfeed.graph_store.sampling.sample_csr` for a row of degree ``n_i`` for ``uniform``
   (Floyd for ``fanout <= 64``, reservoir above, ``rand_u64(seed, first_position + i, j)``),
   sorted ascending, then mapped to (segment, offset) walking the chain backwards once.

The positions are drawn into the output ``eid`` slice and overwritten in place by the mapping,
so no per-root buffer exists. Nothing here depends on how many blocks exist: a root pays only
for the entries of its own row that are newer than its time. Compaction never changes a draw
(the logical timeline is the same), which the tests check.
"""

from __future__ import annotations

import dataclasses
from typing import TYPE_CHECKING

import numba
import numpy as np

from graphfeed.common.cacheline import prefetch
from graphfeed.common.errors import ResourceExhausted
from graphfeed.graph_store.sampling import SMALL_FANOUT, _draw, _insertion_sort, _row_key

if TYPE_CHECKING:
    from graphfeed.graph_store.temporal.index import Snapshot

_jit = numba.njit(cache=True, nogil=True, boundscheck=False)
_AHEAD = 8  # roots prefetched ahead (their indptr entry twice as far), as in sampling.py


@_jit
def _bisect_left(a, x, lo, hi):
    """First position in ``a[lo:hi]`` (ascending) whose value is ``>= x``."""
    while lo < hi:
        mid = (lo + hi) >> 1
        if a[mid] < x:
            lo = mid + 1
        else:
            hi = mid
    return lo


@_jit
def _prefetch_root(b_indptr, b_ts, head, rows, i, n):
    """Puts the cache lines root ``i + _AHEAD`` will read (and the indptr entry of ``i + 2 * _AHEAD``) in flight."""
    nb = len(b_indptr) - 1
    if i + 2 * _AHEAD < n and rows[i + 2 * _AHEAD] < nb:
        prefetch(b_indptr, rows[i + 2 * _AHEAD])
    if i + _AHEAD < n:
        r = rows[i + _AHEAD]
        if r < len(head):
            prefetch(head, r)
        if r < nb:
            lo = b_indptr[r]
            hi = b_indptr[r + 1]
            if hi > lo:
                prefetch(b_ts, lo)
                prefetch(b_ts, hi - 1)


@_jit
def _prefetch_rows(b_indptr, b_nbr, b_ts, b_eid, rows, n_arr, k_arr, offsets, j, j2):
    """Puts in flight the base lines root ``j`` will copy (its newest ``c_j`` edges) and the indptr entry of ``j2``."""
    nb = len(b_indptr) - 1
    if j2 < len(rows) and rows[j2] < nb:
        prefetch(b_indptr, rows[j2])
    c = offsets[j + 1] - offsets[j]
    if rows[j] < nb and c > 0 and k_arr[j] < 0:
        hi = b_indptr[rows[j]] + n_arr[j] - 1
        lo = hi - c + 1
        for q in (lo, hi):
            prefetch(b_nbr, q)
            prefetch(b_ts, q)
            prefetch(b_eid, q)


@_jit
def _locate(
    b_indptr,
    b_ts,
    b_eid,
    a_ts,
    a_eid,
    max_eid,
    e_lo,
    e_hi,
    e_prev,
    e_cum,
    e_first,
    head,
    n_entries,
    rows,
    times,
    fanout,
    offsets,
    n_out,
    k_out,
):
    """Pass 1: ``n_i``, the newest entry holding a position ``< n_i`` (or -1: base) and offsets."""
    nb = len(b_indptr) - 1
    nh = len(head)
    n = len(rows)
    for i in range(n):
        _prefetch_root(b_indptr, b_ts, head, rows, i, n)
        r = rows[i]
        t = times[i]
        bl = 0
        bd = 0
        if r < nb:
            bl = b_indptr[r]
            bd = b_indptr[r + 1] - bl
        k = head[r] if r < nh else -1
        while k >= n_entries:  # written by an append newer than this snapshot
            k = e_prev[k]
        if k >= 0 and t <= e_first[k]:  # before all of the row's blocks: base only
            k = -1
        while k >= 0 and a_ts[e_lo[k]] >= t:
            k = e_prev[k]
        cnt = _count_before(b_ts, a_ts, e_lo, e_hi, e_cum, k, t, bl, bd)
        if max_eid >= 0:  # the edges appended before max_eid only
            k2 = head[r] if r < nh else -1
            while k2 >= n_entries or (k2 >= 0 and a_eid[e_lo[k2]] >= max_eid):
                k2 = e_prev[k2]
            cnt2 = _count_before(b_eid, a_eid, e_lo, e_hi, e_cum, k2, max_eid, bl, bd)
            if cnt2 < cnt:
                cnt = cnt2
                k = k2
        n_out[i] = cnt
        k_out[i] = k
        c = cnt if fanout == -1 else min(cnt, fanout)
        offsets[i + 1] = offsets[i] + c


@_jit
def _count_before(b_key, a_key, e_lo, e_hi, e_cum, k, x, bl, bd):
    """Edges of a row whose key (time or id) is below ``x``, its newest such entry being ``k`` (-1: base)."""
    if k >= 0:
        lo = e_lo[k]
        hi = e_hi[k]
        return bd + e_cum[k] - (hi - lo) + _bisect_left(a_key, x, lo, hi) - lo
    return _bisect_left(b_key, x, bl, bl + bd) - bl


@_jit
def _choose(key, deg, k, buf, lo):
    """``sample_csr``'s draws without replacement (``deg > k``) into ``buf[lo:lo+k]``, sorted."""
    if k <= SMALL_FANOUT:
        for s in range(k):  # Floyd
            j = deg - k + s
            t = _draw(key, s, j + 1)
            for q in range(s):
                if buf[lo + q] == t:
                    t = j
                    break
            buf[lo + s] = t
        _insertion_sort(buf, lo, lo + k)
    else:
        for s in range(k):  # reservoir (Algorithm R)
            buf[lo + s] = s
        for idx in range(k, deg):
            r = _draw(key, idx, idx + 1)
            if r < k:
                buf[lo + r] = idx
        buf[lo : lo + k].sort()


@_jit
def _fill(
    b_indptr,
    b_nbr,
    b_ts,
    b_eid,
    a_nbr,
    a_ts,
    a_eid,
    e_lo,
    e_hi,
    e_prev,
    e_cum,
    rows,
    n_arr,
    k_arr,
    recent,
    seed,
    base,
    offsets,
    want_pos,
    o_nbr,
    o_ts,
    o_eid,
    o_pos,
):
    """Pass 2: logical positions (recent or drawn) mapped to base / arena positions."""
    useed = np.uint64(seed)
    nb = len(b_indptr) - 1
    nr = len(rows)
    for i in range(nr):
        if i + 2 * _AHEAD < nr:
            _prefetch_rows(b_indptr, b_nbr, b_ts, b_eid, rows, n_arr, k_arr, offsets, i + 2 * _AHEAD, i + 4 * _AHEAD)
        out = offsets[i]
        c = offsets[i + 1] - out
        if c == 0:
            continue
        n = n_arr[i]
        if recent or c == n:
            for s in range(c):
                o_eid[out + s] = n - c + s
        else:
            _choose(_row_key(useed, base + i), n, c, o_eid, out)
        r = rows[i]
        bl = 0
        bd = 0
        if r < nb:
            bl = b_indptr[r]
            bd = b_indptr[r + 1] - bl
        k = k_arr[i]
        start = bd + e_cum[k] - (e_hi[k] - e_lo[k]) if k >= 0 else 0  # logical start of entry k
        for s in range(c - 1, -1, -1):
            p = o_eid[out + s]
            while k >= 0 and p < start:
                k = e_prev[k]
                start = bd + e_cum[k] - (e_hi[k] - e_lo[k]) if k >= 0 else 0
            if k >= 0:
                q = e_lo[k] + p - start
                o_nbr[out + s] = a_nbr[q]
                o_ts[out + s] = a_ts[q]
                o_eid[out + s] = a_eid[q]
                if want_pos:
                    o_pos[out + s] = -1 - q
            else:
                q = bl + p
                o_nbr[out + s] = b_nbr[q]
                o_ts[out + s] = b_ts[q]
                o_eid[out + s] = b_eid[q]
                if want_pos:
                    o_pos[out + s] = q


def sample_snapshot(
    snap: Snapshot,
    rows: np.ndarray,
    times: np.ndarray,
    fanout: int,
    recent: bool,
    seed: int,
    first_position: int = 0,
    want_pos: bool = False,
    max_edges: int | None = None,
    max_eid: int = -1,
) -> tuple[np.ndarray, np.ndarray, np.ndarray, np.ndarray, np.ndarray | None]:
    """Samples the neighbours of each ``(rows[i], times[i])`` strictly before ``times[i]``.

    Args:
        snap: the adjacency to read (immutable; appends after it are invisible).
        rows: int64 [N] local rows (any row, also one beyond the snapshot: it has no edges).
        times: int64 [N] root times.
        fanout: ``-1`` for all edges before the time, else ``>= 0``.
        recent: the most recent ``fanout`` edges; else ``fanout`` drawn uniformly.
        seed: uint64 seed of the uniform draws (``sample_csr``'s).
        first_position: batch position of ``rows[0]``.
        want_pos: also return where each sampled edge lives (for its feature row).
        max_edges: most edges the answer may hold: more (counted before anything is sampled)
            raise ResourceExhausted; None: no limit.
        max_eid: ``>= 0``: only edges whose id is below it (the graph as of an append); -1: all.

    Returns:
        ``(offsets, nbr, ts, eid, pos)``: int64 arrays, each root's edges in ascending time;
        ``pos[s]`` is the base position ``q >= 0`` or ``-1 - q`` for arena position ``q``
        (None unless ``want_pos``).
    """
    rows = np.ascontiguousarray(rows, dtype=np.int64)
    times = np.ascontiguousarray(times, dtype=np.int64)
    n = len(rows)
    b, a = snap.base, snap.arena
    offsets = np.zeros(n + 1, dtype=np.int64)
    n_arr = np.empty(n, dtype=np.int64)
    k_arr = np.empty(n, dtype=np.int64)
    _locate(
        b.indptr,
        b.ts,
        b.eid,
        a.ts,
        a.eid,
        int(max_eid),
        a.e_lo,
        a.e_hi,
        a.e_prev,
        a.e_cum,
        a.e_first,
        a.head,
        snap.n_entries,
        rows,
        times,
        int(fanout),
        offsets,
        n_arr,
        k_arr,
    )
    total = int(offsets[-1])
    if max_edges is not None and total > max_edges:
        raise ResourceExhausted(
            f"{n} roots would sample {total} edges, over the answer limit of {max_edges} edges; "
            "send fewer roots per request or a smaller fanout"
        )
    nbr, ts, eid = (np.empty(total, dtype=np.int64) for _ in range(3))
    pos = np.empty(total if want_pos else 0, dtype=np.int64)
    if total:
        s = int(seed) - (1 << 64) if int(seed) >= 1 << 63 else int(seed)  # numba takes int64: two's complement
        _fill(
            b.indptr,
            b.nbr,
            b.ts,
            b.eid,
            a.nbr,
            a.ts,
            a.eid,
            a.e_lo,
            a.e_hi,
            a.e_prev,
            a.e_cum,
            rows,
            n_arr,
            k_arr,
            bool(recent),
            s,
            int(first_position),
            offsets,
            bool(want_pos),
            nbr,
            ts,
            eid,
            pos,
        )
    return offsets, nbr, ts, eid, (pos if want_pos else None)


def gather_features(snap: Snapshot, pos: np.ndarray) -> np.ndarray:
    """Edge-feature rows (float32 [S, D]) of sampled positions from :func:`sample_snapshot`."""
    b, a = snap.base, snap.arena
    out = np.empty((len(pos), b.feat.shape[1]), dtype=np.float32)
    in_base = pos >= 0
    out[in_base] = b.feat[pos[in_base]]
    out[~in_base] = a.feat[-1 - pos[~in_base]]
    return out


def sample_temporal(
    indptr: np.ndarray,
    nbr: np.ndarray,
    ts: np.ndarray,
    eid: np.ndarray,
    rows: np.ndarray,
    times: np.ndarray,
    fanout: int,
    strategy: str,
    seed: int,
    first_position: int = 0,
) -> tuple[np.ndarray, np.ndarray, np.ndarray, np.ndarray]:
    """The compiled sampler on a plain time-sorted CSR, with the signature of
    :func:`graphfeed.gpu_kernels.reference.sample_temporal` (for the GPU bench's CPU column and
    the test that CPU, NumPy and CUDA draw the same edges)."""
    from graphfeed.graph_store.temporal.index import Csr, Snapshot, empty_arena  # noqa: PLC0415 - no cycle at import

    if strategy not in ("recent", "uniform"):
        raise ValueError(f"strategy must be 'recent' or 'uniform', got {strategy!r}")
    indptr = np.asarray(indptr, dtype=np.int64)
    base = Csr(
        indptr, np.asarray(nbr), np.asarray(ts, dtype=np.int64), np.asarray(eid), np.empty((len(ts), 0), np.float32)
    )
    arena = empty_arena(0)
    arena = dataclasses.replace(arena, head=np.full(len(indptr) - 1, -1, dtype=np.int64))
    z = np.empty(0, dtype=np.int64)
    snap = Snapshot(base, arena, 0, 0, 0, len(indptr) - 1, z, z, 0, 0, None, None)
    offsets, s_nbr, s_ts, s_eid, _ = sample_snapshot(
        snap, rows, times, fanout, strategy == "recent", seed, first_position
    )
    return offsets, s_nbr, s_ts, s_eid
