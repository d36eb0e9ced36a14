"""gRPC adapter of the loader: JobSpec -> Loader.describe / Loader.stream -> protobuf."""

from __future__ import annotations

from collections.abc import Iterator

import grpc

from graphfeed.common import blocks, codec
from graphfeed.common.shm import Arena
from graphfeed.common.transport import Backpressure, ServerTransport
from graphfeed.loader.core import Loader
from graphfeed.loader.gather import ShmSink
from graphfeed.loader.job import JobInfo, JobSpec
from graphfeed.loader.minibatch import ReadyMinibatch
from graphfeed.loader.v1 import loader_pb2 as pb
from graphfeed.loader.v1 import loader_pb2_grpc as pb_grpc


def job_from_proto(msg: pb.JobSpec) -> JobSpec:
    """The domain job; an empty feature_name means "feat"; label_name is "label" when unset, "" for none."""
    return JobSpec(
        job_id=msg.job_id,
        job_seed=msg.job_seed,
        split=msg.split,
        batch_size=msg.batch_size,
        fanouts=tuple(msg.fanouts),
        replace=msg.replace,
        shuffle=msg.shuffle,
        drop_last=msg.drop_last,
        rank=msg.rank,
        world_size=msg.world_size,
        feature_name=msg.feature_name or "feat",
        label_name=msg.label_name if msg.HasField("label_name") else "label",
    )


def info_to_proto(info: JobInfo) -> pb.DescribeJobResponse:
    return pb.DescribeJobResponse(
        steps_per_epoch=info.steps_per_epoch,
        seeds_per_epoch=info.seeds_per_epoch,
        feature_row_shape=list(info.feature_row_shape),
        feature_dtype=codec.dtype_to_proto(info.feature_dtype),
        num_classes=info.num_classes,
        num_nodes=info.num_nodes,
    )


def minibatch_to_proto(mb: ReadyMinibatch, arena: Arena | None = None) -> pb.Minibatch:
    """The message for one minibatch; with an ``arena`` its arrays go to shared memory (the
    features are already in their own segment when the stream assembled them there)."""
    msg = pb.Minibatch(steps_per_epoch=mb.steps_per_epoch)
    msg.step_key.job_seed, msg.step_key.epoch, msg.step_key.step = mb.job_seed, mb.epoch, mb.step
    blocks.to_proto(mb.blocks, msg.blocks, arena)
    if mb.features_segment is not None and arena is not None:
        codec.encode_ref(mb.features.shape, mb.features.dtype, mb.features_segment, 0, msg.input_features, mb.features_recycle)
    else:
        codec.encode(mb.features, msg.input_features, arena)
    codec.encode(mb.labels, msg.labels, arena)
    s = mb.stats
    msg.stats.cache_hits, msg.stats.cache_misses = s.cache_hits, s.cache_misses
    msg.stats.remote_feature_bytes = s.remote_feature_bytes
    msg.stats.sample_seconds, msg.stats.gather_seconds = s.sample_seconds, s.gather_seconds
    return msg


class LoaderServicer(pb_grpc.LoaderServiceServicer):
    """Implements ``graphfeed.loader.v1.LoaderService``; errors come from the core."""

    def __init__(self, loader: Loader, transport: ServerTransport | None = None) -> None:
        self._loader = loader
        self._transport = transport or ServerTransport(None)

    def DescribeJob(self, request: pb.DescribeJobRequest, context: grpc.ServicerContext) -> pb.DescribeJobResponse:
        return info_to_proto(self._loader.describe(job_from_proto(request.job)))

    def StreamMinibatches(self, request: pb.StreamMinibatchesRequest, context: grpc.ServicerContext) -> Iterator[pb.Minibatch]:
        directory = self._transport.directory(context)
        if directory is None:
            stream = self._loader.stream(job_from_proto(request.job), request.epoch, request.start_step)
            context.add_callback(stream.close)  # a cancelled RPC stops the producer
            with stream:
                for mb in stream:
                    yield minibatch_to_proto(mb)
            return
        # Shared memory: features assembled in a segment per minibatch, the rest in an arena;
        # at most max_inflight minibatches sent and not yet claimed by the trainer.
        owner = object()
        pool = self._transport.pool(directory)
        sink = ShmSink(directory, self._transport.registry, owner, pool)
        stream = self._loader.stream(job_from_proto(request.job), request.epoch, request.start_step, sink)
        context.add_callback(stream.close)
        pressure = Backpressure(context, self._loader.max_inflight)
        try:
            with stream:
                for mb in stream:
                    arena = Arena(directory, self._transport.registry, owner, pool)
                    msg = minibatch_to_proto(mb, arena)
                    self._transport.finish(arena, "StreamMinibatches")
                    self._transport.count("StreamMinibatches", mb.features.nbytes)
                    sent = [directory / arena.name, directory / mb.features_segment]
                    if not pressure.wait():
                        return
                    pressure.sent(sent)
                    yield msg
        finally:
            if context.is_active():  # ended normally: the client may still read buffered messages
                self._transport.registry.release(owner)  # what it never claims goes after the TTL
            else:  # cancelled: nobody will claim what is left
                self._transport.registry.drop(owner)
