"""Bulk bytes on the wire or shared memory, decided per call on both sides of an RPC.

A client that can share a directory with its server (same host, same mount) sends an offer in
the call's metadata (:class:`ClientTransport`); a server that verifies it
(:class:`ServerTransport`) puts the response's bulk tensors in one shared-memory segment per
message and sends only references. Everything else — another host, another pod without a
shared volume, ``shm_dir=""`` on either side — sends the tensors as the message's bulk bytes
(:mod:`graphfeed.common.bulk`: raw bytes beside the protobuf control part, copied once on each
side) in the same message types, so correctness never depends on the fast path.

A servicer never branches on it: it opens a :class:`Response` per message
(:meth:`ServerTransport.response`, or :meth:`StreamCall.response` within a stream), lets the
core write into :meth:`Response.empty` arrays and encodes the results with
:meth:`Response.encode`; the response decides, lays out, writes, unmaps and counts.
"""

from __future__ import annotations

import atexit
import threading
from pathlib import Path

import grpc
from prometheus_client import CollectorRegistry, Counter

from graphfeed.common.bulk import Fetch
from graphfeed.common.plane import OFFER_KEY as PLANE_OFFER_KEY
from graphfeed.common.plane import BulkPlane, PlaneClient, peer_host, plane_target
from graphfeed.common.response import Allocator, Response, StreamCall
from graphfeed.common.security import client_tls
from graphfeed.common.shm import (
    OfferVerifier,
    PeerSegments,
    SegmentPool,
    SegmentReader,
    SegmentRegistry,
    ShmQuota,
    shared_offer,
)

__all__ = ["Allocator", "ClientTransport", "Response", "ServerTransport", "StreamCall"]


