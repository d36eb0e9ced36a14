"""The time-indexed adjacency of one partition: a base CSR, append blocks, immutable snapshots.

GNNFlow keeps, per node, a linked list of fixed-size blocks of edges in time order; a query
"neighbours of v before t" walks v's list from the newest block and binary-searches inside one
block, and an insertion only ever fills the tail block or links a new one, so history is never
rewritten. Ours is the same structure laid out for vectorized writes and a compiled reader:

- **Base** (:class:`Csr`): a CSR whose rows are sorted by ``(ts, position)``, built at open from
  the partition's ``indptr/indices/edge_ids/edge_ts`` (+ ``edge_feat``) and rebuilt by
  compaction. Rows are dst-local (``gid - start``) for ingest-time nodes; nodes that arrive by
  append get rows ``num_owned, num_owned + 1, ...`` through a sorted gid -> row index.
- **Blocks**: one per acknowledged batch. A batch sorted by ``(row, t)`` becomes one *entry* per
  row it touches: a contiguous segment of the :class:`Arena` (an append-only edge store, grown by
  doubling). Each entry records its row's previous entry (``e_prev``), so a row's entries form
  GNNFlow's per-node block list (newest first from ``head[row]``), and the running count of the
  row's block edges (``e_cum``), so a logical position maps to its entry without a scan.
- **Snapshots** (:class:`Snapshot`): readers take the current snapshot (one reference read) and
  never see a half-applied batch: an append writes only past the counts published in earlier
  snapshots, then publishes a new snapshot. ``head`` is the one array updated in place; a reader
  skips entries ``>= n_entries`` of its snapshot, so a newer head is harmless.
- **Compaction** (:func:`compact`): merges base and blocks into a new base in O(E) (scatter by
  destination, no sort) and starts an empty arena; older snapshots keep the old arrays. It only
  reads a snapshot, so it can run beside the writer; :func:`carry_over` then moves the blocks
  appended meanwhile onto the new base (O(those edges)).

Sampling over a snapshot is :mod:`graphfeed.graph_store.temporal.sampling`.
"""

from __future__ import annotations

from dataclasses import dataclass, replace

import numpy as np

from graphfeed.graph_store.temporal.types import OutOfOrder

_I64_MIN = np.iinfo(np.int64).min
_NO_ROW = 1 << 62  # row of an owned node that has no edge yet: beyond every array


@dataclass(frozen=True)
class Layout:
    """Which gids a partition owns: ``[start, stop)`` and the appended ids ``g >= num_nodes``
    with ``g % num_partitions == partition_id``."""

    partition_id: int
    num_partitions: int
    num_nodes: int
    start: int
    stop: int


@dataclass(frozen=True)
class Csr:
    """A time-sorted CSR: row ``r`` is ``[indptr[r], indptr[r+1])``, ascending ``ts`` per row."""

    indptr: np.ndarray  # int64 [R+1]
    nbr: np.ndarray  # int32/int64 [E] neighbour (source) gid
    ts: np.ndarray  # int64 [E]
    eid: np.ndarray  # int32/int64 [E]
    feat: np.ndarray  # float32 [E, D] (D may be 0)

    @property
    def num_rows(self) -> int:
        return len(self.indptr) - 1


@dataclass(frozen=True)
class ArenaView:
    """The arena's buffers as of one snapshot (valid up to the snapshot's counts)."""

    nbr: np.ndarray  # int64 [cap] per arena edge
    ts: np.ndarray
    eid: np.ndarray
    feat: np.ndarray  # float32 [cap, D]
    e_lo: np.ndarray  # int64 [cap] per entry: arena range [e_lo, e_hi)
    e_hi: np.ndarray
    e_prev: np.ndarray  # previous entry of the same row, or -1
    e_cum: np.ndarray  # the row's block edges up to and including this entry
    e_row: np.ndarray  # the entry's row
    e_first: np.ndarray  # ts of the row's oldest block edge: older roots skip the whole chain
    head: np.ndarray  # int64 [row cap] newest entry of each row, or -1


@dataclass(frozen=True)
class Snapshot:
    """Everything a reader needs, immutable once published."""

    base: Csr
    arena: ArenaView
    n_entries: int
    n_blocks: int
    n_arena_edges: int
    num_rows: int  # rows in use: num_owned + appended new nodes
    new_gids: np.ndarray  # int64 sorted gids of nodes that arrived by append
    new_rows: np.ndarray  # int64 their rows
    seq: int  # batches applied
    num_appended: int  # edges appended (the next edge seq)
    min_t: int | None  # None while there is no edge
    max_t: int | None

    @property
    def num_edges(self) -> int:
        return len(self.base.ts) + self.n_arena_edges


