"""gRPC adapter of the sampler: SampleBlocksRequest -> MultiHopSampler.sample -> response."""

from __future__ import annotations

import time

import grpc

from graphfeed.common import blocks, codec
from graphfeed.common.transport import ServerTransport
from graphfeed.sampler.core import MultiHopSampler
from graphfeed.sampler.metrics import SamplerMetrics
from graphfeed.sampler.v1 import sampler_pb2 as pb
from graphfeed.sampler.v1 import sampler_pb2_grpc as pb_grpc


class SamplerServicer(pb_grpc.SamplerServiceServicer):
    """Implements ``graphfeed.sampler.v1.SamplerService``; errors come from the core."""

    def __init__(self, sampler: MultiHopSampler, metrics: SamplerMetrics, transport: ServerTransport | None = None) -> None:
        self._sampler = sampler
        self._m = metrics
        self._transport = transport or ServerTransport(None)

    def SampleBlocks(self, request: pb.SampleBlocksRequest, context: grpc.ServicerContext) -> pb.SampleBlocksResponse:
        seeds = codec.decode_ids(request.seeds, "seeds")
        key = request.step_key
        start = time.perf_counter()
        sb = self._sampler.sample(seeds, list(request.fanouts), request.replace, key.job_seed, key.epoch, key.step)
        self._m.sampling_latency.observe(time.perf_counter() - start)
        self._m.sampled_edges.inc(sb.num_sampled_edges)
        self._m.minibatches.inc()
        resp = pb.SampleBlocksResponse()
        arena = self._transport.arena(context)
        blocks.to_proto(sb, resp.blocks, arena)
        self._transport.finish(arena, "SampleBlocks")
        return resp
