"""Start-up in any order: a service listens at once and answers gRPC health ``NOT_SERVING``
until its peers answer, then ``SERVING``.

A :class:`PeerGate` builds the service's core (the object its servicer needs: a sampler over
every graph-store, a loader over graph-stores and a sampler) on a background thread, retrying
with capped exponential backoff and logging what it waits for. Until the core is built, calls
that need it fail with UNAVAILABLE "waiting for <peer>: ..." (clients retry that code). Once
built, the gate re-checks the peers every ``check_interval_s`` and rebuilds the core, reporting
``NOT_SERVING`` meanwhile, when a check says the peers changed (a re-ingested graph).

Health is also served by :func:`serve_health` on a small server with its own threads, so a
probe is answered while every handler thread of the main server streams minibatches.
"""

from __future__ import annotations

import logging
import threading
import time
from collections.abc import Callable, Iterable
from concurrent import futures
from typing import Any, Generic, TypeVar

import grpc
from grpc_health.v1 import health, health_pb2, health_pb2_grpc

from graphfeed.common import security
from graphfeed.common.errors import Unavailable

log = logging.getLogger(__name__)

T = TypeVar("T")

LIVENESS_SERVICE = "graphfeed.liveness"
"""Health service name that is SERVING from start to shutdown whatever the peers: what a
liveness probe asks (``""`` and the service names say whether the peers are ready)."""

SERVING = health_pb2.HealthCheckResponse.SERVING
NOT_SERVING = health_pb2.HealthCheckResponse.NOT_SERVING


class PeerNotReady(Unavailable):
    """A peer a service needs did not answer (yet); the message says which and why."""

    def __init__(self, peer: str, detail: str) -> None:
        super().__init__(f"waiting for {peer}: {detail}")
        self.peer = peer


def set_serving(servicer: health.HealthServicer, names: Iterable[str], serving: bool) -> None:
    """Sets the overall status (``""``) and each of ``names`` to SERVING or NOT_SERVING."""
    for name in ("", *names):
        servicer.set(name, SERVING if serving else NOT_SERVING)


def serve_health(servicer: health.HealthServicer, host: str, port: int, workers: int = 2) -> tuple[grpc.Server, int]:
    """Serves ``grpc.health.v1.Health`` from ``servicer`` on a server of its own (``workers``
    threads, no interceptors) at ``host:port`` (0 picks a port); returns it and the bound port."""
    server = grpc.server(futures.ThreadPoolExecutor(max_workers=workers, thread_name_prefix="health"))
    health_pb2_grpc.add_HealthServicer_to_server(servicer, server)
    bound = server.add_insecure_port(f"{host}:{port}")
    if bound == 0:
        raise OSError(f"could not bind the health server to {host}:{port}")
    server.start()
    return server, bound


def check_serving(address: str, peer: str, timeout_s: float) -> None:
    """Raises :class:`PeerNotReady` unless the server at ``address`` answers health SERVING."""
    with security.channel(address) as channel:
        try:
            resp = health_pb2_grpc.HealthStub(channel).Check(health_pb2.HealthCheckRequest(), timeout=timeout_s)
        except grpc.RpcError as err:
            code = err.code().name if isinstance(err, grpc.Call) else "UNKNOWN"
            raise PeerNotReady(peer, f"{code} {err.details() if isinstance(err, grpc.Call) else err}") from None
    if resp.status != SERVING:
        raise PeerNotReady(peer, health_pb2.HealthCheckResponse.ServingStatus.Name(resp.status))


def wait_serving(address: str, peer: str, timeout_s: float, poll_s: float = 0.05) -> None:
    """Returns once the server at ``address`` answers health SERVING; raises the last
    :class:`PeerNotReady` after ``timeout_s``."""
    deadline = time.monotonic() + timeout_s
    while True:
        try:
            check_serving(address, peer, timeout_s=max(0.1, min(5.0, deadline - time.monotonic())))
            return
        except PeerNotReady:
            if time.monotonic() >= deadline:
                raise
        time.sleep(poll_s)  # a poll interval, not synchronisation: the condition is re-checked


