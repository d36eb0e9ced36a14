"""gRPC plumbing shared by the services: server assembly, error mapping, metrics, channels, retries
(a service process's life around its server is :mod:`graphfeed.common.service`).

Servicers raise :class:`~graphfeed.common.errors.GraphfeedError` subclasses; :class:`ServerInterceptor`
turns them into statuses, logs unexpected exceptions, and records :class:`RpcMetrics` per call."""

from __future__ import annotations

import json
import logging
import time
from collections.abc import Callable, Iterable, Iterator
from concurrent import futures
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, TypeVar

import grpc
from google.protobuf.descriptor import ServiceDescriptor
from grpc_health.v1 import health, health_pb2, health_pb2_grpc
from grpc_reflection.v1alpha import reflection

from graphfeed.common import bulk, security
from graphfeed.common.errors import RETRYABLE_CODES, GraphfeedError, from_rpc_error
from graphfeed.common.limits import MAX_MESSAGE_BYTES
from graphfeed.common.metrics import RpcMetrics, counting_deserializer, counting_serializer, decoded
from graphfeed.common.readiness import LIVENESS_SERVICE, set_serving
from graphfeed.common.security import ServerSecurity

if TYPE_CHECKING:
    pass

log = logging.getLogger(__name__)


RECONNECT_BACKOFF_MS = (100, 1000)
"""A channel's reconnect backoff (first/min, max). gRPC's defaults (1 s growing 1.6x to 120 s)
kept channels in the same process failing with "connection refused" for seconds after a
restarted server was READY (its subchannels, shared in the global pool, still backing off); a
1 s ceiling bounds that window and costs a dead peer one connection attempt a second."""


def channel_options(max_message_bytes: int = MAX_MESSAGE_BYTES) -> list[tuple[str, int]]:
    """Options for channels and servers: message limits, keepalive and reconnect backoff."""
    first, most = RECONNECT_BACKOFF_MS
    return [
        ("grpc.max_send_message_length", max_message_bytes),
        ("grpc.max_receive_message_length", max_message_bytes),
        ("grpc.keepalive_time_ms", 30_000),
        ("grpc.keepalive_timeout_ms", 10_000),
        ("grpc.initial_reconnect_backoff_ms", first),
        ("grpc.min_reconnect_backoff_ms", first),
        ("grpc.max_reconnect_backoff_ms", most),
    ]


# One retry policy for every idempotent read (gRFC A6, applied by gRPC itself): only the codes
# errors.py declares retryable, at most 3 attempts, exponential backoff with gRPC's random
# jitter (it never touches data), all within the call's one deadline. gRPC never retries once
# the server has answered, so a server stream is not retried after its first message.
RETRY_MAX_ATTEMPTS = 3
_RETRY_BACKOFF = {"initialBackoff": "0.1s", "maxBackoff": "1s", "backoffMultiplier": 2}
# A call is retryable while gRPC still holds its request; the largest (1M seed ids) is 8 MiB.
_RETRY_BUFFER_BYTES = 16 << 20


def retry_service_config(service: ServiceDescriptor, idempotent: Iterable[str]) -> str:
    """The ``grpc.service_config`` JSON that retries the ``idempotent`` methods of ``service``.

    Raises:
        KeyError: a name that is not a method of ``service`` (a typo would silently not retry).
    """
    names = [{"service": service.full_name, "method": service.methods_by_name[m].name} for m in idempotent]
    policy = {
        "maxAttempts": RETRY_MAX_ATTEMPTS,
        **_RETRY_BACKOFF,
        "retryableStatusCodes": [c.name for c in RETRYABLE_CODES],
    }
    # round_robin: a target that resolves to several replicas (dns:/// of a headless Service,
    # ipv4:a:p,b:p) spreads calls over all of them; with one address it is pick_first.
    lb: list[dict[str, dict]] = [{"round_robin": {}}]
    return json.dumps({"loadBalancingConfig": lb, "methodConfig": [{"name": names, "retryPolicy": policy}]})


