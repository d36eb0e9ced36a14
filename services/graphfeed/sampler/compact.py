"""Compaction of one sampled hop into a DGL block (``dgl.to_block`` semantics), in one pass.

DGL numbers a block's src nodes as: the dst nodes first (so that ``h_dst = h[:num_dst]``),
then every other sampled source in order of first appearance in the edge list. A compiled loop
(numba, GIL released) does exactly that with a dense ``slot_of[gid]`` table — O(dst + edges),
no sort — and merges the per-partition answers back into frontier order on the way, reading
each partition's arrays where they arrived (no concatenation). The table is all ``-1`` between
calls (the loop restores the entries it set), so it is allocated once and reused:
:class:`SlotTables` lends them, one per running compaction.
"""

from __future__ import annotations

import contextlib
import os
import threading
from collections.abc import Callable, Iterator, Sequence

import numba
import numpy as np

from graphfeed.common.blocks import INT32_LIMIT, Block
from graphfeed.common.cacheline import prefetch

_jit = numba.njit(cache=True, nogil=True, boundscheck=False)
_AHEAD = 4  # dst nodes whose slot entries are prefetched ahead: compaction 30 % faster
_PREFETCH_MAX_EDGES = 32
_OK, _DUP_DST, _BAD_SRC = 0, 1, 2


@_jit
def _compact(dst_nodes, part_of, local_of, offs, srcs, eids, slot_of, src_nodes, edge_src, edge_dst, edge_ids):  # noqa: ANN001, ANN202
    """Fills ``src_nodes[:n]`` and the edge arrays (sized by the caller: ``num_dst + num_edges``
    and ``num_edges``); returns (n, status, offending gid).

    Frontier node ``i``'s edges are ``srcs[p][offs[p][l]:offs[p][l + 1]]`` with
    ``p, l = part_of[i], local_of[i]`` (``offs``/``srcs``/``eids``: one array per partition).
    ``status`` is ``_DUP_DST`` or ``_BAD_SRC`` (a gid outside the table) on bad input; the
    table is restored either way.
    """
    num_dst = len(dst_nodes)
    n_table = len(slot_of)
    n = 0
    status, bad = _OK, -1
    for i in range(num_dst):
        v = dst_nodes[i]
        if v < 0 or v >= n_table:
            status, bad = _BAD_SRC, v
            break
        if slot_of[v] >= 0:
            status, bad = _DUP_DST, v
            break
        slot_of[v] = i
        src_nodes[i] = v
        n += 1
    e = 0
    if status == _OK:
        for i in range(num_dst):
            if i + _AHEAD < num_dst:  # slot entries of a dst ahead: random in a 4 B/node table
                pa, la = part_of[i + _AHEAD], local_of[i + _AHEAD]
                ka = offs[pa][la]
                for k in range(ka, min(offs[pa][la + 1], ka + _PREFETCH_MAX_EDGES)):
                    w = srcs[pa][k]
                    if 0 <= w < n_table:
                        prefetch(slot_of, w)
            p, loc = part_of[i], local_of[i]
            src, ids = srcs[p], eids[p]
            for k in range(offs[p][loc], offs[p][loc + 1]):
                v = src[k]
                if v < 0 or v >= n_table:
                    status, bad = _BAD_SRC, v
                    break
                s = slot_of[v]
                if s < 0:
                    s = n
                    slot_of[v] = n
                    src_nodes[n] = v
                    n += 1
                edge_src[e] = s
                edge_dst[e] = i
                edge_ids[e] = ids[k]
                e += 1
            if status != _OK:
                break
    for q in range(n):
        slot_of[src_nodes[q]] = -1
    return n, status, bad


