"""A bare gRPC server that streams raw bytes: the loopback ceiling for graphfeed's streams.

``python -m graphfeed.bench.loopback [HOST]`` prints ``GRAPHFEED_READY ... grpc=HOST:PORT`` and
serves ``/bench.Loopback/Stream``: the request is 16 bytes (message size, count, little-endian
uint64s); the response is ``count`` messages of ``size`` bytes. No protobuf on either side.
"""

from __future__ import annotations

import struct
import sys
import time
from concurrent import futures

import grpc

from graphfeed.common.rpc import channel_options

METHOD = "/bench.Loopback/Stream"


def _stream(request: bytes, _context: grpc.ServicerContext):  # noqa: ANN202
    size, count = struct.unpack("<QQ", request)
    payload = b"\x01" * size
    for _ in range(count):
        yield payload


def serve(host: str = "127.0.0.1") -> None:
    server = grpc.server(futures.ThreadPoolExecutor(max_workers=2), options=channel_options())
    handler = grpc.method_handlers_generic_handler(
        "bench.Loopback", {"Stream": grpc.unary_stream_rpc_method_handler(_stream)}
    )
    server.add_generic_rpc_handlers((handler,))
    port = server.add_insecure_port(f"{host}:0")
    server.start()
    print(f"GRAPHFEED_READY service=loopback grpc={host}:{port}", flush=True)
    server.wait_for_termination()


def measure(address: str, message_bytes: int = 16 << 20, total_bytes: int = 1 << 30) -> float:
    """GB/s received by a client streaming ``total_bytes`` in ``message_bytes`` messages."""
    count = max(1, total_bytes // message_bytes)
    with grpc.insecure_channel(address, options=channel_options()) as ch:
        call = ch.unary_stream(METHOD)
        list(call(struct.pack("<QQ", message_bytes, 1)))  # warm-up
        t0 = time.perf_counter()
        got = sum(len(m) for m in call(struct.pack("<QQ", message_bytes, count)))
        return got / (time.perf_counter() - t0) / 1e9


if __name__ == "__main__":
    serve(*sys.argv[1:2])  # HOST defaults to 127.0.0.1 (graphfeed.bench.links binds a namespace's address)
    sys.exit(0)
