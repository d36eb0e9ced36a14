"""``graphfeed bench dataplane``: which data plane moves a minibatch's bulk bytes fastest (issue 13).

A server process started here (like :mod:`graphfeed.bench.loopback`) holds a minibatch of P
bytes (default 217,000 rows x 128 float32 = 111 MB; also 8 MB and 1 MB) and sends it to this
process, which must end with the bytes in a preallocated numpy array (the receiver's pool).

Transports (the variants of each are listed by ``--list``):

* ``proto_inline``: today's graphfeed way: one ``graphfeed.common.v1.Tensor`` built by
  ``codec.encode`` and (de)serialized by the generated code, ``codec.decode``, then copied in.
* ``grpc_raw_chunks``: grpcio unary-stream with identity (de)serializers; the server yields
  ``bytes`` slices of C bytes (one copy out of numpy), the client copies each into place.
  Also ``grpc_raw_inflight``: one unary call per chunk, several in flight.
* ``grpc_raw_chunks_proto_framed``: the same stream, but every message is a valid protobuf
  message (a ``Chunk`` header with the offset, then field 15 written by hand around the raw
  slice); the client scans the top-level fields itself and copies the slice into place.
* ``flight``: pyarrow.flight ``do_get`` of uint8 record batches built without a copy over the
  source; the client reads batch by batch (``read_chunk``) or the whole table (``read_all``).
* ``tcp``: a plain socket, ``sendall`` of the array and ``recv_into`` the destination: no
  copy in Python at all, the loopback ceiling for any Python transport.

Each variant runs once per round and the rounds alternate the order, so drift on a shared
machine hits every variant alike; GB/s is the median over the rounds, CPU-seconds per GB are
totals over the rounds (psutil's 10 ms ticks average out) for this process and the server.

Examples::

    graphfeed bench dataplane                      # ~1.5 min on 2 cores: 3 sizes, 5 rounds
    graphfeed bench dataplane --quick              # ~20 s: 111 MB and 1 MB, 2 rounds, fewer variants
    graphfeed bench dataplane --list               # the variants and their gRPC options

The option sweep (each set added to graphfeed's ``channel_options()``), server threads, calls
in flight and Flight without IPC threads run at the largest payload only.
"""

from __future__ import annotations

import argparse
import json
import math
import os
import socket
import statistics
import struct
import sys
import threading
import time
from collections.abc import Iterator
from concurrent import futures
from dataclasses import asdict, dataclass, field, replace
from typing import Any, Protocol

import grpc
import numpy as np
import psutil
from google.protobuf import descriptor_pb2, descriptor_pool, message_factory

from graphfeed.bench import harness
from graphfeed.bench.systems import Child
from graphfeed.common.bulk import parse, varint

ROW_BYTES = 128 * 4  # one float32 feature row of width 128
DEFAULT_ROWS = (217_000, 16_000, 2_000)  # 111 MB, 8 MB, 1 MB
CHUNKS = (256 << 10, 1 << 20, 4 << 20, 16 << 20)
SERVICE = "bench.DataPlane"
_REQUEST = struct.Struct("<QQQQ")  # size, chunk bytes, start, stop (start/stop: one slice)
_MIB = 1 << 20

# ---------------------------------------------------------------------------------------------
# Protobuf framing of a raw slice (grpc_raw_chunks_proto_framed)
# ---------------------------------------------------------------------------------------------

DATA_FIELD = 15
_DATA_TAG = bytes([(DATA_FIELD << 3) | 2])  # 0x7A: field 15, wire type 2 (length-delimited)


def _chunk_class() -> Any:  # Any: a class made at run time has no static fields
    """``message Chunk { uint64 offset = 1; uint32 tensor = 2; bytes data = 15; }``, built at
    run time so that the benchmark needs no generated code; any protobuf parser reads a framed
    message with it."""
    f = descriptor_pb2.FieldDescriptorProto
    proto = descriptor_pb2.FileDescriptorProto(
        name="graphfeed_bench_dataplane.proto", package="graphfeed.bench", syntax="proto3"
    )
    msg = proto.message_type.add(name="Chunk")
    msg.field.add(name="offset", number=1, type=f.TYPE_UINT64, label=f.LABEL_OPTIONAL)
    msg.field.add(name="tensor", number=2, type=f.TYPE_UINT32, label=f.LABEL_OPTIONAL)
    msg.field.add(name="data", number=DATA_FIELD, type=f.TYPE_BYTES, label=f.LABEL_OPTIONAL)
    pool = descriptor_pool.DescriptorPool()
    pool.Add(proto)
    return message_factory.GetMessageClass(pool.FindMessageTypeByName("graphfeed.bench.Chunk"))


Chunk = _chunk_class()


encode_varint = varint  # graphfeed's own (graphfeed.common.bulk), so the bench measures that code


