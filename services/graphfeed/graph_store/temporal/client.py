"""The temporal graph across graph-stores (GNNFlow): appends and temporal sampling, routed by owner.

:class:`TemporalClient` works over a :class:`~graphfeed.graph_store.types.PartitionSet` (the
one way to reach graph-stores) and routes with the one ownership rule
(:func:`graphfeed.common.owners.owners`): an edge belongs to the owner of its ``dst``.

- :meth:`TemporalClient.append` splits a batch into one batch per owner (each keeps the
  caller's edge order), sends them in parallel and returns once every owner has acknowledged
  (durable). Each partition's batch has a deterministic id, ``<batch id>-<partition>``, and a
  call that fails with UNAVAILABLE or DEADLINE_EXCEEDED (a graph-store restarting, an ack lost
  on the way) is sent again with the SAME id (:func:`graphfeed.common.retry.retry_transient`)
  until ``retry_deadline_s``: the store applies a batch id once, so a retry never duplicates.
- :meth:`TemporalClient.sample` samples several hops TGAT-style: hop ``h + 1``'s roots are hop
  ``h``'s sampled neighbours at their edge times; each hop fans out like every other read
  (:func:`graphfeed.graph_store.fanout.fan_out_requests`) and is merged back into root order.

:class:`TemporalStoreView` gives a client the in-process store's one-partition API
(``append(batch_id, ...)`` / one-hop ``sample``), so the TGN loop runs over either.

A sample can read the graph **as it was** after earlier appends (``as_of``: per partition, the
``appended`` count of its ack; a partition missing from it shows its ingest edges only), so a
reader that keeps those counts sees exactly what was there then, e.g. the TGN loop's
"previous-batches" visibility in later epochs, when the stores already hold the whole stream.
"""

from __future__ import annotations

import itertools
import logging
import threading
import uuid
from collections.abc import Mapping, Sequence
from concurrent.futures import Future, ThreadPoolExecutor

import numpy as np

from graphfeed.common.errors import DeadlineExceeded, InvalidArgument, Unavailable
from graphfeed.common.limits import TEMPORAL_ROOTS_PER_CALL
from graphfeed.common.retry import retry_transient
from graphfeed.common.seeds import derive_seed
from graphfeed.graph_store.fanout import Chunk, fan_out_requests
from graphfeed.graph_store.temporal.requests import int_array
from graphfeed.graph_store.temporal.types import AppendAck, EdgeBatch, TemporalQuery, TemporalSample
from graphfeed.graph_store.types import PartitionSet

log = logging.getLogger(__name__)


def merge(num_roots: int, parts: Sequence[tuple[np.ndarray, TemporalSample]]) -> TemporalSample:
    """One sample in root order from per-request answers ``(root positions, answer)``."""
    if not parts:
        empty = np.empty(0, dtype=np.int64)
        return TemporalSample(np.zeros(num_roots + 1, dtype=np.int64), empty, empty, empty, None)
    pos = np.concatenate([p for p, _ in parts])
    counts = np.concatenate([np.diff(s.offsets) for _, s in parts])
    starts = np.concatenate([s.offsets[:-1] + base for (_, s), base in zip(parts, _bases(parts))])
    c = np.zeros(num_roots, dtype=np.int64)
    src_start = np.zeros(num_roots, dtype=np.int64)
    c[pos], src_start[pos] = counts, starts
    offsets = np.zeros(num_roots + 1, dtype=np.int64)
    np.cumsum(c, out=offsets[1:])
    idx = np.repeat(src_start - offsets[:-1], c) + np.arange(offsets[-1], dtype=np.int64)
    nbr, ts, eid = (np.concatenate([getattr(s, f) for _, s in parts])[idx] for f in ("nbr", "ts", "eid"))
    feats = [s.efeat for _, s in parts if s.efeat is not None]
    efeat = np.concatenate(feats)[idx] if len(feats) == len(parts) else None
    return TemporalSample(offsets, nbr, ts, eid, efeat)


def _rows(array: np.ndarray | None, positions: np.ndarray) -> np.ndarray | None:
    return None if array is None else array[positions]


def _bases(parts: Sequence[tuple[np.ndarray, TemporalSample]]) -> list[int]:
    sizes = [int(s.offsets[-1]) for _, s in parts]
    return [int(x) for x in np.cumsum([0, *sizes[:-1]])]