class ServerTransport:
    """A server's side: which calls get shared memory, and the segments it has not seen claimed.

    Args:
        shm_dir: the one directory this server writes segments into ("" or None: never).
        service: the ``service`` label of the byte counter (e.g. "GraphStoreService").
        metrics: where ``graphfeed_rpc_response_shm_bytes_total`` is registered (None: not
            counted). With shared memory the wire carries only references, so this counter is
            the other half of the communication volume next to ``..._response_bytes_total``.
        ttl_s: seconds an unclaimed segment of a finished call survives before it is removed.
        plane: the server's bulk plane (:mod:`graphfeed.common.plane`): large inline answers to
            clients that offer to read from it go there (None: always inline). Closed with the transport.
        pool_files: handed-back segment files kept for reuse (see :class:`SegmentPool`).
        client_quota_bytes: unclaimed bytes one client may hold in ``shm_dir`` before its
            responses go inline (0: a quarter of the directory; see :class:`ShmQuota`).
    """

    def __init__(
        self,
        shm_dir: str | Path | None,
        service: str = "",
        metrics: CollectorRegistry | None = None,
        ttl_s: float = 300.0,
        pool_files: int = 16,
        client_quota_bytes: int = 0,
        plane: BulkPlane | None = None,
    ) -> None:
        self.shm_dir = Path(shm_dir) if shm_dir else None
        self.plane = plane
        self.pool_files = pool_files
        self.service = service
        self.registry = SegmentRegistry(ttl_s)
        self._pools: dict[Path, SegmentPool] = {}
        self._pools_lock = threading.Lock()
        self.peers = PeerSegments()  # callers' own segments this server writes into, mapped once per file
        self._bytes = self._declined = self._plane_bytes = None
        if metrics is not None:
            self._plane_bytes = Counter(
                "graphfeed_rpc_response_plane_bytes_total",
                "Response bulk bytes sent through the bulk plane (a TCP stream beside gRPC) instead of in the "
                "gRPC message; graphfeed_rpc_response_bytes_total counts them too.",
                ("service", "method"),
                registry=metrics,
            )
            self._bytes = Counter(
                "graphfeed_rpc_response_shm_bytes_total",
                "Response tensor bytes sent through shared memory (not on the wire), by RPC.",
                ("service", "method"),
                registry=metrics,
            )
            self._declined = Counter(
                "graphfeed_rpc_shm_declined_total",
                "Responses and minibatches sent inline although their client offered shared memory: "
                "reason quota (the client held its quota unclaimed) or full (the directory was nearly full).",
                ("service", "reason"),
                registry=metrics,
            )
        self.quota: ShmQuota | None = None
        try:
            if self.shm_dir is not None:
                self.quota = ShmQuota(self.shm_dir, self.registry, client_quota_bytes, on_decline=self.declined)
        except OSError:
            self.shm_dir = None  # no such directory here: no offer could check out anyway
        self._verifier = OfferVerifier([self.shm_dir.resolve()] if self.shm_dir else [])
        atexit.register(self.close)  # a graceful exit leaves nothing behind in shm_dir

    def accept(self, context: grpc.ServicerContext) -> tuple[Path | None, str]:
        """``(directory, client)`` for a call: the shared directory when the caller's offer
        checks out (else None) and the offer's client name (see :class:`ShmQuota`)."""
        if self.shm_dir is None:
            return None, ""
        verified = self._verifier.verify(context.invocation_metadata())
        return verified if verified is not None else (None, "")

    def response(self, context: grpc.ServicerContext, method: str) -> Response:
        """The tensors of one response message of ``method`` (a unary call's answer): in
        shared memory when the caller's offer checks out and its client is within its quota,
        else inline (decided here, once; a segment the directory has no room for after all
        makes the rest of the response inline)."""
        directory, client = self.accept(context)
        if directory is not None and self.quota is not None and self.quota.decline(client) is not None:
            directory = None
        plane, peer = self.plane_of(context)
        return Response(self, method, directory, client=client, plane=plane, peer=peer)

    def plane_of(self, context: grpc.ServicerContext) -> tuple[BulkPlane | None, str]:
        """The bulk plane for a call whose client offered to read from it, and the client's host
        (its share of the plane); ``(None, "")`` otherwise. A client that needs the server's
        address in its tickets (offer "host") gets the plane only if it has one to give (``bulk_host``)."""
        if self.plane is None:
            return None, ""
        offers = [v for k, v in context.invocation_metadata() or () if k == PLANE_OFFER_KEY]
        if not offers or (offers[0] == "host" and not self.plane.advertise):
            return None, ""
        return self.plane, peer_host(context.peer() or "")

    def count_plane(self, method: str, nbytes: int) -> None:
        """Adds ``nbytes`` sent through the bulk plane by ``method`` to its counter."""
        if self._plane_bytes is not None:
            self._plane_bytes.labels(self.service, method).inc(nbytes)

    def declined(self, reason: str) -> None:
        """Counts one response or minibatch sent inline for ``reason`` although shared memory was offered."""
        if self._declined is not None:
            self._declined.labels(self.service, reason).inc()

    def stream(self, context: grpc.ServicerContext, method: str) -> StreamCall:
        """One server-streaming call of ``method``: shared memory or inline, decided here for
        every message; its segments belong to the call (see :class:`StreamCall`)."""
        return StreamCall(self, context, method)

    def pool(self, directory: Path) -> SegmentPool:
        """The server's reusable segment files in ``directory`` (shared by its calls, closed
        with the transport). Every response segment comes from it."""
        with self._pools_lock:
            key = Path(directory)
            if key not in self._pools:
                self._pools[key] = SegmentPool(key, self.pool_files)
            return self._pools[key]

    def count(self, method: str, nbytes: int) -> None:
        """Adds ``nbytes`` sent through shared memory by ``method`` to the byte counter."""
        if self._bytes is not None:
            self._bytes.labels(self.service, method).inc(nbytes)

    def close(self) -> None:
        """Removes every segment no client has claimed and every pooled file, and closes the
        bulk plane (server shutdown)."""
        if self.plane is not None:
            self.plane.close()
        self.peers.close()
        self.registry.close()
        with self._pools_lock:
            pools, self._pools = list(self._pools.values()), {}
        for pool in pools:
            pool.close()


class ClientTransport:
    """A client's side: the offers sent with each call and the readers for what comes back.

    Args:
        shm_dir: the directory offered to servers ("" or None: inline bytes only). A directory
            that does not exist or is not writable silently disables the offer.
        address: the server's gRPC target; with it the client also offers to read large
            answers from the server's bulk plane (:mod:`graphfeed.common.plane`), until the
            plane turns out unreachable from here.
        plane: False: never offer the bulk plane.
    """

    def __init__(self, shm_dir: str | Path | None, address: str = "", plane: bool = True) -> None:
        self.offer = shared_offer(Path(shm_dir)) if shm_dir else None
        self._shm_metadata = self.offer.metadata() if self.offer is not None else ()
        self.plane = None
        if address and plane:
            name, direct = plane_target(address)
            self.plane = PlaneClient(name, client_tls(), direct=direct)

    @property
    def metadata(self) -> tuple[tuple[str, str], ...] | None:
        """The offers of one call (None: none)."""
        offers = tuple(self._shm_metadata)
        if self.plane is not None and not self.plane.broken:
            offers += ((PLANE_OFFER_KEY, self.plane.offer),)
        return offers or None

    @property
    def fetch(self) -> Fetch | None:
        """How answers' bulk bytes are read from the server's bulk plane (None: not offered)."""
        return self.plane.fetch if self.plane is not None else None

    def reader(self) -> SegmentReader | None:
        """A reader for one response (maps and claims the segments it names)."""
        return SegmentReader(self.offer.directory) if self.offer is not None else None

    def close(self) -> None:
        """Closes the bulk plane's idle connections."""
        if self.plane is not None:
            self.plane.close()