def frame_chunk(offset: int, tensor: int, payload: memoryview) -> bytes:
    """A protobuf ``Chunk`` message carrying ``payload`` in field 15, built with one copy of it.

    The header is serialized by protobuf; the data field's tag and length are written here so
    that the payload is copied once, by the join, and never by protobuf.
    """
    header = Chunk(offset=offset, tensor=tensor).SerializeToString()
    return b"".join((header, _DATA_TAG, encode_varint(len(payload)), payload))


def parse_chunk(message: bytes) -> tuple[int, int, memoryview]:
    """(offset, tensor, the payload as a view of ``message``), read by graphfeed's own bulk
    reader (:func:`graphfeed.common.bulk.parse`): the payload is located, not copied; fields in
    any order, unknown ones skipped, a repeated field's last value wins.

    Raises:
        DataLoss: malformed message (truncated field, unsupported wire type).
    """
    got = parse(Chunk, message)
    assert isinstance(got.bulk, memoryview), "parse gives a view of the message"
    return got.message.offset, got.message.tensor, got.bulk


# ---------------------------------------------------------------------------------------------
# Server side (runs in the child process: ``python -m graphfeed.bench.dataplane SERVER ...``)
# ---------------------------------------------------------------------------------------------


def make_source(nbytes: int) -> np.ndarray:
    """The minibatch's bytes: seeded random bytes (incompressible; a misplaced chunk shows)."""
    return np.random.default_rng(13).integers(0, 256, nbytes, dtype=np.uint8)


def _spans(size: int, chunk: int) -> Iterator[tuple[int, int]]:
    for a in range(0, size, chunk):
        yield a, min(a + chunk, size)


class _GrpcHandlers:
    """The four methods of ``bench.DataPlane`` over one source array."""

    def __init__(self, source: np.ndarray) -> None:
        self.source = source
        self.view = source.data.cast("B")

    def inline(self, request: bytes, _context: grpc.ServicerContext) -> object:
        from graphfeed.common import codec

        size = _REQUEST.unpack(request)[0]
        return codec.encode(self.source[:size].view(np.float32).reshape(-1, 128))

    def raw(self, request: bytes, _context: grpc.ServicerContext) -> Iterator[bytes]:
        size, chunk, _, _ = _REQUEST.unpack(request)
        for a, b in _spans(size, chunk):
            yield self.view[a:b].tobytes()

    def framed(self, request: bytes, _context: grpc.ServicerContext) -> Iterator[bytes]:
        size, chunk, _, _ = _REQUEST.unpack(request)
        for a, b in _spans(size, chunk):
            yield frame_chunk(a, 0, self.view[a:b])

    def slice(self, request: bytes, _context: grpc.ServicerContext) -> bytes:
        _, _, a, b = _REQUEST.unpack(request)
        return self.view[a:b].tobytes()


def serve_grpc(source: np.ndarray, workers: int, options: list[tuple[str, int | str]]) -> tuple[grpc.Server, int]:
    """Starts ``bench.DataPlane`` on 127.0.0.1:0; returns the server and its port."""
    from graphfeed.common.v1 import tensor_pb2

    h = _GrpcHandlers(source)
    methods = {
        "Inline": grpc.unary_unary_rpc_method_handler(
            h.inline, response_serializer=tensor_pb2.Tensor.SerializeToString
        ),
        "Raw": grpc.unary_stream_rpc_method_handler(h.raw),
        "Framed": grpc.unary_stream_rpc_method_handler(h.framed),
        "Slice": grpc.unary_unary_rpc_method_handler(h.slice),
    }
    server = grpc.server(futures.ThreadPoolExecutor(max_workers=workers), options=options)
    server.add_generic_rpc_handlers((grpc.method_handlers_generic_handler(SERVICE, methods),))
    port = server.add_insecure_port("127.0.0.1:0")
    server.start()
    return server, port


def _flight_server(source: np.ndarray) -> object:
    """A Flight server whose ``do_get(ticket=_REQUEST(size, chunk, ipc_threads))`` streams uint8
    record batches that point into ``source`` (no copy: ``pa.py_buffer`` over the array)."""
    import pyarrow as pa
    import pyarrow.flight as flight

    whole = pa.py_buffer(source)

    class DataPlaneFlight(flight.FlightServerBase):
        def do_get(self, _context: object, ticket: flight.Ticket) -> flight.RecordBatchStream:
            size, chunk, ipc_threads, _ = _REQUEST.unpack(ticket.ticket)
            batches = [
                pa.RecordBatch.from_arrays(
                    [pa.Array.from_buffers(pa.uint8(), b - a, [None, whole.slice(a, b - a)])], names=["b"]
                )
                for a, b in _spans(size, chunk)
            ]
            # A Table streams from C++ without calling back into Python per batch.
            return flight.RecordBatchStream(
                pa.Table.from_batches(batches), options=pa.ipc.IpcWriteOptions(use_threads=bool(ipc_threads))
            )

    return DataPlaneFlight("grpc://127.0.0.1:0")