def _grown(arr: np.ndarray, used: int, need: int, fill: int | None = None) -> np.ndarray:
    """``arr`` when it holds ``need`` rows, else a copy of its first ``used`` rows with room to double."""
    if len(arr) >= need:
        return arr
    out = np.empty((max(need, 2 * len(arr), 1024), *arr.shape[1:]), dtype=arr.dtype)
    out[:used] = arr[:used]
    if fill is not None:
        out[used:] = fill
    return out


def empty_arena(dim: int) -> ArenaView:
    """An arena with no blocks, for ``dim`` edge-feature columns."""
    z = np.empty(0, dtype=np.int64)
    return ArenaView(z, z, z, np.empty((0, dim), np.float32), z, z, z, z, z, z, z)


def add_block(
    snap: Snapshot, rows: np.ndarray, nbr: np.ndarray, ts: np.ndarray, eid: np.ndarray, feat: np.ndarray
) -> ArenaView:
    """Writes one block (edges sorted by ``(rows, ts)``) past ``snap``'s counts; returns the new view.

    Only the writer calls this (under its lock); ``snap`` must be the latest snapshot.
    """
    a, n0, k0 = snap.arena, snap.n_arena_edges, snap.n_entries
    n = len(rows)
    starts = np.flatnonzero(np.r_[True, rows[1:] != rows[:-1]]) if n else np.empty(0, np.int64)
    m = len(starts)
    ends = np.r_[starts[1:], n]
    e_row = rows[starts]
    grow = {name: _grown(getattr(a, name), n0, n0 + n) for name in ("nbr", "ts", "eid", "feat")}
    ent = {
        name: _grown(getattr(a, name), k0, k0 + m) for name in ("e_lo", "e_hi", "e_prev", "e_cum", "e_row", "e_first")
    }
    head = _grown(a.head, len(a.head), int(e_row.max()) + 1 if m else 0, fill=-1)
    grow["nbr"][n0 : n0 + n] = nbr
    grow["ts"][n0 : n0 + n] = ts
    grow["eid"][n0 : n0 + n] = eid
    grow["feat"][n0 : n0 + n] = feat
    prev = head[e_row]
    cum_prev = np.where(prev >= 0, ent["e_cum"][np.maximum(prev, 0)], 0)
    ent["e_lo"][k0 : k0 + m] = n0 + starts
    ent["e_hi"][k0 : k0 + m] = n0 + ends
    ent["e_prev"][k0 : k0 + m] = prev
    ent["e_cum"][k0 : k0 + m] = cum_prev + (ends - starts)
    ent["e_row"][k0 : k0 + m] = e_row
    ent["e_first"][k0 : k0 + m] = np.where(prev >= 0, ent["e_first"][np.maximum(prev, 0)], ts[starts])
    head[e_row] = k0 + np.arange(m, dtype=np.int64)  # last: readers of older snapshots skip these
    return ArenaView(**grow, **ent, head=head)


def last_times(snap: Snapshot, rows: np.ndarray) -> np.ndarray:
    """The latest stored timestamp of each row (int64 min for a row with no edge); writer only."""
    a, b = snap.arena, snap.base
    out = np.full(len(rows), _I64_MIN, dtype=np.int64)
    k = np.full(len(rows), -1, dtype=np.int64)
    in_head = rows < len(a.head)
    k[in_head] = a.head[rows[in_head]]
    has = k >= 0
    out[has] = a.ts[a.e_hi[k[has]] - 1]
    r = rows[~has]
    in_base = r < b.num_rows
    r = r[in_base]
    end = b.indptr[r + 1]
    nonempty = end > b.indptr[r]
    vals = np.full(len(r), _I64_MIN, dtype=np.int64)
    vals[nonempty] = b.ts[end[nonempty] - 1]
    sub = np.full(int((~has).sum()), _I64_MIN, dtype=np.int64)
    sub[in_base] = vals
    out[~has] = sub
    return out


