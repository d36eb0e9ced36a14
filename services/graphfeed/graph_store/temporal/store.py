"""One partition's temporal graph (:class:`TemporalStore`): durable edge appends and temporal
sampling, without gRPC.

:class:`TemporalStore` validates every request and keeps the idempotence table (batch id ->
ack). An append runs in two phases. Under the append lock (the order of batches): answer a
retry from the table, or sort the batch by ``(dst, t)``, check time order per row, write it to
the RocksDB WAL (not yet synced) and add its block to the *latest* snapshot. Then, without the
lock: fsync the WAL (``flush_wal``, GIL released; concurrent appenders share one fsync, i.e.
group commit) and *publish* the latest snapshot (one reference assignment, the only thing
samples read), then acknowledge. So an acknowledged batch is durable and visible, a sample
never sees a batch that is not durable, and never half of one: samples take no lock and read
whichever published snapshot is current when they start.
Compaction runs beside the appends: crossing a threshold wakes the compactor thread, which
merges the snapshot of that moment without the lock, then (under it) moves the blocks appended
meanwhile onto the merged base and publishes that; an append waits only when 4x the threshold
piles up during one merge. After a merge it may persist the merged graph and truncate the log.
Rows, edge ids and the ownership rule are those of ``TEMPORAL_SPEC``: appended edges get
``eid = (1 << 62) | (partition << 40) | seq``; a node ``g >= num_nodes`` belongs to ``g % P``.
"""

from __future__ import annotations

import logging
import threading
from pathlib import Path

import numpy as np

from graphfeed.common import limits
from graphfeed.common.errors import FailedPrecondition, ResourceExhausted
from graphfeed.common.partition import PartitionReader
from graphfeed.graph_store.temporal import index as ti
from graphfeed.graph_store.temporal import requests
from graphfeed.graph_store.temporal import snapshot as temporal_snapshot
from graphfeed.graph_store.temporal.append_log import LoggedAck, LoggedBatch, TemporalLog, content_digest
from graphfeed.graph_store.temporal.compactor import Compactor
from graphfeed.graph_store.temporal.recovery import log_layout, partition_base, recover
from graphfeed.graph_store.temporal.sampling import gather_features, sample_snapshot
from graphfeed.graph_store.temporal.types import AppendAck, OutOfOrder, TemporalInfo, TemporalQuery, TemporalSample

__all__ = ["AppendAck", "OutOfOrder", "TemporalInfo", "TemporalSample", "TemporalStore"]

log = logging.getLogger(__name__)


