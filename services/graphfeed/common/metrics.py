"""RPC metrics every service exports (each service's own ``metrics.py`` adds domain ones).

Names follow ``graphfeed_<what>_<unit>``; labels come from small fixed sets (service, method,
code) only. A ``CollectorRegistry`` is always passed in, so tests use a fresh one.
"""

from __future__ import annotations

from dataclasses import dataclass

from prometheus_client import CollectorRegistry, Counter, Histogram, ProcessCollector, start_http_server

from graphfeed.common.errors import InvalidArgument

# RPC latencies span sub-millisecond lookups to multi-second epoch streams.
RPC_LATENCY_BUCKETS = (0.0005, 0.001, 0.0025, 0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1, 2.5, 5, 10, 30, 120)


@dataclass
class RpcMetrics:
    """Server-side per-RPC metrics, recorded by :class:`graphfeed.common.rpc.ServerInterceptor`."""

    requests: Counter
    latency: Histogram
    request_bytes: Counter
    response_bytes: Counter
    response_messages: Counter

    @classmethod
    def create(cls, registry: CollectorRegistry) -> RpcMetrics:
        labels = ("service", "method")
        return cls(
            requests=Counter(
                "graphfeed_rpc_requests_total",
                "RPCs handled, by final status code.",
                (*labels, "code"),
                registry=registry,
            ),
            latency=Histogram(
                "graphfeed_rpc_latency_seconds",
                "Time from request arrival to the last response message.",
                labels,
                buckets=RPC_LATENCY_BUCKETS,
                registry=registry,
            ),
            request_bytes=Counter(
                "graphfeed_rpc_request_bytes_total",
                "Serialized request bytes received.",
                labels,
                registry=registry,
            ),
            response_bytes=Counter(
                "graphfeed_rpc_response_bytes_total",
                "Serialized response bytes sent, with the bulk bytes sent through the bulk plane instead.",
                labels,
                registry=registry,
            ),
            response_messages=Counter(
                "graphfeed_rpc_response_messages_total",
                "Response messages sent (more than one per call for server streams).",
                labels,
                registry=registry,
            ),
        )


def serve_metrics(registry: CollectorRegistry, host: str, port: int) -> int:
    """Serves ``/metrics`` for ``registry`` on a background thread; returns the bound port.

    Also exports the process's CPU and memory (process_cpu_seconds_total,
    process_resident_memory_bytes) for the dashboard's per-pod panels.
    """
    ProcessCollector(registry=registry)
    server, _thread = start_http_server(port, addr=host, registry=registry)
    return int(server.server_port)


def counting_serializer(serialize, counter):  # noqa: ANN001, ANN201 - grpc's untyped (de)serializer callables
    """``serialize`` (message -> bytes; None: bytes pass through) that adds each length to ``counter``,
    with the bulk bytes a message sent through the bulk plane (:attr:`graphfeed.common.bulk.Outgoing.elsewhere`):
    what the answer cost the network either way."""

    def counted(msg):  # noqa: ANN001, ANN202
        raw = serialize(msg) if serialize is not None else msg
        counter.inc(len(raw) + getattr(msg, "elsewhere", 0))  # bulk bytes sent through the bulk plane too
        return raw

    return counted


@dataclass(frozen=True)
class Undecodable:
    """What a request deserializer returns for bytes that are not the request message: the
    handler answers INVALID_ARGUMENT (:func:`decoded`). Raising from a deserializer instead
    makes grpcio answer INTERNAL, log a traceback per request and (1.85) keep ~19 KB per call."""

    reason: str


def counting_deserializer(deserialize, counter):  # noqa: ANN001, ANN201
    """``deserialize`` (bytes -> message; None: bytes pass through) that adds each length to
    ``counter`` and never raises (:class:`Undecodable`)."""

    def counted(raw):  # noqa: ANN001, ANN202
        counter.inc(len(raw))
        if deserialize is None:
            return raw
        try:
            return deserialize(raw)
        except Exception as e:  # noqa: BLE001 - any parse failure is the client's malformed request
            return Undecodable(f"{type(e).__name__}: {e}")

    return counted


def decoded(request: object, method: str) -> object:
    """``request``, or InvalidArgument when its bytes could not be parsed."""
    if isinstance(request, Undecodable):
        raise InvalidArgument(f"{method}: the request is not a valid message ({request.reason})")
    return request