def _serve_tcp_connection(conn: socket.socket, view: memoryview) -> None:
    with conn:
        while True:
            request = bytearray(_REQUEST.size)
            got = 0
            while got < len(request):
                n = conn.recv_into(memoryview(request)[got:])
                if n == 0:
                    return
                got += n
            size, chunk, _, _ = _REQUEST.unpack(request)
            for a, b in _spans(size, chunk):
                conn.sendall(view[a:b])


def _serve_tcp(source: np.ndarray) -> int:
    """A socket server: each request (``_REQUEST``) is answered with the first ``size`` bytes
    of ``source``, ``sendall`` per chunk straight from the array."""
    listener = socket.create_server(("127.0.0.1", 0))
    view = source.data.cast("B")

    def accept() -> None:
        while True:
            conn, _ = listener.accept()
            conn.setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)
            threading.Thread(target=_serve_tcp_connection, args=(conn, view), daemon=True).start()

    threading.Thread(target=accept, daemon=True, name="tcp-accept").start()
    return listener.getsockname()[1]


def serve_main(argv: list[str]) -> int:
    """Child process entry: ``KIND MAX_BYTES [WORKERS OPTIONS_JSON]``; prints the READY line
    and serves until stdin closes (so it never outlives the benchmark)."""
    kind, max_bytes = argv[0], int(argv[1])
    source = make_source(max_bytes)
    keep: object
    if kind == "grpc":
        keep, port = serve_grpc(source, int(argv[2]), [tuple(o) for o in json.loads(argv[3])])
    elif kind == "flight":
        keep = _flight_server(source)
        port = keep.port  # type: ignore[attr-defined]
    elif kind == "tcp":
        keep, port = None, _serve_tcp(source)
    else:
        raise SystemExit(f"unknown server kind {kind!r}")
    print(f"GRAPHFEED_READY service=dataplane-{kind} address=127.0.0.1:{port}", flush=True)
    sys.stdin.read()  # EOF when the parent closes the pipe or dies
    del keep
    return 0


# ---------------------------------------------------------------------------------------------
# Launching servers (this process)
# ---------------------------------------------------------------------------------------------


ServerProcess = Child  # a server of this module, ``python -m graphfeed.bench.dataplane KIND ...``


# ---------------------------------------------------------------------------------------------
# Receivers: fetch(size, dest) leaves source[:size] in dest[:size]
# ---------------------------------------------------------------------------------------------


class Receiver(Protocol):
    def fetch(self, size: int, dest: np.ndarray) -> None: ...

    def close(self) -> None: ...


class InlineReceiver:
    """``proto_inline``: one Tensor message, ``codec.decode``, one copy into the destination."""

    def __init__(self, channel: grpc.Channel) -> None:
        from graphfeed.common.v1 import tensor_pb2

        self.channel = channel
        self.call = channel.unary_unary(f"/{SERVICE}/Inline", response_deserializer=tensor_pb2.Tensor.FromString)

    def fetch(self, size: int, dest: np.ndarray) -> None:
        from graphfeed.common import codec

        arr = codec.decode(self.call(_REQUEST.pack(size, 0, 0, 0)), "features")
        dest[:size] = arr.reshape(-1).view(np.uint8)

    def close(self) -> None:
        self.channel.close()


class StreamReceiver:
    """``grpc_raw_chunks`` (offsets implied by order) or ``..._proto_framed`` (offset read from
    each message's header): each message is copied once, into its place in the destination."""

    def __init__(self, channel: grpc.Channel, chunk: int, framed: bool) -> None:
        self.channel, self.chunk, self.framed = channel, chunk, framed
        self.call = channel.unary_stream(f"/{SERVICE}/{'Framed' if framed else 'Raw'}")

    def fetch(self, size: int, dest: np.ndarray) -> None:
        pos = 0
        for msg in self.call(_REQUEST.pack(size, self.chunk, 0, 0)):
            if self.framed:
                offset, _tensor, data = parse_chunk(msg)
                dest[offset : offset + len(data)] = np.frombuffer(data, np.uint8)
                pos += len(data)
            else:
                dest[pos : pos + len(msg)] = np.frombuffer(msg, np.uint8)
                pos += len(msg)
        if pos != size:
            raise RuntimeError(f"received {pos} bytes, expected {size}")

    def close(self) -> None:
        self.channel.close()


class InflightReceiver:
    """``grpc_raw_inflight``: one unary call per chunk, ``depth`` of them in flight (futures)."""

    def __init__(self, channel: grpc.Channel, chunk: int, depth: int) -> None:
        self.channel, self.chunk, self.depth = channel, chunk, depth
        self.call = channel.unary_unary(f"/{SERVICE}/Slice")

    def fetch(self, size: int, dest: np.ndarray) -> None:
        spans = list(_spans(size, self.chunk))
        pending: list[tuple[int, int, grpc.Future]] = []
        for i in range(len(spans) + self.depth):
            if i < len(spans):
                a, b = spans[i]
                pending.append((a, b, self.call.future(_REQUEST.pack(size, self.chunk, a, b))))
            if len(pending) > self.depth or (i >= len(spans) and pending):
                a, b, fut = pending.pop(0)
                dest[a:b] = np.frombuffer(fut.result(), np.uint8)

    def close(self) -> None:
        self.channel.close()