def client_channel(
    address: str,
    service: ServiceDescriptor,
    idempotent: Iterable[str],
    max_message_bytes: int = MAX_MESSAGE_BYTES,
) -> grpc.Channel:
    """An insecure channel to ``address`` for clients of ``service``; its ``idempotent`` methods
    are retried as :func:`retry_service_config` says, every other method is never retried.
    Calls are balanced round-robin over every address the target resolves to.

    Args:
        address: ``host:port``, ``dns:///host:port`` (every A record, re-resolved when a
            server closes an old connection) or ``ipv4:a:p,b:p``.
        service: the generated descriptor, e.g. ``pb.DESCRIPTOR.services_by_name["SamplerService"]``.
        idempotent: names of the methods safe to send twice (reads).
        max_message_bytes: largest message sent or received.
    """
    options: list[tuple[str, int | str]] = [
        *channel_options(max_message_bytes),
        ("grpc.enable_retries", 1),
        ("grpc.service_config", retry_service_config(service, idempotent)),
        ("grpc.service_config_disable_resolution", 1),  # DNS must not replace the policy
        ("grpc.per_rpc_retry_buffer_size", _RETRY_BUFFER_BYTES),
        # grpcio's own (Python-level) option: the thread reading a server stream drives its
        # completion queue itself (the data-plane bench of BENCHMARKS.md: about a quarter less client CPU
        # per GB at 1 MB answers). Every graphfeed stream is read by one thread.
        ("SingleThreadedUnaryStream", 1),
    ]
    return security.channel(address, options)  # TLS and a token when the process is set up so


T = TypeVar("T")


def streamed(call: Iterator[T], peer: str) -> Iterator[T]:
    """The messages of a server-streaming call as they arrive, its errors as
    :class:`~graphfeed.common.errors.GraphfeedError` naming ``peer``; the call is cancelled when
    not read to the end."""
    try:
        yield from call
    except grpc.RpcError as err:
        raise from_rpc_error(err, peer) from None
    finally:
        call.cancel()  # type: ignore[attr-defined]  # a grpc call; a no-op once it has ended


def _abort(context: grpc.ServicerContext, exc: BaseException, method: str) -> None:
    if isinstance(exc, GraphfeedError):
        log.info("%s -> %s: %s", method, exc.code.name, exc)
        context.abort(exc.code, str(exc))
    log.error("%s failed unexpectedly", method, exc_info=exc)
    context.abort(grpc.StatusCode.INTERNAL, f"internal error in {method}: {type(exc).__name__}: {exc}")


class ServerInterceptor(grpc.ServerInterceptor):
    """Maps exceptions to statuses and records per-RPC metrics (count, latency, bytes); writes
    the :class:`~graphfeed.common.bulk.Outgoing` frames servicers return (bulk framing)."""

    def __init__(self, metrics: RpcMetrics) -> None:
        self._m = metrics

    def intercept_service(
        self,
        continuation: Callable[[grpc.HandlerCallDetails], grpc.RpcMethodHandler | None],
        handler_call_details: grpc.HandlerCallDetails,
    ) -> grpc.RpcMethodHandler | None:
        handler = continuation(handler_call_details)
        if handler is None:
            return None
        full = handler_call_details.method  # "/pkg.Service/Method"
        service, _, method = full.rpartition("/")
        service = service.lstrip("/").rsplit(".", 1)[-1]
        labels = (service, method)
        m = self._m

        latency = m.latency.labels(*labels)
        messages_out = m.response_messages.labels(*labels)
        # Bytes are counted where the message is (de)serialized anyway: ByteSize() would
        # serialize a second time (a quarter of a busy server's CPU with large tensors).
        deserialize = counting_deserializer(handler.request_deserializer, m.request_bytes.labels(*labels))
        serialize = counting_serializer(bulk.serializer(handler.response_serializer), m.response_bytes.labels(*labels))

        def record(start: float, code: grpc.StatusCode) -> None:
            m.requests.labels(*labels, code.name).inc()
            latency.observe(time.perf_counter() - start)

        def sent() -> None:
            messages_out.inc()

        def code_of(context: grpc.ServicerContext, exc: BaseException | None) -> grpc.StatusCode:
            if isinstance(exc, GraphfeedError):
                return exc.code
            if exc is not None:
                return context.code() or grpc.StatusCode.INTERNAL
            return grpc.StatusCode.OK

        if handler.unary_unary:
            inner = handler.unary_unary

            def unary_unary(request: object, context: grpc.ServicerContext) -> object:
                start = time.perf_counter()
                try:
                    resp = inner(decoded(request, full), context)
                except Exception as exc:  # noqa: BLE001 - mapped to a status right here
                    record(start, code_of(context, exc))
                    _abort(context, exc, full)
                record(start, grpc.StatusCode.OK)
                sent()
                return resp

            return grpc.unary_unary_rpc_method_handler(unary_unary, deserialize, serialize)

        if handler.unary_stream:
            inner_stream = handler.unary_stream

            def unary_stream(request: object, context: grpc.ServicerContext) -> Iterator[object]:
                start = time.perf_counter()
                try:
                    for resp in inner_stream(decoded(request, full), context):
                        sent()
                        yield resp
                except Exception as exc:  # noqa: BLE001 - mapped to a status right here
                    record(start, code_of(context, exc))
                    _abort(context, exc, full)
                else:
                    code = grpc.StatusCode.OK if context.is_active() else grpc.StatusCode.CANCELLED
                    record(start, code)

            return grpc.unary_stream_rpc_method_handler(unary_stream, deserialize, serialize)
        return handler  # client/bidi streaming: none in graphfeed yet