class SlotTables:
    """``slot_of`` tables (int32 ``-1`` over every gid) for :func:`compact_hop`, lent one per
    running compaction.

    A table is 4 bytes per node (400 MB for a 100M-node graph), so one per gRPC handler thread
    (up to 16) would cost memory for nothing: compaction is CPU-bound, so at most ``max_tables``
    (default: the number of CPUs) run at once, each taking the most recently returned, i.e.
    cache-warmest, table. (On the large preset this did not measurably change the sampler's CPU
    per minibatch; it bounds memory.)
    """

    def __init__(self, num_nodes: int, max_tables: int | None = None) -> None:
        self.num_nodes = int(num_nodes)
        self._dtype = np.int32 if self.num_nodes < 2**31 else np.int64
        self._free: list[np.ndarray] = []  # LIFO: the last returned table is the warmest
        self._lock = threading.Lock()
        self._slots = threading.BoundedSemaphore(max(1, max_tables or os.cpu_count() or 1))

    @contextlib.contextmanager
    def lease(self) -> Iterator[np.ndarray]:
        """A table of all ``-1`` for one compaction (blocks while ``max_tables`` are in use)."""
        with self._slots:
            with self._lock:
                table = self._free.pop() if self._free else None
            if table is None:
                table = np.full(self.num_nodes, -1, dtype=self._dtype)
            try:
                yield table
            finally:
                with self._lock:
                    self._free.append(table)


def compact_hop(
    dst_nodes: np.ndarray,
    order: np.ndarray,
    bounds: np.ndarray,
    parts: Sequence[tuple[np.ndarray, np.ndarray, np.ndarray]],
    slot_of: np.ndarray,
    alloc: Callable[[int, int], tuple[np.ndarray, np.ndarray, np.ndarray, np.ndarray]] | None = None,
    narrow: bool = False,
) -> tuple[np.ndarray, Block]:
    """Merges a hop's answers (one per partition, grouped) into frontier order and compacts them.

    Args:
        dst_nodes: unique gids of the dst nodes (the frontier), int64 [D].
        order: int64 [D]; ``order[j]`` is the frontier position of grouped position ``j``.
        bounds: int64 [len(parts)+1]; grouped positions ``bounds[p]:bounds[p+1]`` were answered
            by ``parts[p]``.
        parts: per answering partition ``(offsets, src, edge_ids)``: a CSR over its grouped
            positions; ``src`` are sampled in-neighbor gids, each in ``[0, len(slot_of))``, may
            repeat and may contain dst nodes; ``edge_ids`` are passed through (int32 or int64).
        slot_of: a table of ``-1`` over every gid (:class:`SlotTables`); left as it was found.
        alloc: ``alloc(max_src, num_edges)`` returns where to write the output: writable int64
            arrays ``[max_src]`` (``src_nodes`` is a prefix of it) and three ``[num_edges]``
            (``edge_src``, ``edge_dst``, ``edge_ids``), e.g. in a response's shared-memory
            segment; default: new arrays.
        narrow: without ``alloc``, the block's edge arrays are written as int32 where their values
            fit (local indices of fewer than 2**31 nodes; edge ids when every part sent int32), as
            :func:`graphfeed.common.blocks.to_proto` would narrow them for the wire: written
            once at half the width instead of written, then copied narrower.

    Returns:
        ``(src_nodes, block)``: ``src_nodes`` is ``dst_nodes`` followed by the distinct gids of
        ``src`` not in ``dst_nodes``, in order of first appearance (frontier order); ``block``
        has ``edge_src`` indexing ``src_nodes`` and ``edge_dst`` indexing ``dst_nodes``.

    Raises:
        ValueError: the arrays do not describe a CSR over ``dst_nodes``, ids are outside the
            table, or ``dst_nodes`` repeats a gid.
    """
    dst_nodes = np.ascontiguousarray(dst_nodes, dtype=np.int64)
    order = np.ascontiguousarray(order, dtype=np.int64)
    bounds = np.asarray(bounds, dtype=np.int64)
    num_dst = len(dst_nodes)
    if len(order) != num_dst or len(bounds) != len(parts) + 1 or bounds[0] != 0 or bounds[-1] != num_dst:
        raise ValueError(
            f"to_block: order [{len(order)}] / bounds {bounds.tolist()} do not cover {num_dst} dst nodes "
            f"in {len(parts)} parts"
        )
    offs, srcs, eids = [], [], []
    # The compiled loop indexes the parts at run time, so each kind of array has one type across
    # them: int32 as graph-stores send them over the wire when every part has it, else int64.
    src_t, ids_t = (_common_int([np.asarray(part[k]) for part in parts]) for k in (1, 2))
    for p, (o, src, ids) in enumerate(parts):
        o = _readonly(np.ascontiguousarray(o, dtype=np.int64))
        src, ids = _readonly(np.ascontiguousarray(src, dtype=src_t)), _readonly(np.ascontiguousarray(ids, dtype=ids_t))
        size = int(bounds[p + 1] - bounds[p])
        if len(o) != size + 1 or o[0] != 0 or o[-1] != len(src) or len(ids) != len(src):
            raise ValueError(
                f"to_block: part {p}: offsets [{len(o)}] / src [{len(src)}] / edge_ids [{len(ids)}] "
                f"do not form a CSR over its {size} dst nodes"
            )
        if size and (np.diff(o) < 0).any():
            raise ValueError("to_block: offsets must be non-decreasing")
        offs.append(o)
        srcs.append(src)
        eids.append(ids)
    where = np.empty(num_dst, dtype=np.int64)
    where[order] = np.arange(num_dst, dtype=np.int64)
    part_of = (np.searchsorted(bounds, where, side="right") - 1).astype(np.int64)
    local_of = where - bounds[part_of]
    num_edges = sum(len(src) for src in srcs)
    out = _outputs(num_dst + num_edges, num_edges, alloc, ids_t if narrow else None)
    n, status, bad = _compact(dst_nodes, part_of, local_of, tuple(offs), tuple(srcs), tuple(eids), slot_of, *out)
    if status == _DUP_DST:
        raise ValueError(f"to_block: dst_nodes must be unique ({bad} repeats)")
    if status == _BAD_SRC:
        raise ValueError(f"to_block: gids must be in [0, {len(slot_of)}), got {bad}")
    src_nodes, edge_src, edge_dst, out_eids = out
    block = Block(num_src=int(n), num_dst=num_dst, edge_src=edge_src, edge_dst=edge_dst, edge_ids=out_eids)
    return src_nodes[:n], block