class FlightReceiver:
    """``flight``: ``do_get``, each batch's data buffer copied into the destination."""

    def __init__(self, address: str, chunk: int, read_all: bool, ipc_threads: bool) -> None:
        import pyarrow as pa
        import pyarrow.flight as flight

        self.client = flight.FlightClient(f"grpc://{address}")
        self.chunk, self.read_all, self.ipc_threads = chunk, read_all, ipc_threads
        self.call_options = flight.FlightCallOptions(read_options=pa.ipc.IpcReadOptions(use_threads=ipc_threads))
        self.ticket = flight.Ticket

    def fetch(self, size: int, dest: np.ndarray) -> None:
        ticket = self.ticket(_REQUEST.pack(size, self.chunk, int(self.ipc_threads), 0))
        reader = self.client.do_get(ticket, self.call_options)
        batches = reader.read_all().column(0).chunks if self.read_all else _batches(reader)
        pos = 0
        for column in batches:
            n = len(column)
            dest[pos : pos + n] = np.frombuffer(column.buffers()[1], np.uint8, n, column.offset)
            pos += n
        if pos != size:
            raise RuntimeError(f"received {pos} bytes, expected {size}")

    def close(self) -> None:
        self.client.close()


def _batches(reader: Any) -> Iterator[Any]:  # Any: pyarrow ships no type stubs
    """Each batch's column as it arrives (``read_chunk`` until the stream ends)."""
    while True:
        try:
            chunk = reader.read_chunk()
        except StopIteration:
            return
        yield chunk.data.column(0)


class TcpReceiver:
    """``tcp``: ``recv_into`` the destination directly (no copy in Python)."""

    def __init__(self, address: str, chunk: int) -> None:
        host, port = address.rsplit(":", 1)
        self.sock = socket.create_connection((host, int(port)))
        self.sock.setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)
        self.chunk = chunk

    def fetch(self, size: int, dest: np.ndarray) -> None:
        self.sock.sendall(_REQUEST.pack(size, self.chunk, 0, 0))
        view = dest.data.cast("B")[:size]
        pos = 0
        while pos < size:
            n = self.sock.recv_into(view[pos:])
            if n == 0:
                raise RuntimeError(f"connection closed after {pos} of {size} bytes")
            pos += n

    def close(self) -> None:
        self.sock.close()


# ---------------------------------------------------------------------------------------------
# Variants
# ---------------------------------------------------------------------------------------------

# grpcio 1.85 core's channel args (checked against the strings in cygrpc; an unknown arg is
# silently ignored, which is what happens to grpc.optimization_target: core no longer has it).
_MAX_MSG: list[tuple[str, int | str]] = [
    ("grpc.max_receive_message_length", 1 << 30),
    ("grpc.max_send_message_length", 1 << 30),
]
TUNED = "single_thread"
SWEEP = (
    "grpc_default",
    "graphfeed",
    "window_64m",
    "no_bdp_64m",
    "no_bdp",
    "frame_16m",
    "tcp_read_4m",
    "write_buf_16m",
    "throughput",
    "no_compression",
)
OPTION_SETS: dict[str, list[tuple[str, int | str]]] = {
    "grpc_default": _MAX_MSG,
    "graphfeed": [],  # graphfeed.common.rpc.channel_options(), filled in by options()
    "window_64m": [("grpc.http2.lookahead_bytes", 64 * _MIB)],
    "no_bdp_64m": [("grpc.http2.bdp_probe", 0), ("grpc.http2.lookahead_bytes", 64 * _MIB)],
    "no_bdp": [("grpc.http2.bdp_probe", 0)],
    "frame_16m": [("grpc.http2.max_frame_size", 16 * _MIB - 1)],
    "tcp_read_4m": [
        ("grpc.experimental.tcp_min_read_chunk_size", 4 * _MIB),
        ("grpc.experimental.tcp_max_read_chunk_size", 16 * _MIB),
    ],
    "write_buf_16m": [("grpc.http2.write_buffer_size", 16 * _MIB)],
    "throughput": [("grpc.optimization_target", "throughput")],
    "no_compression": [("grpc.default_compression_algorithm", 0)],
    # grpcio's Python-level option: the calling thread drives a unary-stream call's completion
    # queue itself instead of handing every message over from the channel's polling thread.
    "single_thread": [("SingleThreadedUnaryStream", 1)],
}


def options(name: str) -> list[tuple[str, int | str]]:
    """The channel/server args of an option set: graphfeed's ``channel_options()`` plus the
    set's own (later entries win in grpc core); ``grpc_default`` is grpc's defaults with only
    the message limits raised. A ``+`` joins sets (``window_64m+frame_16m``)."""
    from graphfeed.common.rpc import channel_options

    if name == "grpc_default":
        return list(_MAX_MSG)
    out: list[tuple[str, int | str]] = list(channel_options())
    for part in name.split("+"):
        out += OPTION_SETS[part]
    return out


