"""gRPC adapter of the loader: JobSpec -> Loader.describe / Loader.stream -> protobuf."""

from __future__ import annotations

import threading
from collections.abc import Iterator
from contextlib import contextmanager

import grpc

from graphfeed.common import blocks, codec
from graphfeed.common.blocks import Encode
from graphfeed.common.bulk import Outgoing
from graphfeed.common.errors import ResourceExhausted
from graphfeed.common.limits import STREAM_CHUNK_BYTES
from graphfeed.common.schema import types_to_proto
from graphfeed.common.security import peer_identities
from graphfeed.common.transport import Response, ServerTransport, StreamCall
from graphfeed.loader.core import Loader
from graphfeed.loader.edges import EdgePairs
from graphfeed.loader.job import JobInfo
from graphfeed.loader.job_proto import job_from_proto
from graphfeed.loader.minibatch import ReadyMinibatch
from graphfeed.loader.stall import Progress, StallWatch
from graphfeed.loader.stream import MinibatchStream
from graphfeed.loader.v1 import loader_pb2 as pb
from graphfeed.loader.v1 import loader_pb2_grpc as pb_grpc


def info_to_proto(info: JobInfo) -> pb.DescribeJobResponse:
    return pb.DescribeJobResponse(
        steps_per_epoch=info.steps_per_epoch,
        seeds_per_epoch=info.seeds_per_epoch,
        feature_row_shape=list(info.feature_row_shape),
        feature_dtype=codec.dtype_to_proto(info.feature_dtype),
        num_classes=info.num_classes,
        num_nodes=info.num_nodes,
        types=types_to_proto(info.types, pb.DescribeJobResponse().types) if info.types is not None else None,
        typed_feature_shapes=[
            pb.TypedShape(ntype=t, row_shape=list(shape)) for t, shape in info.typed_feature_shapes.items()
        ],
        seed_etype=info.seed_etype,
    )


def minibatch_to_proto(mb: ReadyMinibatch, r: Response) -> pb.Minibatch:
    """The message for one minibatch, its arrays encoded by ``r`` (the features are referenced
    where the stream assembled them when that was in a shared-memory segment)."""
    msg = pb.Minibatch(steps_per_epoch=mb.steps_per_epoch)
    msg.step_key.job_seed, msg.step_key.epoch, msg.step_key.step = mb.job_seed, mb.epoch, mb.step
    blocks.to_proto(mb.blocks, msg.blocks, r.encode)
    r.adopt_placed(mb.features, mb.placed)
    r.encode(mb.features, msg.input_features)
    r.encode(mb.labels, msg.labels)
    for ntype, rows in mb.typed_features.items():
        r.adopt_placed(rows, mb.typed_placed.get(ntype))
        r.encode(rows, msg.typed_features.add(ntype=ntype).tensor)
    for ntype, rows in mb.typed_labels.items():
        r.encode(rows, msg.typed_labels.add(ntype=ntype).tensor)
    if mb.pairs is not None:
        pairs_to_proto(mb.pairs, msg.pairs, r.encode)
    s = mb.stats
    msg.stats.cache_hits, msg.stats.cache_misses = s.cache_hits, s.cache_misses
    msg.stats.remote_feature_bytes = s.remote_feature_bytes
    msg.stats.sample_seconds, msg.stats.gather_seconds = s.sample_seconds, s.gather_seconds
    return msg


def pairs_to_proto(pairs: EdgePairs, msg: pb.EdgePairs, encode: Encode) -> None:
    """An edge minibatch's pairs into ``msg`` (Minibatch.pairs), arrays through ``encode``."""
    msg.etype, msg.excluded_edges = pairs.etype, pairs.excluded_edges
    for name in ("src", "dst", "eids", "neg_src", "neg_dst"):
        encode(getattr(pairs, name), getattr(msg, name))


def send_minibatches(
    stream: MinibatchStream, call: StreamCall, max_unclaimed: int, chunk_bytes: int, progress: Progress
) -> Iterator[pb.Minibatch | Outgoing]:
    """Each minibatch of ``stream`` as a message of ``call``: its bulk in shared memory unless
    the stream's placement declined it, then inline in chunks of ``chunk_bytes`` (or parked on
    the bulk plane). At most ``max_unclaimed`` messages sent through shared memory or the bulk
    plane wait for the client to claim them;
    stops when the client has gone. Every wait on the client (a claim, a send: gRPC resumes
    this generator once it has sent the last message) runs on ``progress``'s clock."""
    pressure = call.backpressure(max_unclaimed)
    for mb in stream:
        with call.response(shared=not (mb.placed is not None and mb.placed.declined)) as r:
            msg = minibatch_to_proto(mb, r)
        with progress.waiting():
            if not pressure.wait():
                return
        frames = list(r.frames(msg, chunk_bytes))  # views of the arrays; parks them on the bulk plane if offered
        pressure.sent(r.paths, r.unread if r.tickets else None)
        for frame in frames:
            with progress.waiting():
                yield frame