def _common_int(arrays: Sequence[np.ndarray]) -> type:
    """int32 when every array is int32, else int64."""
    return np.int32 if arrays and all(a.dtype == np.int32 for a in arrays) else np.int64


def _outputs(max_src: int, num_edges: int, alloc: Callable | None, narrow_ids: type | None) -> tuple[np.ndarray, ...]:
    if alloc is None:
        if narrow_ids is None:
            return tuple(np.empty(k, dtype=np.int64) for k in (max_src, num_edges, num_edges, num_edges))
        local = np.int32 if max_src < INT32_LIMIT else np.int64  # bounds edge_src and edge_dst
        return tuple(
            np.empty(k, dtype=t)
            for k, t in ((max_src, np.int64), (num_edges, local), (num_edges, local), (num_edges, narrow_ids))
        )
    out = tuple(alloc(max_src, num_edges))
    want = (max_src, num_edges, num_edges, num_edges)
    if len(out) != 4 or any(
        not isinstance(a, np.ndarray)
        or a.shape != (k,)
        or a.dtype != np.int64
        or not a.flags.writeable
        or not a.flags.c_contiguous
        for a, k in zip(out, want)
    ):
        raise ValueError(f"to_block: alloc must return writable int64 arrays of lengths {list(want)}")
    return out


def _readonly(a: np.ndarray) -> np.ndarray:
    """A read-only view: numba then sees one array type for every part, whatever its origin
    (inline gRPC bytes are read-only, shared-memory mappings writable)."""
    if a.flags.writeable:
        a = a.view()
        a.flags.writeable = False
    return a


def to_block(
    dst_nodes: np.ndarray, offsets: np.ndarray, src: np.ndarray, edge_ids: np.ndarray, num_nodes: int | None = None
) -> tuple[np.ndarray, Block]:
    """:func:`compact_hop` for answers already in frontier order (``dgl.to_block`` of one CSR).

    ``num_nodes`` sizes the slot table (default: one past the largest gid seen).
    """
    dst_nodes = np.asarray(dst_nodes, dtype=np.int64)
    src = np.asarray(src, dtype=np.int64)
    if num_nodes is None:
        num_nodes = 1 + max([int(a.max()) for a in (dst_nodes, src) if len(a)], default=0)
    slot_of = np.full(max(int(num_nodes), 1), -1, dtype=np.int32)
    order = np.arange(len(dst_nodes), dtype=np.int64)
    return compact_hop(dst_nodes, order, np.array([0, len(dst_nodes)]), [(offsets, src, edge_ids)], slot_of)