def time_sorted_base(
    indptr: np.ndarray, nbr: np.ndarray, ts: np.ndarray, eid: np.ndarray, feat: np.ndarray | None
) -> Csr:
    """The base CSR of a partition: each row sorted by ``(ts, position)``.

    Arrays already in that order are used as they are (memory-mapped, no copy).
    """
    indptr = np.asarray(indptr, dtype=np.int64)
    e = len(ts)
    feat = np.empty((e, 0), np.float32) if feat is None else feat
    row = np.repeat(np.arange(len(indptr) - 1, dtype=np.int64), np.diff(indptr))
    same_row = row[1:] == row[:-1]
    if not np.any(same_row & (np.asarray(ts[1:]) < np.asarray(ts[:-1]))):
        return Csr(indptr, nbr, np.asarray(ts), eid, feat)
    order = np.lexsort((np.asarray(ts), row))  # stable: equal ts keep their position order
    return Csr(indptr, np.asarray(nbr)[order], np.asarray(ts)[order], np.asarray(eid)[order], np.asarray(feat)[order])


def compact(snap: Snapshot) -> Snapshot:
    """A snapshot with the same logical timelines whose blocks are all merged into the base."""
    b, a = snap.base, snap.arena
    r_all, ne, na = snap.num_rows, snap.n_entries, snap.n_arena_edges
    bdeg = np.zeros(r_all, dtype=np.int64)
    bdeg[: b.num_rows] = np.diff(b.indptr)
    e_row, e_lo, e_hi = a.e_row[:ne], a.e_lo[:ne], a.e_hi[:ne]
    e_len = e_hi - e_lo
    adeg = np.bincount(e_row, weights=e_len, minlength=r_all).astype(np.int64)
    indptr = np.zeros(r_all + 1, dtype=np.int64)
    np.cumsum(bdeg + adeg, out=indptr[1:])
    # Base edge at position p of row r goes to indptr[r] + (p - old_indptr[r]); block edge at
    # arena position q of entry k goes after the row's base edges and its older entries.
    b_dest = np.arange(len(b.ts), dtype=np.int64) + np.repeat(indptr[: b.num_rows] - b.indptr[:-1], bdeg[: b.num_rows])
    shift = indptr[e_row] + bdeg[e_row] + a.e_cum[:ne] - e_len - e_lo
    a_dest = np.arange(na, dtype=np.int64) + np.repeat(shift, e_len)
    e = len(b.ts) + na
    out = {}
    for name in ("nbr", "ts", "eid", "feat"):
        src_b, src_a = getattr(b, name), getattr(a, name)
        arr = np.empty((e, *src_b.shape[1:]), dtype=np.float32 if name == "feat" else np.int64)
        arr[b_dest] = src_b
        arr[a_dest] = src_a[:na]
        out[name] = arr
    base = Csr(indptr, out["nbr"], out["ts"], out["eid"], out["feat"])
    return replace(snap, base=base, arena=empty_arena(b.feat.shape[1]), n_entries=0, n_blocks=0, n_arena_edges=0)


def carry_over(compacted: Snapshot, taken: Snapshot, latest: Snapshot) -> Snapshot:
    """``latest`` on ``compacted``'s base: the blocks appended after ``taken`` move to a fresh arena.

    ``compacted = compact(taken)`` ran without the writer's lock while ``latest`` (same base as
    ``taken``) grew past it. The later blocks keep their edges, eids and per-row order: their
    entries, stably regrouped by row, become one block (a row's timeline is unchanged). Writer only.
    """
    a, k0, n0 = latest.arena, taken.n_entries, taken.n_arena_edges
    n_new = latest.n_arena_edges - n0
    fresh = replace(
        latest, base=compacted.base, arena=empty_arena(a.feat.shape[1]), n_entries=0, n_blocks=0, n_arena_edges=0
    )
    if not n_new:
        return fresh
    rows = np.repeat(a.e_row[k0 : latest.n_entries], a.e_hi[k0 : latest.n_entries] - a.e_lo[k0 : latest.n_entries])
    order = np.argsort(rows, kind="stable")
    rows = rows[order]
    seg = slice(n0, n0 + n_new)
    arena = add_block(fresh, rows, a.nbr[seg][order], a.ts[seg][order], a.eid[seg][order], a.feat[seg][order])
    m = int(np.count_nonzero(rows[1:] != rows[:-1])) + 1
    return replace(fresh, arena=arena, n_entries=m, n_blocks=latest.n_blocks - taken.n_blocks, n_arena_edges=n_new)