# ---------------------------------------------------------------------------------------------
# Variants
# ---------------------------------------------------------------------------------------------

GRPC_TRANSPORTS = ("proto_inline", "grpc_raw_chunks", "grpc_raw_chunks_proto_framed", "grpc_raw_inflight")
TRANSPORTS = (*GRPC_TRANSPORTS, "flight", "tcp")


@dataclass(frozen=True)
class Variant:
    """One way to move the bytes: a transport and its knobs."""

    transport: str
    chunk_bytes: int = 0  # 0: the whole payload in one message
    options: str = ""  # option set(s) (see options()) of the gRPC channel and server; "" for flight and tcp
    depth: int = 1  # grpc_raw_inflight: calls in flight
    workers: int = 16  # gRPC server threads (graphfeed's services default to 16)
    read_all: bool = False  # flight: reader.read_all() instead of read_chunk() per batch
    ipc_threads: bool = True  # flight: IpcWriteOptions / IpcReadOptions use_threads on both sides
    # Measured at the largest payload only (the option sweep, threads, calls in flight); not part
    # of the identity, so a sweep row equal to a main row is measured once, as the main row.
    largest_only: bool = field(default=False, compare=False)

    @property
    def name(self) -> str:
        parts = [self.transport, _human(self.chunk_bytes) if self.chunk_bytes else "", self.options]
        parts += [
            f"depth {self.depth}" if self.depth > 1 else "",
            f"{self.workers} threads" if self.workers != 16 else "",
        ]
        parts += ["read_all" if self.read_all else "", "" if self.ipc_threads else "no ipc threads"]
        return " ".join(p for p in parts if p)

    def server_key(self) -> tuple[str, ...]:
        """Which server process serves it: one per gRPC (option set, threads); one Flight; one TCP."""
        if self.transport in GRPC_TRANSPORTS:
            return ("grpc", self.options, str(self.workers))
        return (self.transport,)


def _human(n: int) -> str:
    return f"{n >> 20} MiB" if n >= _MIB else f"{n >> 10} KiB"


@dataclass(frozen=True)
class Plan:
    """What to measure: the chunk sizes, the tuned option set, and the option sweep."""

    chunks: tuple[int, ...] = CHUNKS
    tuned: str = "graphfeed"
    sweep: tuple[str, ...] = ()
    sweep_chunk: int = 1 << 20
    transports: tuple[str, ...] = TRANSPORTS


def variants(plan: Plan) -> list[Variant]:
    """Today's inline proto; raw and framed gRPC streams and Flight at every chunk size (gRPC
    with the tuned options), Flight's ``read_all``, raw TCP; at the largest payload also the
    option sweep, server threads, calls in flight and Flight without IPC threads."""
    t, c1 = plan.tuned, plan.sweep_chunk
    out = [Variant("proto_inline", options="graphfeed")]  # unary: the tuned options change nothing for it
    out += [Variant("grpc_raw_chunks", c, t) for c in plan.chunks]
    out += [Variant("grpc_raw_chunks_proto_framed", c, t) for c in plan.chunks]
    out += [Variant("flight", c) for c in plan.chunks] + [Variant("flight", c1, read_all=True), Variant("tcp", c1)]
    detail = [Variant("grpc_raw_chunks", c1, s) for s in plan.sweep] + [Variant("grpc_raw_chunks", c1, t, workers=1)]
    detail += [Variant("grpc_raw_inflight", c1, t, depth=4, workers=w) for w in (16, 1)]
    detail += [Variant("flight", c1, ipc_threads=False)]
    out += [replace(v, largest_only=True) for v in detail]
    return [v for v in dict.fromkeys(out) if v.transport in plan.transports]


def applies(variant: Variant, size: int, measured: list[Variant]) -> bool:
    """False when a chunk size changes nothing at this payload size: a variant whose chunk
    holds the whole payload is skipped if the same variant with a smaller such chunk is measured."""
    if variant.chunk_bytes < size:
        return True
    return not any(
        size <= v.chunk_bytes < variant.chunk_bytes and replace(v, chunk_bytes=variant.chunk_bytes) == variant
        for v in measured
    )


def start_servers(keys: list[tuple[str, ...]], max_bytes: int) -> dict[tuple[str, ...], ServerProcess]:
    """One server process per key, started side by side; all stopped if any fails."""
    servers: dict[tuple[str, ...], ServerProcess] = {}
    try:
        for key in keys:
            args = [key[0], str(max_bytes)]
            if key[0] == "grpc":
                args += [key[2], json.dumps(options(key[1]))]
            servers[key] = Child.spawn("-".join(key), ["graphfeed.bench.dataplane", *args], key="address")
        for server in servers.values():
            server.wait_ready()
    except BaseException:
        stop_servers(servers)
        raise
    return servers