def dial_host(host: str) -> str:
    """The host part a client dials for a server bound to ``host`` (a wildcard: loopback)."""
    if host in ("", "0.0.0.0", "::", "[::]"):  # noqa: S104 - a comparison, not a bind
        return "127.0.0.1"
    return f"[{host}]" if ":" in host and not host.startswith("[") else host


@dataclass
class RunningServer:
    """A started gRPC server with its bound ports."""

    server: grpc.Server
    port: int
    health: health.HealthServicer
    metrics_port: int | None = None
    host: str = "127.0.0.1"  # the bind address: clients on another host dial it
    metrics_host: str = "127.0.0.1"
    service_names: tuple[str, ...] = ()
    health_server: grpc.Server | None = None  # health outside the handler pool (serve_health)
    health_port: int | None = None
    health_host: str = "127.0.0.1"  # the health server's bind address (settings.health_host or host)
    on_stop: list[Callable[[], None]] = field(default_factory=list)  # run once the server has stopped

    @property
    def address(self) -> str:
        return f"{dial_host(self.host)}:{self.port}"

    def stop(self, grace_s: float = 5.0) -> None:
        """Marks the server NOT_SERVING, then stops it, letting calls finish for ``grace_s``."""
        self.health.enter_graceful_shutdown()
        self.server.stop(grace_s).wait()
        if self.health_server is not None:
            self.health_server.stop(0).wait()
        for hook in self.on_stop:
            hook()

    def set_serving(self, serving: bool) -> None:
        """Health of ``""`` and the service names: SERVING or NOT_SERVING (liveness stays SERVING)."""
        set_serving(self.health, self.service_names, serving)


def start_server(
    *,
    register: Callable[[grpc.Server], None],
    service_names: Iterable[str],
    metrics: RpcMetrics,
    host: str = "127.0.0.1",
    port: int = 0,
    max_workers: int = 16,
    max_message_bytes: int = MAX_MESSAGE_BYTES,
    serving: bool = True,
    max_connection_age_s: float = 0.0,
    max_connection_age_grace_s: float = 0.0,
    tls: ServerSecurity | None = None,
    reflection_on: bool = True,
) -> RunningServer:
    """Builds and starts a server with health checking, reflection and the interceptor.

    Args:
        register: adds the service's servicers to the server.
        service_names: full names of the registered services (for health and reflection).
        metrics: where the interceptor records RPC metrics.
        host: bind address.
        port: TCP port; 0 picks a free one (read it back from the result).
        max_workers: handler threads.
        max_message_bytes: largest message sent or received.
        serving: initial health; False until the caller's peers are ready (``set_serving``).
        max_connection_age_s: a connection is asked to close (GOAWAY) after this long, so
            clients re-resolve and spread over new replicas; 0 never.
        max_connection_age_grace_s: calls still running then get this long before the
            connection is cut; 0 no limit (long streams are never cut).
        tls: TLS / mutual TLS on the port and who may call (default: plaintext, anyone).
        reflection_on: serve gRPC reflection (``grpcurl list``; behind the same credentials as
            every other call).
    """
    tls = tls or ServerSecurity()
    options: list[tuple[str, int]] = channel_options(max_message_bytes)
    if max_connection_age_s > 0:
        options.append(("grpc.max_connection_age_ms", int(max_connection_age_s * 1000)))
        if max_connection_age_grace_s > 0:
            options.append(("grpc.max_connection_age_grace_ms", int(max_connection_age_grace_s * 1000)))
    server = grpc.server(
        futures.ThreadPoolExecutor(max_workers=max_workers, thread_name_prefix="grpc"),
        interceptors=[ServerInterceptor(metrics), *tls.interceptors()],
        options=options,
    )
    register(server)
    health_servicer = health.HealthServicer()
    health_pb2_grpc.add_HealthServicer_to_server(health_servicer, server)
    names = list(service_names)
    if reflection_on:
        reflection.enable_server_reflection(
            [*names, health_pb2.DESCRIPTOR.services_by_name["Health"].full_name, reflection.SERVICE_NAME],
            server,
        )
    bound = tls.bind(server, f"{host}:{port}")
    if bound == 0:
        raise OSError(f"could not bind gRPC server to {host}:{port}")
    server.start()
    health_servicer.set(LIVENESS_SERVICE, health_pb2.HealthCheckResponse.SERVING)
    set_serving(health_servicer, names, serving)
    return RunningServer(server=server, port=bound, health=health_servicer, host=host, service_names=tuple(names))
