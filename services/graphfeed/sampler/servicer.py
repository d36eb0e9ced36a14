"""gRPC adapter of the sampler: SampleBlocksRequest -> MultiHopSampler.sample -> response."""

from __future__ import annotations

import time

import grpc
import numpy as np

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
        # Shared memory: the input layer (most of the bytes) is compacted straight into one
        # segment; the rest (seeds, the smaller blocks) goes into a second at the end.
        big = self._transport.arena(context)
        placed: dict[int, tuple[str, int, bool]] = {}
        segments: list = []

        def into_segment(max_src: int, num_edges: int) -> tuple[np.ndarray, ...]:
            shapes = ((max_src,), (num_edges,), (num_edges,), (num_edges,))
            offsets = [big.reserve(shape, np.int64) for shape in shapes]
            segments.append(big.finish())
            out = tuple(segments[0].array(at, shape, np.int64) for at, shape in zip(offsets, shapes))
            for arr, at in zip(out, offsets):
                placed[arr.ctypes.data] = (big.name, at, big.recycle)
            return out

        start = time.perf_counter()
        try:
            sb = self._sampler.sample(seeds, list(request.fanouts), request.replace, key.job_seed, key.epoch, key.step,
                                      into_segment if big is not None else None)  # fmt: skip
        finally:
            for seg in segments:
                seg.close()  # the arrays keep the mapping alive until encoded
        self._m.sampling_latency.observe(time.perf_counter() - start)
        self._m.sampled_edges.inc(sb.num_sampled_edges)
        self._m.minibatches.inc()
        resp = pb.SampleBlocksResponse()
        rest = self._transport.arena(context) if big is not None else None
        blocks.to_proto(sb, resp.blocks, rest, placed)
        self._transport.finish(rest, "SampleBlocks")
        if segments:  # the bytes laid out there (input_nodes fills a prefix of its reservation)
            first = sb.blocks[0]
            self._transport.count("SampleBlocks", sum(a.nbytes for a in (sb.input_nodes, first.edge_src, first.edge_dst, first.edge_ids)))
        return resp