def new_rows_for(snap: Snapshot, gids: np.ndarray, num_owned: int) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """Rows of appended-node gids (``>= num_nodes``), allocating rows for unseen ones.

    Returns:
        ``(rows, new_gids, new_rows)``: the row of each gid and the updated sorted index.
    """
    uniq = np.unique(gids)
    at = np.searchsorted(snap.new_gids, uniq)
    known = at < len(snap.new_gids)
    known[known] = snap.new_gids[at[known]] == uniq[known]
    fresh = uniq[~known]
    new_gids, new_rows = snap.new_gids, snap.new_rows
    if len(fresh):
        first = max(num_owned, snap.num_rows)
        new_gids = np.concatenate([snap.new_gids, fresh])
        new_rows = np.concatenate([snap.new_rows, first + np.arange(len(fresh), dtype=np.int64)])
        order = np.argsort(new_gids, kind="stable")
        new_gids, new_rows = new_gids[order], new_rows[order]
    rows = new_rows[np.searchsorted(new_gids, gids)]
    return rows, new_gids, new_rows


def check_time_order(snap: Snapshot, rows: np.ndarray, dst: np.ndarray, t: np.ndarray) -> None:
    """Raises :class:`OutOfOrder` when a row's oldest edge of a sorted batch is older than its last stored one."""
    if not len(rows):
        return
    first = np.flatnonzero(np.r_[True, rows[1:] != rows[:-1]])  # each row's oldest edge in the batch
    last = last_times(snap, rows[first])
    bad = np.flatnonzero(t[first] < last)
    if len(bad):
        i = first[bad[0]]
        raise OutOfOrder(
            f"edge into node {int(dst[i])} at t={int(t[i])} is older than its last stored edge at t={int(last[bad[0]])}"
            f" ({len(bad)} node(s) out of order); appends must not go back in time per node"
        )


def rows_for_append(snap: Snapshot, lay: Layout, dst: np.ndarray) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """Rows of owned ``dst`` gids, new rows allocated for unseen appended ids (see :func:`new_rows_for`)."""
    rows = dst - lay.start
    new = dst >= lay.num_nodes
    new_gids, new_rows = snap.new_gids, snap.new_rows
    if new.any():
        rows[new], new_gids, new_rows = new_rows_for(snap, dst[new], lay.stop - lay.start)
    return rows, new_gids, new_rows


def rows_of(snap: Snapshot, lay: Layout, gids: np.ndarray) -> np.ndarray:
    """Rows of owned gids for reading; an appended id not seen yet gets a row with no edges."""
    rows = gids - lay.start
    new = gids >= lay.num_nodes
    if new.any():
        g = gids[new]
        at = np.minimum(np.searchsorted(snap.new_gids, g), max(len(snap.new_gids) - 1, 0))
        found = snap.new_gids[at] == g if len(snap.new_gids) else np.zeros(len(g), dtype=bool)
        rows[new] = np.where(found, snap.new_rows[at] if len(snap.new_rows) else 0, _NO_ROW)
    return rows


def initial_snapshot(base: Csr, layout: Layout) -> Snapshot:
    """The snapshot of a partition with nothing appended yet."""
    ts, empty = np.asarray(base.ts), np.empty(0, dtype=np.int64)
    return Snapshot(
        base=base,
        arena=empty_arena(base.feat.shape[1]),
        n_entries=0,
        n_blocks=0,
        n_arena_edges=0,
        num_rows=layout.stop - layout.start,
        new_gids=empty,
        new_rows=empty,
        seq=0,
        num_appended=0,
        min_t=int(ts.min()) if len(ts) else None,
        max_t=int(ts.max()) if len(ts) else None,
    )


def with_block(
    snap: Snapshot,
    rows: np.ndarray,
    new_gids: np.ndarray,
    new_rows: np.ndarray,
    src: np.ndarray,
    t: np.ndarray,
    eid: np.ndarray,
    feat: np.ndarray,
) -> Snapshot:
    """``snap`` with one more batch (sorted by row, then time) as a block: the next sequence number."""
    n = len(src)
    arena = add_block(snap, rows, src, t, eid, feat) if n else snap.arena
    m = int(np.count_nonzero(rows[1:] != rows[:-1])) + 1 if n else 0  # entries: rows are grouped
    lo = [x for x in (snap.min_t, int(t[0:n].min()) if n else None) if x is not None]
    hi = [x for x in (snap.max_t, int(t[0:n].max()) if n else None) if x is not None]
    return replace(
        snap,
        arena=arena,
        n_entries=snap.n_entries + m,
        n_blocks=snap.n_blocks + (1 if n else 0),
        n_arena_edges=snap.n_arena_edges + n,
        num_rows=max(snap.num_rows, int(new_rows.max()) + 1 if len(new_rows) else 0),
        new_gids=new_gids,
        new_rows=new_rows,
        seq=snap.seq + 1,
        num_appended=snap.num_appended + n,
        min_t=min(lo) if lo else None,
        max_t=max(hi) if hi else None,
    )