class StreamSlots:
    """How many minibatch streams may be open at once, in all and per client. A stream holds a
    handler thread for as long as it is open, also when its client does not read; without a
    bound, a client that opens streams and never reads them would take every thread and the
    loader would answer no one. Beyond a bound a new stream is refused at once. Thread-safe.

    Args:
        total: streams open at once (keep it below the server's handler threads, so that
            DescribeJob is always answered).
        per_client: streams one client may hold open (see :func:`client_key`).
    """

    def __init__(self, total: int, per_client: int) -> None:
        self.total, self.per_client = max(1, total), max(1, per_client)
        self._lock = threading.Lock()
        self._open: dict[str, int] = {}

    @contextmanager
    def hold(self, client: str) -> Iterator[None]:
        """A slot for one stream of ``client`` for the ``with`` block.

        Raises:
            ResourceExhausted: the client, or the loader, has as many streams open as allowed.
        """
        with self._lock:
            mine, everyone = self._open.get(client, 0), sum(self._open.values())
            if mine >= self.per_client:
                raise ResourceExhausted(
                    f"this client already has {mine} minibatch streams open (max_streams_per_client)"
                )
            if everyone >= self.total:
                raise ResourceExhausted(
                    f"the loader has {everyone} minibatch streams open, its most: add loader "
                    "replicas or raise max_workers"
                )
            self._open[client] = mine + 1
        try:
            yield
        finally:
            with self._lock:
                self._open[client] -= 1
                if not self._open[client]:
                    del self._open[client]


def client_key(context: grpc.ServicerContext, offered: str) -> str:
    """Who a stream counts against: the verified client certificate's identity (mutual TLS),
    else the shared-memory offer's client (one process), else the peer's host: a client without
    either cannot pass its limit by opening more connections (each has its own port)."""
    who = sorted(peer_identities(context))
    if who:
        return f"identity:{who[0]}"
    if offered:
        return offered
    peer = context.peer() or ""  # "ipv4:127.0.0.1:51234", "ipv6:[::1]:51234", "unix:..."
    return "host:" + (peer.rsplit(":", 1)[0] if peer.startswith(("ipv4:", "ipv6:")) else peer)


class LoaderServicer(pb_grpc.LoaderServiceServicer):
    """Implements ``graphfeed.loader.v1.LoaderService``; errors come from the core.

    ``slots`` has no default: an unbounded one would let a client that never reads take every
    handler thread. The server derives them from its settings (``max_workers``,
    ``max_streams_per_client``).
    """

    def __init__(
        self,
        loader: Loader,
        slots: StreamSlots,
        transport: ServerTransport | None = None,
        chunk_bytes: int = STREAM_CHUNK_BYTES,
        stalls: StallWatch | None = None,
    ) -> None:
        self._loader = loader
        self._slots = slots
        self._stalls = stalls or StallWatch(0)
        self._transport = transport or ServerTransport(None)
        self._chunk_bytes = chunk_bytes  # bulk bytes per stream message without shared memory

    def DescribeJob(self, request: pb.DescribeJobRequest, context: grpc.ServicerContext) -> pb.DescribeJobResponse:
        return info_to_proto(self._loader.describe(job_from_proto(request.job)))

    def StreamMinibatches(
        self, request: pb.StreamMinibatchesRequest, context: grpc.ServicerContext
    ) -> Iterator[pb.Minibatch | Outgoing]:
        with (
            self._transport.stream(context, "StreamMinibatches") as call,
            self._slots.hold(client_key(context, call.client)),
            self._stalls.watch(context) as progress,
        ):
            job, placement = job_from_proto(request.job), call.placement(self._loader.host_placement)
            stream = self._loader.stream(job, request.epoch, request.start_step, placement)
            context.add_callback(stream.close)  # a cancelled RPC stops the producer
            with stream:
                yield from send_minibatches(stream, call, self._loader.max_inflight, self._chunk_bytes, progress)