def stop_servers(servers: dict[tuple[str, ...], ServerProcess]) -> None:
    """Stops every server (all of them, even if one reports an error, which is re-raised)."""
    errors = []
    for server in servers.values():
        try:
            server.stop(check=True)
        except RuntimeError as exc:
            errors.append(str(exc))
    if errors:
        raise RuntimeError("\n".join(errors))


def open_receiver(variant: Variant, address: str) -> Receiver:
    """A connected receiver for ``variant`` talking to the server at ``address``."""
    if variant.transport == "flight":
        return FlightReceiver(address, variant.chunk_bytes, variant.read_all, variant.ipc_threads)
    if variant.transport == "tcp":
        return TcpReceiver(address, variant.chunk_bytes)
    channel = grpc.insecure_channel(address, options=options(variant.options))
    if variant.transport == "proto_inline":
        return InlineReceiver(channel)
    if variant.transport == "grpc_raw_inflight":
        return InflightReceiver(channel, variant.chunk_bytes, variant.depth)
    return StreamReceiver(channel, variant.chunk_bytes, framed=variant.transport == "grpc_raw_chunks_proto_framed")


# ---------------------------------------------------------------------------------------------
# Measurement
# ---------------------------------------------------------------------------------------------


@dataclass
class Cell:
    """The samples of one variant at one payload size."""

    variant: Variant
    payload_bytes: int
    transfers: int  # transfers per sample
    seconds: list[float] = field(default_factory=list)
    client_cpu_s: float = 0.0
    server_cpu_s: float = 0.0

    def summary(self) -> dict:
        """JSON row: GB/s median/min/max over the samples, CPU-seconds per GB over all of them."""
        gb = self.payload_bytes * self.transfers / 1e9
        rates = [gb / s for s in self.seconds]
        total_gb = gb * len(self.seconds)
        return {
            "variant": self.variant.name,
            **asdict(self.variant),
            "payload_bytes": self.payload_bytes,
            "transfers_per_sample": self.transfers,
            "gbps_median": statistics.median(rates),
            "gbps_min": min(rates),
            "gbps_max": max(rates),
            "client_cpu_s_per_gb": self.client_cpu_s / total_gb,
            "server_cpu_s_per_gb": self.server_cpu_s / total_gb,
        }


def _cpu_seconds() -> float:
    t = psutil.Process().cpu_times()
    return t.user + t.system


def sample(cell: Cell, receiver: Receiver, server: ServerProcess, dest: np.ndarray) -> None:
    """Times ``cell.transfers`` fetches into ``dest`` and adds them to the cell."""
    c0, s0, t0 = _cpu_seconds(), server.cpu_seconds(), time.perf_counter()
    for _ in range(cell.transfers):
        receiver.fetch(cell.payload_bytes, dest)
    cell.seconds.append(time.perf_counter() - t0)
    cell.client_cpu_s += _cpu_seconds() - c0
    cell.server_cpu_s += server.cpu_seconds() - s0


def check(receiver: Receiver, size: int, dest: np.ndarray, expected: np.ndarray, name: str) -> None:
    """One fetch into a zeroed destination must leave exactly the source's bytes (also the
    warm-up: connections, server-side caches, allocator pools)."""
    dest[:size] = 0
    receiver.fetch(size, dest)
    if not np.array_equal(dest[:size], expected[:size]):
        bad = int(np.flatnonzero(dest[:size] != expected[:size])[0])
        raise RuntimeError(f"{name}: received bytes differ from the source at offset {bad} of {size}")


def run_rounds(variants_: list[Variant], sizes: list[int], rounds: int, sample_bytes: int) -> list[Cell]:
    """Starts the servers, checks every (variant, size) once, then ``rounds`` rounds of one
    sample each, alternating the variant order; returns the cells in variant order."""
    servers = start_servers(list(dict.fromkeys(v.server_key() for v in variants_)), max(sizes))
    receivers: dict[Variant, Receiver] = {}
    try:
        receivers = {v: open_receiver(v, servers[v.server_key()].address) for v in variants_}
        expected = make_source(max(sizes))
        dest = np.ones(max(sizes), np.uint8)  # the receiver's pool: allocated and touched once
        cells = [
            Cell(v, s, max(1, math.ceil(sample_bytes / s)))
            for s in sizes
            for v in variants_
            if applies(v, s, variants_) and (s == max(sizes) or not v.largest_only)
        ]
        for cell in cells:
            check(receivers[cell.variant], cell.payload_bytes, dest, expected, cell.variant.name)
        for r in range(rounds):
            for cell in cells if r % 2 == 0 else cells[::-1]:
                sample(cell, receivers[cell.variant], servers[cell.variant.server_key()], dest)
        return cells
    finally:
        for receiver in receivers.values():
            receiver.close()
        stop_servers(servers)


