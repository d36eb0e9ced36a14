"""Where the TGN loop gets "the k most recent neighbours before t": a protocol and the in-process
reference (a growing edge log kept sorted by (node, time), vectorized NumPy).

The same loop runs against a graphfeed graph-store through a class of this protocol that
forwards ``append`` to the routing client (``undirected=True``, batch ids from the event
position, so a resumed job's re-sends are acknowledged as duplicates) and ``sample`` to the
temporal sampling RPC (strategy "recent"). Both answer a pure function of the events appended
so far: the in-edges of each root with time strictly before the root's time, ascending time,
equal times in arrival order, where each event ``(u, v)`` arrives as ``u -> v`` then ``v -> u``
(all forward copies of a call first, then all reverses).

``before_event`` narrows a sample to the events of earlier appends (PyG's ``LastNeighborLoader``
view, "previous-batches" visibility): here by each edge's position in the stream; the store
source asks the graph-stores for their state as of that append. ``event_of`` says which event
(counted from the first append) a sampled edge came from, for a trainer that keeps the edge
features itself (the GPU cache of ``device.py``).
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Protocol

import numpy as np

from graphfeed.common.errors import InvalidArgument
from graphfeed.graph_store.temporal.store import TemporalSample


class NeighborSource(Protocol):
    """What the TGN loop needs from a temporal graph."""

    def append(self, src: np.ndarray, dst: np.ndarray, t: np.ndarray, efeat: np.ndarray | None) -> None:
        """Makes events visible to later samples, in both directions."""
        ...

    def sample(
        self, nodes: np.ndarray, times: np.ndarray, fanout: int, before_event: int | None = None
    ) -> TemporalSample:
        """The ``fanout`` most recent in-neighbours of each node strictly before its time (and,
        with ``before_event``, from the first ``before_event`` events appended only)."""
        ...


class InProcessNeighbors:
    """The reference :class:`NeighborSource`: everything in this process, no Python loop per root.

    Edges live in an append-only log (arrival order; ``eid`` = log position). An index sorted by
    (row, time, arrival) holds, per position, the edge's time and log position; ``indptr`` marks
    the rows. An append inserts into the index with ``np.insert`` (O(E) copies of two int64
    arrays, about a millisecond at 10^6 edges); a sample finds each root's count of edges before
    its time with a vectorized binary search over its row.

    Args:
        num_nodes: rows known up front (the index grows for larger ids).
        edge_feat_dim: D of the edge features (0: none).
        undirected: store each event in both directions (TGN's view); False stores ``src -> dst``
            only, as a graph-store does.
    """

    def __init__(self, num_nodes: int, edge_feat_dim: int = 0, undirected: bool = True) -> None:
        self._dim, self._undirected = edge_feat_dim, undirected
        self._indptr = np.zeros(num_nodes + 1, dtype=np.int64)
        self._ts = np.zeros(0, dtype=np.int64)  # index order
        self._pos = np.zeros(0, dtype=np.int64)  # index order -> log position
        self._nbr = np.zeros(0, dtype=np.int64)  # log order, with spare capacity
        self._event = np.zeros(0, dtype=np.int64)  # log order: the event number of each edge
        self._events = 0  # events appended
        self._efeat = np.zeros((0, edge_feat_dim), dtype=np.float32)
        self._size = 0
        self._time = np.iinfo(np.int64).min  # latest time appended: appends must not go back

    @property
    def num_edges(self) -> int:
        """Directed edges stored (undirected: twice the events appended)."""
        return self._size

    def append(self, src: np.ndarray, dst: np.ndarray, t: np.ndarray, efeat: np.ndarray | None) -> None:
        """Adds ``src -> dst`` (then, undirected, ``dst -> src``) at time ``t`` for every event."""
        src, dst, t = (np.asarray(a, dtype=np.int64) for a in (src, dst, t))
        if not len(src) == len(dst) == len(t) or (src < 0).any() or (dst < 0).any():
            raise InvalidArgument(
                f"append: src/dst/t must have one entry per event and ids >= 0, got {len(src)}/{len(dst)}/{len(t)}"
            )
        feat = self._check_feat(efeat, len(src))
        if len(t) and t.min() < self._time:
            raise InvalidArgument("append: a call's events must not be older than an earlier call's (before_event)")
        self._time = int(t.max(initial=self._time))
        event = self._events + np.arange(len(src), dtype=np.int64)
        self._events += len(src)
        if self._undirected:
            src, dst, t, feat, event = (
                np.concatenate([src, dst]),
                np.concatenate([dst, src]),
                np.concatenate([t, t]),
                np.concatenate([feat, feat]),
                np.concatenate([event, event]),
            )
        rows, nbr, ts = dst, src, t
        self._grow_rows(int(rows.max(initial=-1)) + 1)
        pos = self._append_log(nbr, feat, event)
        order = np.lexsort((ts, rows))  # stable: equal (row, t) stay in arrival order
        rows, ts, pos = rows[order], ts[order], pos[order]
        # after every stored edge of the row with time <= t: equal times keep arrival order
        at = self._bisect(self._indptr[rows], self._indptr[rows + 1], ts, strict=False)
        self._ts = np.insert(self._ts, at, ts)
        self._pos = np.insert(self._pos, at, pos)
        counts = np.bincount(rows, minlength=len(self._indptr) - 1)
        self._indptr[1:] += np.cumsum(counts)

    def sample(
        self, nodes: np.ndarray, times: np.ndarray, fanout: int, before_event: int | None = None
    ) -> TemporalSample:
        """Most recent ``fanout`` (-1: all) in-neighbours of each node with time < its time and,
        with ``before_event`` (a boundary between two appends), from the events of the appends before
        it only (no append is older than an earlier one, so those are a prefix of every row)."""
        nodes, times = np.asarray(nodes, dtype=np.int64), np.asarray(times, dtype=np.int64)
        if len(nodes) != len(times) or fanout < -1 or (nodes < 0).any():
            raise InvalidArgument(
                f"sample: {len(nodes)} nodes, {len(times)} times, fanout {fanout} "
                "(need equal lengths, fanout >= -1, ids >= 0)"
            )
        known = nodes < len(self._indptr) - 1
        rows = np.where(known, nodes, 0)
        start = np.where(known, self._indptr[rows], 0)
        stop = np.where(known, self._indptr[rows + 1], 0)
        end = self._bisect(start, stop, times, strict=True)  # start + n_i
        if before_event is not None:
            edges = before_event * (2 if self._undirected else 1)  # log positions of those events
            end = np.minimum(end, self._bisect_pos(start, stop, edges))
        count = end - start if fanout < 0 else np.minimum(end - start, fanout)
        offsets = np.zeros(len(nodes) + 1, dtype=np.int64)
        np.cumsum(count, out=offsets[1:])
        first = np.repeat(end - count - offsets[:-1], count)  # index position = first + output slot
        at = first + np.arange(offsets[-1], dtype=np.int64)
        pos = self._pos[at]
        efeat = self._efeat[pos] if self._dim else None
        return TemporalSample(offsets=offsets, nbr=self._nbr[pos], ts=self._ts[at], eid=pos, efeat=efeat)

    def event_of(self, eid: np.ndarray) -> np.ndarray:
        """The event number (0 for the first event appended) of each sampled edge id."""
        return self._event[eid]

    def _bisect(self, lo: np.ndarray, hi: np.ndarray, t: np.ndarray, strict: bool) -> np.ndarray:
        """Per query, the first index position in ``[lo, hi)`` whose time is >= t (strict) or > t."""
        return _first_not(self._ts, lo, hi, (lambda k: k < t) if strict else (lambda k: k <= t))

    def _bisect_pos(self, lo: np.ndarray, hi: np.ndarray, edges: int) -> np.ndarray:
        """Per row, the first index position in ``[lo, hi)`` whose edge's log position is >= edges."""
        return _first_not(self._pos, lo, hi, lambda k: k < edges)

    def _check_feat(self, efeat: np.ndarray | None, n: int) -> np.ndarray:
        if self._dim == 0:
            return np.zeros((n, 0), dtype=np.float32)
        if efeat is None or efeat.shape != (n, self._dim):
            got = None if efeat is None else efeat.shape
            raise InvalidArgument(f"append: edge features must be [{n}, {self._dim}], got {got}")
        return np.asarray(efeat, dtype=np.float32)

    def _grow_rows(self, num_rows: int) -> None:
        if num_rows > len(self._indptr) - 1:
            tail = np.full(num_rows - len(self._indptr) + 1, self._indptr[-1], dtype=np.int64)
            self._indptr = np.concatenate([self._indptr, tail])

    def _append_log(self, nbr: np.ndarray, feat: np.ndarray, event: np.ndarray) -> np.ndarray:
        """Writes edges at the end of the log (capacity doubles); returns their log positions."""
        need = self._size + len(nbr)
        if need > len(self._nbr):
            cap = max(need, 2 * len(self._nbr), 1024)
            self._nbr = np.resize(self._nbr, cap)
            self._event = np.resize(self._event, cap)
            grown = np.zeros((cap, self._dim), dtype=np.float32)
            grown[: self._size] = self._efeat[: self._size]
            self._efeat = grown
        pos = np.arange(self._size, need, dtype=np.int64)
        self._nbr[pos] = nbr
        self._event[pos] = event
        self._efeat[pos] = feat
        self._size = need
        return pos


def _first_not(
    keys: np.ndarray, lo: np.ndarray, hi: np.ndarray, before: Callable[[np.ndarray], np.ndarray]
) -> np.ndarray:
    """Per row, the first position in ``[lo, hi)`` whose key is not ``before`` (true on a prefix of
    each sorted range): a binary search of every row at once."""
    lo, hi = lo.copy(), hi.copy()
    while True:
        open_ = lo < hi
        if not open_.any():
            return lo
        mid = (lo + hi) // 2
        at = keys[np.where(open_, mid, 0)] if len(keys) else np.zeros_like(mid)
        right = open_ & before(at)
        lo = np.where(right, mid + 1, lo)
        hi = np.where(open_ & ~right, mid, hi)