class TemporalClient:
    """Appends and temporal samples over every partition of a graph, routed by owner.

    Args:
        partitions: the graph's partition set (e.g.
            :class:`~graphfeed.graph_store.partitions.RemotePartitionSet`).
        client_id: prefix of this client's batch ids; a restarted writer that replays the same
            batches under the same id gets them acknowledged as duplicates (default: random).
        attempt_timeout_s: deadline of one append attempt (default 30 s).
        retry_deadline_s: how long an append keeps retrying one partition's batch (default 120 s).
        max_backoff_s: cap of the exponential backoff between retries (default 2 s).
        max_ids_per_request: most roots per SampleTemporal call (a larger share is split).
    """

    def __init__(
        self,
        partitions: PartitionSet,
        *,
        client_id: str | None = None,
        attempt_timeout_s: float = 30.0,
        retry_deadline_s: float = 120.0,
        max_backoff_s: float = 2.0,
        max_ids_per_request: int = TEMPORAL_ROOTS_PER_CALL,
    ) -> None:
        self.partitions = partitions
        self.client_id = client_id or uuid.uuid4().hex[:12]
        self.attempt_timeout_s, self.retry_deadline_s = attempt_timeout_s, retry_deadline_s
        self.max_backoff_s, self.max_ids_per_request = max_backoff_s, max_ids_per_request
        self.retries = 0  # append attempts sent again (all partitions, all calls)
        self._seq = itertools.count()
        self._lock = threading.Lock()
        # appends wait out their retries on these threads, one partition's batch each
        self._pool = ThreadPoolExecutor(max_workers=max(2, partitions.num_partitions), thread_name_prefix="append")

    @property
    def num_partitions(self) -> int:
        return self.partitions.num_partitions

    # -- appends -----------------------------------------------------------------------------

    def append(
        self,
        src: np.ndarray,
        dst: np.ndarray,
        t: np.ndarray,
        efeat: np.ndarray | None = None,
        undirected: bool = False,
        batch_id: str | None = None,
    ) -> dict[int, AppendAck]:
        """Appends edges ``src -> dst`` at times ``t``; returns once every owner has made its
        share durable (and visible to sampling).

        Args:
            src, dst, t: int [n] gids (``>= 0``) and timestamps; per ``dst`` not older than
                what is stored (the store refuses it: InvalidArgument ``OutOfOrder``).
            efeat: float32 [n, D] edge features, or None when the graph has none.
            undirected: also append ``dst -> src`` (all forward edges first, then the reverses).
            batch_id: this call's id (default ``<client id>-<seq>``, seq counting this client's
                calls); partition ``p``'s share is sent as ``<batch id>-<p>``.

        Returns:
            Each owner partition's ack (``duplicate`` when it had already applied the batch).

        Raises:
            InvalidArgument, FailedPrecondition, ResourceExhausted: from the owner (not retried).
            Unavailable, DeadlineExceeded: an owner still unreachable after ``retry_deadline_s``.
        """
        src, dst, t = (int_array(a, what) for a, what in ((src, "src"), (dst, "dst"), (t, "t")))
        if not len(src) == len(dst) == len(t) or (efeat is not None and len(efeat) != len(src)):
            raise InvalidArgument(
                f"src, dst, t and efeat must have the same length, got {len(src)}, {len(dst)}, {len(t)}"
            )
        if len(src) and min(src.min(), dst.min()) < 0:
            raise InvalidArgument("node ids must be >= 0")
        if undirected:
            src, dst, t = np.concatenate([src, dst]), np.concatenate([dst, src]), np.concatenate([t, t])
            efeat = None if efeat is None else np.concatenate([efeat, efeat])
        with self._lock:
            base = batch_id or f"{self.client_id}-{next(self._seq)}"

        def send(c: Chunk) -> Future[AppendAck]:  # one batch per owner: never split (its id is per partition)
            pos, p = c.positions, c.partition
            share = EdgeBatch(batch_id=f"{base}-{p}", src=src[pos], dst=dst[pos], t=t[pos], efeat=_rows(efeat, pos))
            return self._pool.submit(self._append_one, p, share)

        pending = fan_out_requests(self.partitions, dst, send, max_ids_per_request=max(1, len(dst)))
        return {p: ack for (p, _, _), ack in zip(pending.parts, pending.results())}

    def _append_one(self, p: int, batch: EdgeBatch) -> AppendAck:
        """One partition's batch, sent again with the same id while the store is unreachable."""

        def attempt(timeout_s: float) -> AppendAck:
            return self.partitions.append_edges(p, batch, timeout_s).result()

        def retrying(tries: int, exc: Unavailable | DeadlineExceeded, _wait: float) -> None:
            with self._lock:
                self.retries += 1
            if tries == 1:
                log.info(
                    "append %s to partition %d: %s; retrying with the same batch id", batch.batch_id, p, exc.code.name
                )

        return retry_transient(
            attempt,
            timeout_s=self.retry_deadline_s,
            attempt_timeout_s=self.attempt_timeout_s,
            initial_backoff_s=0.05,
            max_backoff_s=self.max_backoff_s,
            on_retry=retrying,
        )

    # -- sampling ----------------------------------------------------------------------------

    def sample(
        self,
        nodes: np.ndarray,
        times: np.ndarray,
        fanouts: Sequence[int],
        strategy: str = "recent",
        seed: int = 0,
        with_features: bool = True,
        as_of: Mapping[int, int] | None = None,
    ) -> list[TemporalSample]:
        """Samples ``len(fanouts)`` hops of temporal neighbours around ``(nodes, times)``.

        Hop 0's roots are the arguments; hop ``h + 1``'s roots are hop ``h``'s sampled ``nbr``
        at their edge times ``ts`` (an edge at exactly a root's time is never seen). Uniform
        draws are seeded by ``derive_seed(seed, hop, partition)`` and each root's position in
        its partition's share, so the same call always gives the same sample.

        Args:
            nodes, times: int [N] roots (gids >= 0) and their times.
            fanouts: edges per root per hop (-1: all before the time).
            strategy: ``"recent"`` or ``"uniform"``.
            seed: the uniform draws' seed (e.g. derived from job seed, epoch, step).
            with_features: also return the sampled edges' features (when the graph has some).
            as_of: the graph as it was: per partition, the ``appended`` count of an ack (the
                ingest edges and that many appended edges; 0 where missing). None: all of it.

        Returns:
            One :class:`TemporalSample` per hop, its roots in order (hop 0: ``nodes``).
        """
        roots, root_t = int_array(nodes, "nodes"), int_array(times, "times")
        if len(roots) != len(root_t):
            raise InvalidArgument(f"nodes and times must have the same length, got {len(roots)} and {len(root_t)}")
        if len(roots) and roots.min() < 0:
            raise InvalidArgument(f"nodes must be ids >= 0, got {int(roots.min())}")
        hops = []
        for hop, fanout in enumerate(fanouts):
            s = self._sample_hop(roots, root_t, int(fanout), strategy, derive_seed(seed, hop), with_features, as_of)
            hops.append(s)
            roots, root_t = s.nbr, s.ts
        return hops

    def _sample_hop(
        self,
        roots: np.ndarray,
        times: np.ndarray,
        fanout: int,
        strategy: str,
        seed: int,
        with_features: bool,
        as_of: Mapping[int, int] | None,
    ) -> TemporalSample:
        """One hop: every partition's requests started, then merged back into root order."""
        parts = self.partitions

        def call(c: Chunk) -> Future[TemporalSample]:
            query = TemporalQuery(
                nodes=c.ids,
                times=times[c.positions],
                fanout=fanout,
                strategy=strategy,
                seed=derive_seed(seed, c.partition),
                first_position=c.first_position,
                with_features=with_features,
                as_of_appended=None if as_of is None else as_of.get(c.partition, 0),
            )
            return parts.sample_temporal(c.partition, query)

        pending = fan_out_requests(parts, roots, call, self.max_ids_per_request)
        answers = pending.results()
        return merge(len(roots), [(pos, a) for (_, pos, _), a in zip(pending.parts, answers)])

    def close(self) -> None:
        """Stops the append threads and closes the partition set (calls in flight fail)."""
        self._pool.shutdown(wait=False, cancel_futures=True)
        self.partitions.close()