class TemporalStore:
    """Temporal adjacency of one partition: appends (durable, idempotent) and temporal sampling.

    Build it with :meth:`open`. Thread-safe: appends are staged one at a time under a lock and
    fsync'd together; samples run concurrently with them (and with each other, GIL released).
    With a log, a background thread compacts (O(all edges), the thresholds keep it amortized
    O(1) per edge) without holding the append lock; appends wait for it only when
    ``4 * max_blocks`` blocks (or 4x the edge threshold) pile up during one merge. After a
    merge, once ``max(snapshot_min_edges, E / 4)`` edges were appended since the last snapshot
    (of ``E`` appended edges), the merged graph's appended edges are persisted in
    ``<log_dir>/snapshots`` and the log's batches they cover are deleted; :meth:`open` loads the
    newest valid snapshot onto the ingest base and replays only later batches.

    Args:
        base: the partition's time-sorted CSR (see :func:`~graphfeed.graph_store.temporal.index.time_sorted_base`).
        layout: what the partition owns.
        append_log: the durable log, or None for a read-only store (appends refused).
        max_append_edges: most edges in one batch (default 1,000,000).
        max_ids_per_request: most roots in one sample call (default 4,000,000).
        max_fanout: largest fanout besides -1 (default 1000).
        max_blocks: compact when this many blocks are pending (default 256).
        compact_min_edges: also compact when the blocks hold more edges than
            ``max(compact_min_edges, base edges)`` (default 1,000,000): amortized O(1) per edge.
        snapshot_min_edges: see above (default 0: no snapshots, the log keeps every batch).
    """

    def __init__(
        self,
        base: ti.Csr,
        layout: ti.Layout,
        append_log: TemporalLog | None,
        *,
        max_append_edges: int = limits.MAX_APPEND_EDGES_PER_REQUEST,
        max_ids_per_request: int = limits.GRAPH_STORE_MAX_IDS_PER_REQUEST,
        max_fanout: int = limits.MAX_FANOUT,
        max_answer_bytes: int = limits.MAX_ANSWER_BYTES,
        max_blocks: int = 256,
        compact_min_edges: int = 1_000_000,
        snapshot_min_edges: int = 0,
    ) -> None:
        self.layout = layout
        self.max_append_edges, self.max_ids_per_request = max_append_edges, max_ids_per_request
        self.max_fanout, self.max_blocks = max_fanout, max_blocks
        self.max_answer_bytes = max_answer_bytes
        self.compact_min_edges, self.snapshot_min_edges = compact_min_edges, snapshot_min_edges
        self._log = append_log
        self._lock = threading.Lock()  # orders appends: staging, the log's WAL, the blocks
        self._publish_lock = threading.Lock()
        self._cond = threading.Condition(self._lock)  # appends in flight, the compactor's state
        self._compactor: Compactor | None = None  # started after replay (which compacts in line)
        self._snapshot_at = 0  # num_appended of the newest snapshot on disk
        self._compactions = 0  # background rounds published
        self._inflight = 0
        self._closed = False
        self._broken: str | None = None  # why the log failed: appends are refused until reopened
        self._latest = ti.initial_snapshot(base, layout)
        if append_log is not None:
            self._latest, self._snapshot_at = recover(append_log, self._latest, self._replay_one)
            self._compactor = Compactor(self._cond, self._compact_round, f"temporal-compactor-{layout.partition_id}")
        self._snap = self._latest  # what samples read: only batches whose WAL is synced

    @classmethod
    def open(
        cls,
        reader_or_part_dir: PartitionReader | Path | str,
        log_dir: Path | None,
        *,
        num_partitions: int | None = None,
        partition_id: int | None = None,
        **limits: int,
    ) -> TemporalStore:
        """Opens the temporal graph of a partition.

        Args:
            reader_or_part_dir: an opened :class:`PartitionReader` (only its memory-mapped topology
                is used; its RocksDB handle may be closed) or a partition directory. Ingest-time
                edges without ``edge_ts.npy`` count as edges at ``t = 0``.
            log_dir: the append log (RocksDB, created if missing); None: appends are refused.
            num_partitions, partition_id: checked against the partition's manifest when given.
            limits: ``max_append_edges``, ``max_ids_per_request``, ``max_fanout``, ``max_answer_bytes``, ``max_blocks``,
                ``compact_min_edges``, ``snapshot_min_edges`` (see the class).

        Raises:
            FailedPrecondition: layout mismatch, or a log written for another layout.
        """
        base, layout = partition_base(reader_or_part_dir, num_partitions, partition_id)
        append_log = None if log_dir is None else TemporalLog(Path(log_dir), log_layout(layout, base))
        return cls(base, layout, append_log, **limits)

    # -- appends -------------------------------------------------------------------------

    def append(
        self, batch_id: str, src: np.ndarray, dst: np.ndarray, t: np.ndarray, efeat: np.ndarray | None = None
    ) -> AppendAck:
        """Appends a batch of edges ``src -> dst`` at times ``t``; durable before it returns.

        Args:
            batch_id: the client's id for this batch (non-empty, <= 256 characters); a retry
                with the same id and content gets the first ack back with ``duplicate=True``.
            src, dst: int [n] gids, ``>= 0``; every ``dst`` owned by this partition.
            t: int [n] timestamps; per ``dst`` not older than its last stored edge (the
                batch itself need not be sorted: it is stored sorted by ``(dst, t)``, stably).
            efeat: float [n, D] edge features (D = :attr:`edge_feat_dim`); None when D == 0.

        Raises:
            InvalidArgument: bad dtype/shape/length, negative ids; :class:`OutOfOrder`.
            ResourceExhausted: more than ``max_append_edges`` edges.
            NotFound: a dst not owned here. FailedPrecondition: the id reused with other content; no log.
        """
        self._writable_log()
        src, dst, t, feat = requests.check_batch(
            self.layout, self.edge_feat_dim, self.max_append_edges, batch_id, src, dst, t, efeat
        )
        digest = content_digest(src, dst, t, feat)
        with self._lock:
            self._check_open()
            done = self._writable_log().ack(batch_id)
            if done is None and self._backlogged():
                self._cond.wait_for(lambda: not self._backlogged())  # back-pressure: the lock is released meanwhile
                self._check_open()
                done = self._writable_log().ack(batch_id)  # another appender may have staged this id meanwhile
            fresh = done is None
            if done is None:
                done = self._stage(batch_id, digest, src, dst, t, feat)
            target = self._latest
            self._inflight += 1
        try:
            if done.digest != digest:
                raise FailedPrecondition(f"batch id {batch_id!r} was already acknowledged with different edges")
            self._sync_and_publish(target)  # a retry of a batch still in flight waits for its sync too
        finally:
            with self._lock:
                self._inflight -= 1
                self._cond.notify_all()
        appended = done.first_eid - self._eid(0) + done.num_edges
        return AppendAck(done.first_eid, done.num_edges, not fresh, done.visible_seq, appended)

    def _stage(
        self, batch_id: str, digest: str, src: np.ndarray, dst: np.ndarray, t: np.ndarray, feat: np.ndarray
    ) -> LoggedAck:
        """Sorts, checks and writes one batch to the WAL (not yet synced) and to the blocks (lock held)."""
        order = np.lexsort((t, dst))  # stable: equal (dst, t) keep arrival order
        src, dst, t, feat = src[order], dst[order], t[order], feat[order]
        snap = self._latest
        rows, new_gids, new_rows = ti.rows_for_append(snap, self.layout, dst)
        ti.check_time_order(snap, rows, dst, t)
        first_seq = snap.num_appended
        ack = LoggedAck(digest, self._eid(first_seq), len(src), snap.seq + 1)
        self._writable_log().write(batch_id, ack, first_seq, src, dst, t, feat)
        self._apply(snap, rows, new_gids, new_rows, src, t, feat)
        return ack

    def _sync_and_publish(self, target: ti.Snapshot) -> None:
        """Makes every batch of ``target`` durable, then lets samples see it (lock not held).

        Concurrent appenders sync at once and RocksDB groups them into one fsync (group
        commit); ``target`` holds only batches written to the WAL before this sync began.
        """
        if self._log is not None and target.seq > self._snap.seq:
            try:
                self._log.sync()
            except Exception as exc:
                self._broken = f"the append log failed ({exc}); reopen the store"
                raise FailedPrecondition(self._broken) from exc
        with self._publish_lock:
            now = self._snap
            if target.seq > now.seq or (
                target.seq == now.seq and target.n_blocks < now.n_blocks
            ):  # newer, or compacted
                self._snap = target

    def _eid(self, seq: int) -> int:
        return (1 << 62) | (self.layout.partition_id << 40) | seq

    def _apply(
        self,
        snap: ti.Snapshot,
        rows: np.ndarray,
        new_gids: np.ndarray,
        new_rows: np.ndarray,
        src: np.ndarray,
        t: np.ndarray,
        feat: np.ndarray,
    ) -> None:
        """Adds one sorted batch as a block to the latest (unpublished) snapshot (lock held)."""
        eid = self._eid(snap.num_appended) + np.arange(len(src), dtype=np.int64)
        self._latest = ti.with_block(snap, rows, new_gids, new_rows, src, t, eid, feat)
        if self._over(self._latest, 1):
            if self._compactor is None:
                self._latest = ti.compact(self._latest)  # replay at open: nobody waits for an ack
            else:
                self._compactor.wake()

    def _over(self, s: ti.Snapshot, factor: int) -> bool:
        """``factor`` times the compaction threshold is reached (1: compact now; 4: appends wait)."""
        return s.n_blocks >= factor * self.max_blocks or s.n_arena_edges >= factor * max(
            self.compact_min_edges, len(s.base.ts)
        )

    def _backlogged(self) -> bool:
        c = self._compactor
        return c is not None and c.busy and not self._closed and self._over(self._latest, 4)

    def _compact_round(self) -> None:
        """One background compaction (compactor thread): merges without the lock, publishes under it."""
        with self._lock:
            taken = self._latest
            if self._closed or not taken.n_blocks:
                return
        compacted = ti.compact(taken)  # O(all edges), appends go on meanwhile
        with self._lock:
            latest = self._latest
            if self._closed or latest.base is not taken.base:  # closing, or compact() merged first
                return
            self._latest = merged = ti.carry_over(compacted, taken, latest)
            self._compactions += 1
            if self._over(merged, 1) and self._compactor is not None:
                self._compactor.wake()
        self._sync_and_publish(merged)  # after it, every batch of merged (so of compacted) is durable
        due = max(
            self.snapshot_min_edges, self._snapshot_at // 4
        )  # a snapshot writes every appended edge: amortized O(1)
        if self.snapshot_min_edges and self._log is not None and compacted.num_appended - self._snapshot_at >= due:
            path = temporal_snapshot.persist(
                self._log.path / "snapshots", compacted, self._log.layout, self._log.drop_batches
            )
            self._snapshot_at = compacted.num_appended
            log.info(
                "partition %d: snapshot %s (%d edges); the log keeps the batches after %d",
                self.layout.partition_id,
                path,
                compacted.num_edges,
                compacted.seq,
            )

    def _replay_one(self, snap: ti.Snapshot, batch: LoggedBatch) -> ti.Snapshot:
        """Applies one logged batch at open (what :func:`recover` calls for each)."""
        rows, new_gids, new_rows = ti.rows_for_append(snap, self.layout, batch.dst)
        self._apply(snap, rows, new_gids, new_rows, batch.src, batch.t, batch.efeat)
        return self._latest

    # -- sampling --------------------------------------------------------------------------

    def sample(
        self,
        nodes: np.ndarray,
        times: np.ndarray,
        fanout: int,
        strategy: str = "recent",
        seed: int = 0,
        first_position: int = 0,
        with_features: bool = True,
        as_of_appended: int | None = None,
    ) -> TemporalSample:
        """Samples each root's in-neighbours strictly before its time (``TEMPORAL_SPEC``).

        Args:
            nodes: int [N] owned gids (an owned node with no edge yet gets none).
            times: int [N] root times; an edge at exactly ``times[i]`` is not seen.
            fanout: ``-1`` for every edge before the time, else ``[0, max_fanout]``.
            strategy: ``"recent"`` (the last ``fanout`` edges) or ``"uniform"`` (``fanout``
                distinct edges drawn as ``sample_csr`` draws on the truncated row).
            seed: uint64 seed of the uniform draws; ``first_position``: batch position of ``nodes[0]``.
            with_features: gather the sampled edges' feature rows (when ``edge_feat_dim > 0``).
            as_of_appended: the graph as it was after an append (its ack's ``appended``): the
                ingest edges and the first ``as_of_appended`` appended edges only; None: all.

        Raises:
            InvalidArgument: bad shapes/dtypes, negative ids, bad fanout/strategy/seed.
            ResourceExhausted: more than ``max_ids_per_request`` roots.
            NotFound: a node not owned by this partition (up to 5 named).
        """
        self._check_open()
        gids, times = requests.check_sample(nodes, times, fanout, strategy, seed, first_position, self.max_fanout)
        if len(gids) > self.max_ids_per_request:
            raise ResourceExhausted(
                f"{len(gids)} roots exceed the limit of {self.max_ids_per_request}; split the request"
            )
        requests.check_owned(self.layout, gids, "nodes")
        snap = self._snap  # one read: the whole call sees this snapshot
        want = with_features and self.edge_feat_dim > 0
        offsets, nbr, ts, eid, pos = sample_snapshot(
            snap,
            ti.rows_of(snap, self.layout, gids),
            times,
            int(fanout),
            strategy == "recent",
            int(seed),
            int(first_position),
            want,
            max_edges=requests.max_answer_edges(self.max_answer_bytes, self.edge_feat_dim if want else None),
            max_eid=-1 if as_of_appended is None else self._eid(requests.as_of(as_of_appended)),
        )
        return TemporalSample(offsets, nbr, ts, eid, gather_features(snap, pos) if pos is not None else None)

    def sample_query(self, q: TemporalQuery) -> TemporalSample:
        """:meth:`sample` with the arguments of one query record."""
        args = (q.nodes, q.times, q.fanout, q.strategy, q.seed, q.first_position, q.with_features, q.as_of_appended)
        return self.sample(*args)

    # -- state ---------------------------------------------------------------------------

    @property
    def edge_feat_dim(self) -> int:
        """Width ``D`` of the edge features (0: none)."""
        return int(self._snap.base.feat.shape[1])

    def info(self) -> TemporalInfo:
        """Sizes and sequence numbers (of the current snapshot)."""
        s = self._snap
        log_bytes = self._log.bytes_written if self._log is not None else 0
        sizes = (s.num_edges, s.num_appended, s.num_rows, s.n_blocks, s.min_t, s.max_t, self.edge_feat_dim, s.seq)
        return TemporalInfo(*sizes, log_bytes, self._compactions)

    def compact(self) -> None:
        """Merges the pending blocks into the base CSR now (samples are unchanged by it)."""
        with self._lock:
            self._check_open()
            if self._latest.n_blocks:
                self._latest = ti.compact(self._latest)
            target = self._latest
        self._sync_and_publish(target)

    def close(self) -> None:
        """Stops the compactor (a running round finishes), closes the append log. Idempotent."""
        with self._lock:
            self._closed = True
            self._cond.notify_all()  # appends waiting for room give up
        if self._compactor is not None:
            self._compactor.stop()
        with self._lock:
            self._cond.wait_for(lambda: self._inflight == 0)  # appends already staged finish their sync
            if self._log is not None:
                self._log.close()

    def _writable_log(self) -> TemporalLog:
        self._check_open()
        if self._log is None:
            raise FailedPrecondition(
                f"partition {self.layout.partition_id} serves no appends (no append log configured)"
            )
        return self._log

    def _check_open(self) -> None:
        if self._closed:
            raise FailedPrecondition(f"temporal store of partition {self.layout.partition_id} is closed")
        if self._broken is not None:
            raise FailedPrecondition(self._broken)
        if self._compactor is not None and self._compactor.error is not None:
            raise FailedPrecondition(f"background compaction failed ({self._compactor.error}); reopen the store")
