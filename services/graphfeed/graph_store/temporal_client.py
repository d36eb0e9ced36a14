"""Routing client of the temporal graph (issue 16): appends and temporal sampling across graph-stores.

:class:`TemporalClient` talks to every graph-store of a graph and routes by owner as
``TEMPORAL_SPEC`` says: an edge belongs to the owner of its ``dst``; a node ``g < num_nodes``
is owned by the partition whose ``[node_offsets[p], node_offsets[p+1])`` holds it, a node that
arrived by append (``g >= num_nodes``) by ``g % P``.

- :meth:`TemporalClient.append` splits a batch into one batch per owner (each keeps the
  caller's edge order), sends them in parallel and returns once every owner has acknowledged
  (durable). Each partition's batch has a deterministic id, ``<client id>-<seq>-<partition>``,
  and a call that fails with UNAVAILABLE or DEADLINE_EXCEEDED (a graph-store restarting, an ack
  lost on the way) is sent again with the SAME id, with capped exponential backoff, until
  ``retry_deadline_s``: the store applies a batch id once, so a retry never duplicates edges.
- :meth:`TemporalClient.sample` samples several hops TGAT-style: hop ``h + 1``'s roots are hop
  ``h``'s sampled neighbours at their edge times; each hop's roots are grouped by owner and
  every partition's request is started before any is waited on
  (:class:`~graphfeed.graph_store.fanout.Pending`), then merged back into root order.

:class:`RemoteNeighbors` is the TGN loop's ``NeighborSource`` over a :class:`TemporalClient`;
:class:`TemporalStoreView` gives a client the in-process store's ``append(batch_id, ...)`` / ``sample``.
"""

from __future__ import annotations

import itertools
import logging
import threading
import time
import uuid
from collections.abc import Sequence
from concurrent.futures import Future, ThreadPoolExecutor

import numpy as np

from graphfeed.common.errors import DeadlineExceeded, FailedPrecondition, InvalidArgument, Unavailable
from graphfeed.common.limits import TEMPORAL_ROOTS_PER_CALL
from graphfeed.common.seeds import derive_seed
from graphfeed.graph_store.client import GraphStoreClient, expand_addresses
from graphfeed.graph_store.fanout import Pending
from graphfeed.graph_store.temporal import AppendAck, TemporalSample
from graphfeed.graph_store.temporal_index import int_array

log = logging.getLogger(__name__)

RETRIED = (Unavailable, DeadlineExceeded)  # the call may not have reached the store, or its ack was lost


def owners(gids: np.ndarray, node_offsets: np.ndarray) -> np.ndarray:
    """Owner partition of each gid (``TEMPORAL_SPEC``); gids must be ``>= 0``."""
    num_nodes, parts = int(node_offsets[-1]), len(node_offsets) - 1
    by_range = np.searchsorted(node_offsets, gids, side="right") - 1
    return np.where(gids < num_nodes, by_range, gids % parts).astype(np.int64)


def group(owner: np.ndarray, num_partitions: int) -> list[np.ndarray]:
    """Positions (ascending) of each partition's share."""
    order = np.argsort(owner, kind="stable")
    bounds = np.searchsorted(owner[order], np.arange(num_partitions + 1))
    return [order[bounds[p] : bounds[p + 1]] for p in range(num_partitions)]


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


def _bases(parts: Sequence[tuple[np.ndarray, TemporalSample]]) -> list[int]:
    sizes = [int(s.offsets[-1]) for _, s in parts]
    return [int(x) for x in np.cumsum([0, *sizes[:-1]])]