class PeerGate(Generic[T]):
    """Builds a core once its peers answer, and rebuilds it when they change.

    Args:
        service: name for logs ("sampler").
        connect: builds the core; raises (best :class:`PeerNotReady`) while a peer is missing.
        on_serving: told True once a core is built, False while there is none (health).
        check: ``check(core)`` -> a reason to rebuild (the peers changed), or None; raising
            means "could not check" (logged, the core kept). None: never re-checked.
        release: closes a core that is replaced or when the gate closes.
        check_interval_s: seconds between checks.
        initial_backoff_s, max_backoff_s: wait after a failed ``connect``, doubled each time up to the cap.
    """

    def __init__(
        self,
        service: str,
        connect: Callable[[], T],
        *,
        on_serving: Callable[[bool], None],
        check: Callable[[T], str | None] | None = None,
        release: Callable[[T], None] = lambda _core: None,
        check_interval_s: float = 10.0,
        initial_backoff_s: float = 0.2,
        max_backoff_s: float = 10.0,
    ) -> None:
        self.service = service
        self._connect, self._check, self._release, self._on_serving = connect, check, release, on_serving
        self.check_interval_s = check_interval_s
        self._backoff = (initial_backoff_s, max_backoff_s)
        self._core: T | None = None
        self._waiting = "peers (not tried yet)"
        self._lock = threading.Lock()
        self._changed = threading.Condition(self._lock)
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._run, name=f"{service}-peers", daemon=True)

    def start(self) -> PeerGate[T]:
        """Starts connecting in the background; returns self."""
        self._thread.start()
        return self

    @property
    def ready(self) -> bool:
        return self._core is not None

    def get(self) -> T:
        """The core. Raises :class:`~graphfeed.common.errors.Unavailable` naming what is awaited."""
        core = self._core
        if core is None:
            raise Unavailable(f"{self.service} is not ready: waiting for {self._waiting}")
        return core

    def wait(self, timeout_s: float) -> T:
        """The core once built; Unavailable (naming what is awaited) after ``timeout_s``."""
        with self._changed:
            self._changed.wait_for(lambda: self._core is not None or self._stop.is_set(), timeout_s)
        return self.get()

    def close(self) -> None:
        """Stops the background thread and releases the core."""
        self._stop.set()
        with self._changed:
            self._changed.notify_all()
        if self._thread.is_alive() and self._thread is not threading.current_thread():
            self._thread.join(timeout=30)
        self._swap(None)

    def _swap(self, core: T | None) -> None:
        with self._changed:
            old, self._core = self._core, core
            self._changed.notify_all()
        self._on_serving(core is not None and not self._stop.is_set())
        if old is not None:
            self._release(old)

    def _run(self) -> None:
        backoff = self._backoff[0]
        while not self._stop.is_set():
            try:
                core = self._connect()
            except Exception as exc:  # noqa: BLE001 - any failure means "not yet": logged, retried
                self._waiting = str(exc).removeprefix("waiting for ")
                log.warning("%s waiting for %s; next try in %.1fs", self.service, self._waiting, backoff)
                self._stop.wait(backoff)
                backoff = min(backoff * 2, self._backoff[1])
                continue
            backoff = self._backoff[0]
            if self._stop.is_set():
                self._release(core)
                return
            self._swap(core)
            log.info("%s: peers ready, SERVING", self.service)
            self._watch(core)

    def _watch(self, core: T) -> None:
        """Returns when ``core`` must be rebuilt (after taking it out of service) or the gate closes."""
        if self._check is None:
            self._stop.wait()
            return
        while not self._stop.wait(self.check_interval_s):
            try:
                reason = self._check(core)
            except Exception as exc:  # noqa: BLE001 - a peer down for a moment: keep serving, calls fail on their own
                log.warning("%s could not check its peers: %s", self.service, exc)
                continue
            if reason is not None:
                log.warning("%s: %s; NOT_SERVING while it reconnects", self.service, reason)
                self._waiting = f"peers after: {reason}"
                self._swap(None)
                return


class GatedServicer:
    """A servicer that hands each call to ``servicer_of(gate.get())``: before the gate's core
    is built, calls fail with UNAVAILABLE "waiting for ..." (through the server interceptor).

    Pass it (typed ``Any``) to the generated ``add_<Service>Servicer_to_server``, which looks up
    each method by name once.
    """

    def __init__(self, gate: PeerGate[Any], servicer_of: Callable[[Any], object]) -> None:
        self._gate, self._servicer_of = gate, servicer_of
        self._built: tuple[object, object] | None = None  # (core, its servicer)

    def _servicer(self) -> object:
        core = self._gate.get()
        built = self._built
        if built is None or built[0] is not core:
            built = self._built = (core, self._servicer_of(core))
        return built[1]

    def __getattr__(self, method: str) -> Callable[[object, grpc.ServicerContext], object]:
        def call(request: object, context: grpc.ServicerContext) -> object:
            return getattr(self._servicer(), method)(request, context)

        return call