# ---------------------------------------------------------------------------------------------
# Report
# ---------------------------------------------------------------------------------------------

# Copies of the payload in user space per transfer, (server, client); the kernel adds one copy
# into and one out of the socket buffers on every transport. Counted from grpcio 1.85's Cython
# layer (SendMessageOperation takes bytes and copies them into a core slice; a received message's
# slices each become a bytes object, then b"".join: grpc/grpc#42287), upb (the `data` setter,
# parse and the `data` getter copy once, SerializeToString twice: encode, then PyBytes) and Arrow
# Flight's serialization_internal.cc (send: gRPC slices point into the Arrow buffers; receive: a
# message that arrived in several slices is made contiguous once, then wrapped).
COPIES: dict[str, tuple[str, str]] = {
    "proto_inline": (
        "5: tobytes, Tensor.data setter, SerializeToString x2, grpc send",
        "5: grpc slices->bytes, join, protobuf parse, .data getter, into the pool",
    ),
    "grpc_raw_chunks": ("2: tobytes, grpc send", "3: grpc slices->bytes, join, into the pool"),
    "grpc_raw_chunks_proto_framed": ("2: join(header, slice), grpc send", "3: grpc slices->bytes, join, into the pool"),
    "grpc_raw_inflight": ("2: tobytes, grpc send", "3: grpc slices->bytes, join, into the pool"),
    "flight": (
        "0: batches and gRPC slices point into the numpy array",
        "2: Flight makes the message contiguous, into the pool",
    ),
    "tcp": ("0: sendall(memoryview)", "0: recv_into(the pool)"),
}


def markdown(rows: list[dict], command: str, machine: str, verdict_line: str) -> str:
    """The verdict, one table per payload size (fastest first) and the copies per transport."""
    lines = [f"`{command}` ({machine})", "", verdict_line, "", _HOW, ""]
    for size in sorted({r["payload_bytes"] for r in rows}, reverse=True):
        at = sorted((r for r in rows if r["payload_bytes"] == size), key=lambda r: -r["gbps_median"])
        lines += [
            f"### {_size(size)} payload ({at[0]['transfers_per_sample']} transfers per sample)",
            "",
            "| variant | GB/s median | min-max | client CPU s/GB | server CPU s/GB |",
            "|---|---:|---:|---:|---:|",
        ]
        lines += [
            f"| {r['variant']} | {r['gbps_median']:.2f} | {r['gbps_min']:.2f}-{r['gbps_max']:.2f} | "
            f"{r['client_cpu_s_per_gb']:.2f} | {r['server_cpu_s_per_gb']:.2f} |"
            for r in at
        ]
        lines.append("")
    lines += [
        "### Payload copies in user space per transfer (plus one into and one out of the kernel)",
        "",
        "| transport | server | client |",
        "|---|---|---|",
    ]
    lines += [f"| {t} | {srv} | {cli} |" for t, (srv, cli) in COPIES.items() if any(r["transport"] == t for r in rows)]
    return "\n".join(lines) + "\n"


_HOW = (
    "GB/s: median over the rounds (min-max), each sample moving the payload `transfers` times into the same "
    "preallocated array. CPU s/GB: user + system CPU of the whole process (all threads, psutil) over all rounds, "
    "per GB moved; on a shared machine it is steadier than GB/s. Option sets add to graphfeed's channel_options() "
    "and apply to the channel and the server (`graphfeed bench dataplane --list`)."
)


def _size(nbytes: int) -> str:
    return f"{nbytes / 1e6:.0f} MB" if nbytes >= 1e6 else f"{nbytes / 1e3:.1f} kB"


def _reference(rows: list[dict], size: int, name: str, transport: str) -> dict | None:
    """The row named ``name`` at ``size``, else the fastest row of ``transport`` there."""
    at = [r for r in rows if r["payload_bytes"] == size and r["transport"] == transport]
    named = [r for r in at if r["variant"] == name]
    return named[0] if named else max(at, key=lambda r: r["gbps_median"], default=None)


def verdict(rows: list[dict], grpc_ref: str, flight_ref: str) -> str:
    """Per payload size: the fastest variant and its ratios over two reference rows, the tuned
    gRPC stream and Flight at the same chunk size (fixed rows, not the luckiest of many), then
    Flight against gRPC in GB/s and CPU per GB on each side."""
    parts = []
    for size in sorted({r["payload_bytes"] for r in rows}, reverse=True):
        best = max((r for r in rows if r["payload_bytes"] == size), key=lambda r: r["gbps_median"])
        text = f"{_size(size)}: fastest {best['variant']} at {best['gbps_median']:.2f} GB/s"
        raw, fl = _reference(rows, size, grpc_ref, "grpc_raw_chunks"), _reference(rows, size, flight_ref, "flight")
        for other in (raw, fl):
            if other is not None and other is not best:
                text += (
                    f", {best['gbps_median'] / other['gbps_median']:.2f}x {other['variant']} "
                    f"({other['gbps_median']:.2f})"
                )
        if raw and fl:
            text += (
                f"; {fl['variant']} vs {raw['variant']}: {fl['gbps_median'] / raw['gbps_median']:.2f}x GB/s, "
                f"CPU s/GB client {fl['client_cpu_s_per_gb']:.2f} vs {raw['client_cpu_s_per_gb']:.2f}, server "
                f"{fl['server_cpu_s_per_gb']:.2f} vs {raw['server_cpu_s_per_gb']:.2f}"
            )
        parts.append(text)
    return "**Verdict** " + ". ".join(parts) + "."


