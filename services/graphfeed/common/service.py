"""A service process's life: its server from its settings, the READY line, a graceful stop.

Every service's ``main`` is :func:`run_service`; :func:`parse_ready_line` reads the READY line
back (``graphfeed demo``, :mod:`graphfeed.cluster`, the tests)."""

from __future__ import annotations

import logging
import signal
import threading
from collections.abc import Callable, Iterable
from typing import TYPE_CHECKING, TypeVar

import grpc

from graphfeed.common import security
from graphfeed.common.metrics import RpcMetrics, serve_metrics
from graphfeed.common.plane import BulkPlane
from graphfeed.common.readiness import serve_health
from graphfeed.common.rpc import RunningServer, dial_host, start_server
from graphfeed.common.transport import ServerTransport

if TYPE_CHECKING:
    from prometheus_client import CollectorRegistry

    from graphfeed.common.config import ServiceSettings

log = logging.getLogger(__name__)


def wait_for_termination(running: RunningServer, grace_s: float, on_stop: Callable[[], None] | None = None) -> None:
    """Blocks until SIGTERM/SIGINT, then shuts down gracefully within ``grace_s`` seconds."""
    stop = threading.Event()

    def _handler(signum: int, _frame: object) -> None:
        log.info("signal %d: shutting down (grace %.1fs)", signum, grace_s)
        stop.set()

    signal.signal(signal.SIGTERM, _handler)
    signal.signal(signal.SIGINT, _handler)
    stop.wait()
    running.stop(grace_s)
    if on_stop is not None:
        on_stop()


def announce(service: str, running: RunningServer) -> None:
    """Prints the machine-readable READY line that `graphfeed demo` and the tests wait for."""
    metrics = f" metrics={dial_host(running.metrics_host)}:{running.metrics_port}" if running.metrics_port else ""
    health_at = f" health={dial_host(running.health_host)}:{running.health_port}" if running.health_port else ""
    print(f"GRAPHFEED_READY service={service} grpc={running.address}{metrics}{health_at}", flush=True)


def parse_ready_line(line: str) -> dict[str, str] | None:
    """Inverse of :func:`announce`: ``{"service": ..., "grpc": host:port, "metrics": ...}``."""
    if not line.startswith("GRAPHFEED_READY "):
        return None
    return dict(part.split("=", 1) for part in line.split()[1:])


def server_transport(
    settings: ServiceSettings, service: str, registry: CollectorRegistry, max_parked_bytes: int = 0
) -> ServerTransport:
    """A service's side of the transport from its settings: shared memory in ``shm_dir``, and
    the bulk plane on ``host``:``bulk_port`` unless that is -1 (see :mod:`graphfeed.common.plane`),
    parking at most ``max_parked_bytes`` and keeping no freed answer buffer (0: the plane's defaults)."""
    plane = None
    if settings.bulk_port != -1:
        tls = settings.server_security().ssl_context()
        bounds: dict[str, int] = {}
        if max_parked_bytes:  # a bounded process: nothing parked beyond its bound, no idle answer buffer kept
            bounds = {"max_parked_bytes": max_parked_bytes, "max_client_bytes": max_parked_bytes, "keep_buffers": 0}
        plane = BulkPlane(settings.host, settings.bulk_port, tls, advertise=settings.bulk_host, **bounds)
    return ServerTransport(
        settings.shm_dir, service, registry, client_quota_bytes=settings.shm_client_quota_bytes, plane=plane
    )


def start_service_server(
    settings: ServiceSettings,
    *,
    register: Callable[[grpc.Server], None],
    service_names: Iterable[str],
    registry: CollectorRegistry,
    on_error: Callable[[], None] = lambda: None,
    serving: bool = True,
    transport: ServerTransport | None = None,
) -> RunningServer:
    """:func:`start_server` configured from a service's settings, plus its ``/metrics`` port
    and its health port.

    ``/metrics`` is served unless ``settings.metrics_port == -1``, health on a server of its
    own unless ``settings.health_port == -1``. ``serving``: the initial health (see
    :func:`start_server`). ``transport``: the servicers' (:func:`server_transport`): its bulk
    plane closes with the server. If anything fails, the server is stopped, ``on_error`` releases
    what the caller opened, and the error propagates.
    """
    try:
        running = start_server(
            register=register,
            service_names=service_names,
            metrics=RpcMetrics.create(registry),
            host=settings.host,
            port=settings.port,
            max_workers=settings.max_workers,
            serving=serving,
            max_connection_age_s=settings.max_connection_age_s,
            max_connection_age_grace_s=settings.max_connection_age_grace_s,
            tls=settings.server_security(),
            reflection_on=settings.reflection,
        )
        try:
            if settings.health_port != -1:
                running.health_host = settings.health_host or settings.host
                running.health_server, running.health_port = serve_health(
                    running.health, running.health_host, settings.health_port
                )
            if settings.metrics_port != -1:
                running.metrics_port = serve_metrics(registry, settings.metrics_host, settings.metrics_port)
                running.metrics_host = settings.metrics_host
        except BaseException:
            running.stop(0)
            raise
    except BaseException:
        if transport is not None and transport.plane is not None:
            transport.plane.close()
        on_error()
        raise
    if transport is not None and transport.plane is not None:
        running.on_stop.append(transport.plane.close)  # the gRPC server has drained: nothing parked is read any more
    return running


SettingsT = TypeVar("SettingsT", bound="ServiceSettings")
CoreT = TypeVar("CoreT")


def run_service(
    name: str,
    settings: SettingsT,
    serve: Callable[[SettingsT], tuple[RunningServer, CoreT]],
    on_stop: Callable[[CoreT], None],
) -> None:
    """The body of every service's ``main``: log setup, serve, READY line, graceful stop.

    Args:
        name: service name in the READY line.
        settings: the service's settings (log level, grace period).
        serve: ``serve(settings) -> (RunningServer, core)``.
        on_stop: releases the core after the server has drained.
    """
    logging.basicConfig(level=settings.log_level, format="%(asctime)s %(levelname)s %(name)s: %(message)s")
    security.configure_clients(settings.client_security())  # this process's calls to its peers
    running, core = serve(settings)
    announce(name, running)
    wait_for_termination(running, settings.grace_s, on_stop=lambda: on_stop(core))
