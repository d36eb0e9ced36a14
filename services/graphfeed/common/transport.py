"""Inline bytes or shared memory, decided per call on both sides of an RPC.

A client that can share a directory with its server (same host, same mount) sends an offer in
the call's metadata (:class:`ClientTransport`); a server that verifies it
(:class:`ServerTransport`) puts the response's bulk tensors in one shared-memory segment per
message and sends only references. Everything else — another host, another pod without a
shared volume, ``shm_dir=""`` on either side — falls back to inline bytes in the same message
types, so correctness never depends on the fast path.
"""

from __future__ import annotations

import atexit
import threading
from pathlib import Path

import grpc
from prometheus_client import CollectorRegistry, Counter

from graphfeed.common.shm import Arena, OfferVerifier, SegmentPool, SegmentReader, SegmentRegistry, shared_offer
from graphfeed.common.shm import Backpressure  # noqa: F401 - re-exported: graphfeed.loader.servicer imports it here


class ServerTransport:
    """A server's side: which calls get shared memory, and the segments it has not seen claimed.

    Args:
        shm_dir: the one directory this server writes segments into ("" or None: never).
        service: the ``service`` label of the byte counter (e.g. "GraphStoreService").
        metrics: where ``graphfeed_rpc_response_shm_bytes_total`` is registered (None: not
            counted). With shared memory the wire carries only references, so this counter is
            the other half of the communication volume next to ``..._response_bytes_total``.
        ttl_s: seconds an unclaimed segment of a finished call survives before it is removed.
        pool_files: handed-back segment files kept for reuse (see :class:`SegmentPool`).
    """

    def __init__(
        self, shm_dir: str | Path | None, service: str = "", metrics: CollectorRegistry | None = None, ttl_s: float = 300.0,
        pool_files: int = 16,
    ) -> None:
        self.shm_dir = Path(shm_dir) if shm_dir else None
        self.pool_files = pool_files
        self.service = service
        self._verifier = OfferVerifier([self.shm_dir.resolve()] if self.shm_dir else [])
        self.registry = SegmentRegistry(ttl_s)
        self._pools: dict[Path, SegmentPool] = {}
        self._pools_lock = threading.Lock()
        self._bytes = None
        if metrics is not None:
            self._bytes = Counter(
                "graphfeed_rpc_response_shm_bytes_total",
                "Response tensor bytes sent through shared memory (not on the wire), by RPC.",
                ("service", "method"),
                registry=metrics,
            )
        atexit.register(self.close)  # a graceful exit leaves nothing behind in shm_dir

    def directory(self, context: grpc.ServicerContext) -> Path | None:
        """The shared directory when the caller's offer checks out, else None."""
        if self.shm_dir is None:
            return None
        return self._verifier.accept(context.invocation_metadata())

    def arena(self, context: grpc.ServicerContext) -> Arena | None:
        """A new arena for one response when the caller's offer checks out, else None (inline)."""
        directory = self.directory(context)
        return None if directory is None else Arena(directory, self.registry, pool=self.pool(directory))

    def finish(self, arena: Arena | None, method: str) -> None:
        """Writes the arena's segment (if anything was put in it), drops the writer's mapping
        and counts the bytes for ``method``."""
        if arena is None:
            return
        segment = arena.finish()
        if segment is not None:
            segment.close()
            self.count(method, arena.nbytes)  # what was laid out, not the (recycled) file's capacity

    def pool(self, directory: Path) -> SegmentPool:
        """The server's reusable segment files in ``directory`` (shared by its calls, closed
        with the transport). Every response segment comes from it."""
        with self._pools_lock:
            key = Path(directory)
            if key not in self._pools:
                self._pools[key] = SegmentPool(key, self.pool_files)
            return self._pools[key]

    def count(self, method: str, nbytes: int) -> None:
        if self._bytes is not None:
            self._bytes.labels(self.service, method).inc(nbytes)

    def close(self) -> None:
        """Removes every segment no client has claimed and every pooled file (server shutdown)."""
        self.registry.close()
        with self._pools_lock:
            pools, self._pools = list(self._pools.values()), {}
        for pool in pools:
            pool.close()


class ClientTransport:
    """A client's side: the offer sent with each call and the reader for what comes back.

    Args:
        shm_dir: the directory offered to servers ("" or None: inline bytes only). A directory
            that does not exist or is not writable silently disables the offer.
    """

    def __init__(self, shm_dir: str | Path | None) -> None:
        self.offer = shared_offer(Path(shm_dir)) if shm_dir else None
        self.metadata = self.offer.metadata() if self.offer is not None else None

    def reader(self) -> SegmentReader | None:
        """A reader for one response (maps and claims the segments it names)."""
        return SegmentReader(self.offer.directory) if self.offer is not None else None