class TemporalStoreView:
    """A :class:`TemporalClient` with the one-partition API of
    :class:`~graphfeed.graph_store.temporal.store.TemporalStore` (``append(batch_id, ...)`` and a
    one-hop ``sample``), so code written against the in-process store runs over the wire.
    Partition ``p``'s share of a batch is sent as ``<batch_id>-<p>``. :meth:`version` names the
    graph as this view's appends have left it, for a later ``sample(..., as_of=...)``."""

    def __init__(self, client: TemporalClient) -> None:
        self.client = client
        self._appended: dict[int, int] = {}  # per partition, the largest ack.appended seen

    def append(
        self, batch_id: str, src: np.ndarray, dst: np.ndarray, t: np.ndarray, efeat: np.ndarray | None = None
    ) -> AppendAck:
        """Appends through the owners; the ack sums theirs (``duplicate`` when every owner says so)."""
        by_part = self.client.append(src, dst, t, efeat, batch_id=batch_id)
        for p, a in by_part.items():
            self._appended[p] = max(self._appended.get(p, 0), a.appended)
        acks = list(by_part.values())
        return AppendAck(
            min((a.first_eid for a in acks), default=0),
            sum(a.num_edges for a in acks),
            bool(acks) and all(a.duplicate for a in acks),
            max((a.visible_seq for a in acks), default=0),
            sum(a.appended for a in acks),
        )

    def version(self) -> dict[int, int]:
        """The graph as this view's acknowledged appends left it (per partition: edges appended)."""
        return dict(self._appended)

    def sample(
        self,
        nodes: np.ndarray,
        times: np.ndarray,
        fanout: int,
        strategy: str = "recent",
        seed: int = 0,
        first_position: int = 0,
        with_features: bool = True,
        as_of: Mapping[int, int] | None = None,
    ) -> TemporalSample:
        """One hop through the owners (``first_position`` is not used: see :meth:`TemporalClient.sample`)."""
        return self.client.sample(nodes, times, [fanout], strategy, seed, with_features, as_of)[0]