# ---------------------------------------------------------------------------------------------
# Command line
# ---------------------------------------------------------------------------------------------

QUICK = {"rows": [217_000, 2_000], "rounds": 2, "chunks_kib": [1024, 4096]}


def register(subparsers: argparse._SubParsersAction) -> None:
    """Adds ``bench dataplane``."""
    harness.register(
        subparsers,
        "dataplane",
        __doc__,
        "bulk bytes: proto inline vs raw gRPC chunks vs Arrow Flight vs raw TCP",
        add_arguments,
        run,
    )


def add_arguments(p: argparse.ArgumentParser) -> None:
    p.add_argument(
        "--rows",
        type=int,
        nargs="+",
        default=list(DEFAULT_ROWS),
        help="payload sizes in 512 B rows (default 217000 16000 2000)",
    )
    p.add_argument("--rounds", type=int, default=5, help="samples per variant and size, round-robin (default 5)")
    p.add_argument(
        "--chunks-kib",
        type=int,
        nargs="+",
        default=[c >> 10 for c in CHUNKS],
        help="chunk sizes (default 256 1024 4096 16384)",
    )
    p.add_argument(
        "--sample-mb",
        type=float,
        default=100.0,
        help="at least this many MB per sample (small payloads repeat; default 100)",
    )
    p.add_argument("--tuned", default=TUNED, help=f"option set(s) of the chunk-size rows, '+'-joined (default {TUNED})")
    p.add_argument(
        "--sweep",
        nargs="*",
        default=list(SWEEP),
        help=f"option sets compared at --sweep-chunk-kib (default {' '.join(SWEEP)})",
    )
    p.add_argument("--sweep-chunk-kib", type=int, default=1024, help="chunk size of the option sweep (default 1024)")
    p.add_argument(
        "--transports", nargs="+", choices=TRANSPORTS, default=list(TRANSPORTS), help="transports to run (default all)"
    )
    p.add_argument("--quick", action="store_true", help="111 MB and 1 MB, 2 rounds, 1 and 4 MiB chunks, no sweep")
    p.add_argument("--list", action="store_true", help="print the variants and their gRPC options, run nothing")


def plan_of(args: argparse.Namespace) -> tuple[Plan, list[int], int]:
    """The plan, payload sizes (bytes) and rounds the arguments ask for (``--quick`` overrides)."""
    if args.quick:
        args.rows, args.rounds, args.chunks_kib, args.sweep = QUICK["rows"], QUICK["rounds"], QUICK["chunks_kib"], []
    for name in [args.tuned, *args.sweep]:
        options(name)  # KeyError on a typo, before any server starts
    plan = Plan(
        tuple(c << 10 for c in args.chunks_kib),
        args.tuned,
        tuple(args.sweep),
        args.sweep_chunk_kib << 10,
        tuple(args.transports),
    )
    return plan, [r * ROW_BYTES for r in args.rows], args.rounds


def run(args: argparse.Namespace) -> int:
    """``graphfeed bench dataplane``: measures, prints the markdown, writes JSON + markdown."""
    plan, sizes, rounds = plan_of(args)
    todo = variants(plan)
    if args.list:
        for v in todo:
            extra = [o for part in v.options.split("+") if part in OPTION_SETS for o in OPTION_SETS[part]]
            print(f"{v.name}{' (largest payload only)' if v.largest_only else ''}: {extra or ''}")
        return 0
    t0 = time.monotonic()
    cells = run_rounds(todo, sizes, rounds, int(args.sample_mb * 1e6))
    rows = [c.summary() for c in cells]
    import pyarrow

    machine = f"{os.cpu_count()} CPUs, grpcio {grpc.__version__}, pyarrow {pyarrow.__version__}"
    line = verdict(
        rows, Variant("grpc_raw_chunks", plan.sweep_chunk, plan.tuned).name, Variant("flight", plan.sweep_chunk).name
    )
    meta = {
        "seconds": time.monotonic() - t0,
        "machine": machine,
        "options": {name: options(name) for name in dict.fromkeys([plan.tuned, *plan.sweep, "graphfeed"])},
    }
    result = {"meta": meta, "verdict": line, "copies": COPIES, "results": rows}
    harness.write(args, result, markdown(rows, harness.command(), machine, line), "dataplane")
    return 0


if __name__ == "__main__":
    sys.exit(serve_main(sys.argv[1:]))