class TemporalClient:
    """Appends and temporal samples over every graph-store of a graph, routed by owner.

    Args:
        addresses: ``host:port`` of each graph-store, any order (one per partition).
        client_id: prefix of this client's batch ids; a restarted writer that replays the same
            batches under the same id gets them acknowledged as duplicates (default: random).
        timeout_s: deadline of each call (one attempt).
        retry_deadline_s: how long an append keeps retrying one partition's batch (default 120 s).
        max_backoff_s: cap of the exponential backoff between retries (default 2 s).
        max_ids_per_request: most roots per SampleTemporal call (a larger share is split).
        shm_dir: shared-memory directory offered to same-host graph-stores ("" or None: never).
    """

    def __init__(
        self,
        addresses: Sequence[str],
        *,
        client_id: str | None = None,
        timeout_s: float = 30.0,
        retry_deadline_s: float = 120.0,
        max_backoff_s: float = 2.0,
        max_ids_per_request: int = TEMPORAL_ROOTS_PER_CALL,
        shm_dir: str | None = None,
    ) -> None:
        addresses = expand_addresses(addresses, timeout_s)  # one graph-store-{p}... template is fine too
        clients = [GraphStoreClient(a, timeout_s, shm_dir) for a in addresses]
        infos = [c.info() for c in clients]
        n = infos[0].num_partitions
        by_id = {i.partition_id: c for i, c in zip(infos, clients)}
        if sorted(by_id) != list(range(n)) or len(clients) != n:
            raise FailedPrecondition(
                f"need one graph-store per partition 0..{n - 1}, got {sorted(by_id)} at {list(addresses)}"
            )
        if any(not np.array_equal(i.node_offsets, infos[0].node_offsets) for i in infos):
            raise FailedPrecondition(f"graph-stores at {list(addresses)} serve different graphs")
        self.clients = [by_id[p] for p in range(n)]
        self.node_offsets = infos[0].node_offsets
        self.client_id = client_id or uuid.uuid4().hex[:12]
        self.retry_deadline_s, self.max_backoff_s, self.max_ids_per_request = (
            retry_deadline_s,
            max_backoff_s,
            max_ids_per_request,
        )
        self.retries = 0  # append attempts sent again (all partitions, all calls)
        self._seq = itertools.count()
        self._lock = threading.Lock()
        self._pool = ThreadPoolExecutor(max_workers=max(2, n), thread_name_prefix="temporal-append")

    @property
    def num_partitions(self) -> int:
        return len(self.clients)

    def owners(self, gids: np.ndarray) -> np.ndarray:
        """Owner partition of each gid (>= 0)."""
        return owners(np.asarray(gids, dtype=np.int64), self.node_offsets)

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
        shares = group(self.owners(dst), self.num_partitions)
        futures = {
            p: self._pool.submit(
                self._append_one, p, f"{base}-{p}", src[pos], dst[pos], t[pos], None if efeat is None else efeat[pos]
            )
            for p, pos in enumerate(shares)
            if len(pos)
        }
        return {p: f.result() for p, f in futures.items()}

    def _append_one(
        self, p: int, batch_id: str, src: np.ndarray, dst: np.ndarray, t: np.ndarray, efeat: np.ndarray | None
    ) -> AppendAck:
        """One partition's batch, sent again with the same id while the store is unreachable."""
        deadline = time.monotonic() + self.retry_deadline_s
        for attempt in itertools.count():
            try:
                return self.clients[p].append_edges(batch_id, src, dst, t, efeat)
            except RETRIED as exc:
                left = deadline - time.monotonic()
                if left <= 0:
                    raise
                with self._lock:
                    self.retries += 1
                if attempt == 0:
                    log.info(
                        "append %s to partition %d: %s; retrying with the same batch id",
                        batch_id,
                        p,
                        type(exc).__name__,
                    )
                time.sleep(min(self.max_backoff_s, 0.05 * 2**attempt, left))  # backoff, not synchronisation
        raise AssertionError("unreachable")  # pragma: no cover - the loop only returns or raises

    # -- sampling ----------------------------------------------------------------------------

    def sample(
        self,
        nodes: np.ndarray,
        times: np.ndarray,
        fanouts: Sequence[int],
        strategy: str = "recent",
        seed: int = 0,
        with_features: bool = True,
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
            s = self._sample_hop(roots, root_t, int(fanout), strategy, derive_seed(seed, hop), with_features)
            hops.append(s)
            roots, root_t = s.nbr, s.ts
        return hops

    def _sample_hop(
        self, roots: np.ndarray, times: np.ndarray, fanout: int, strategy: str, seed: int, with_features: bool
    ) -> TemporalSample:
        """One hop: every partition's requests started, then merged back into root order."""
        pending: Pending[TemporalSample] = Pending(len(roots), [])
        try:
            for p, share in enumerate(group(self.owners(roots), self.num_partitions)):
                for lo in range(0, len(share), self.max_ids_per_request):
                    pos = share[lo : lo + self.max_ids_per_request]
                    fut: Future[TemporalSample] = self.clients[p].sample_temporal_future(
                        roots[pos], times[pos], fanout, strategy, derive_seed(seed, p), lo, with_features
                    )
                    pending.parts.append((p, pos, fut))
        except BaseException:
            pending.cancel()
            raise
        answers = pending.results()
        return merge(len(roots), [(pos, a) for (_, pos, _), a in zip(pending.parts, answers)])

    def close(self) -> None:
        """Closes the channels (calls in flight fail)."""
        self._pool.shutdown(wait=False, cancel_futures=True)
        for c in self.clients:
            c.close()


class RemoteNeighbors:
    """The TGN loop's ``NeighborSource`` over graph-stores: each event stored in both directions,
    the ``fanout`` most recent in-neighbours before each root's time, with edge features.

    Batch ids come from the client's id and its call count, so a job that restarts with the
    same ``client_id`` and replays its appends from the start gets them acknowledged as
    duplicates (nothing stored twice).
    """

    def __init__(self, client: TemporalClient) -> None:
        self.client = client

    def append(self, src: np.ndarray, dst: np.ndarray, t: np.ndarray, efeat: np.ndarray | None) -> None:
        """Stores ``src -> dst`` then ``dst -> src`` for every event (durable on return)."""
        self.client.append(src, dst, t, efeat, undirected=True)

    def sample(self, nodes: np.ndarray, times: np.ndarray, fanout: int) -> TemporalSample:
        """One hop, strategy "recent"."""
        return self.client.sample(nodes, times, [fanout], "recent", with_features=True)[0]


class TemporalStoreView:
    """A :class:`TemporalClient` with the one-partition API of
    :class:`~graphfeed.graph_store.temporal.TemporalStore` (``append(batch_id, ...)`` and a
    one-hop ``sample``), so code written against the in-process store runs over the wire.
    Partition ``p``'s share of a batch is sent as ``<batch_id>-<p>``."""

    def __init__(self, client: TemporalClient) -> None:
        self.client = client

    def append(
        self, batch_id: str, src: np.ndarray, dst: np.ndarray, t: np.ndarray, efeat: np.ndarray | None = None
    ) -> AppendAck:
        """Appends through the owners; the ack sums theirs (``duplicate`` when every owner says so)."""
        acks = list(self.client.append(src, dst, t, efeat, batch_id=batch_id).values())
        first = min((a.first_eid for a in acks), default=0)
        return AppendAck(
            first,
            sum(a.num_edges for a in acks),
            bool(acks) and all(a.duplicate for a in acks),
            max((a.visible_seq for a in acks), default=0),
        )

    def sample(
        self,
        nodes: np.ndarray,
        times: np.ndarray,
        fanout: int,
        strategy: str = "recent",
        seed: int = 0,
        first_position: int = 0,
        with_features: bool = True,
    ) -> TemporalSample:
        """One hop through the owners (``first_position`` is not used: see :meth:`TemporalClient.sample`)."""
        return self.client.sample(nodes, times, [fanout], strategy, seed, with_features)[0]
