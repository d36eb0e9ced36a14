"""gRPC adapter of the sampler: SampleBlocksRequest -> MultiHopSampler.sample -> response."""

from __future__ import annotations

from collections.abc import Callable, Sequence

import grpc
import numpy as np

from graphfeed.common import blocks, codec
from graphfeed.common.bulk import Outgoing
from graphfeed.common.errors import InvalidArgument
from graphfeed.common.schema import CanonicalEtype, etype_name
from graphfeed.common.transport import Response, ServerTransport
from graphfeed.graph_store.types import Fanout
from graphfeed.sampler.core import MultiHopSampler
from graphfeed.sampler.metrics import MeteredSampler, SamplerMetrics
from graphfeed.sampler.v1 import sampler_pb2 as pb
from graphfeed.sampler.v1 import sampler_pb2_grpc as pb_grpc

Arrays4 = tuple[np.ndarray, np.ndarray, np.ndarray, np.ndarray]


def decode_fanouts(request: pb.SampleBlocksRequest, etypes: Sequence[CanonicalEtype]) -> list[Fanout]:
    """The layers of a SampleBlocks request: ``fanouts[l]`` for every edge type, or with
    ``etype_fanouts`` (layer-major ``[len(fanouts), len(etypes)]``) one fanout per edge type.

    Raises:
        InvalidArgument: ``etype_fanouts`` of another size than ``len(fanouts) * len(etypes)``.
    """
    layers, flat, num_etypes = list(request.fanouts), list(request.etype_fanouts), len(etypes)
    if not flat or not layers:  # no layers at all is the sampler's to report
        return list(layers)
    if len(flat) != len(layers) * num_etypes:
        raise InvalidArgument(
            f"etype_fanouts has {len(flat)} entries for {len(layers)} layers; the graph has {num_etypes} edge "
            f"types {[etype_name(e) for e in etypes]}, so it needs {len(layers) * num_etypes} "
            "(one per layer and edge type, layer-major)"
        )
    return [flat[i * num_etypes : (i + 1) * num_etypes] for i in range(len(layers))]


def compaction_for(r: Response) -> tuple[Callable[[int, int], Arrays4] | None, bool]:
    """``(alloc, narrow)`` for :meth:`MultiHopSampler.sample` answering through ``r``. In shared
    memory the input layer (most of the bytes: ``input_nodes`` and the first block) is compacted
    into the response's segment, where it is sent; on a wire every block's edge arrays are
    compacted as int32 (half the bytes, written once), then encoded."""
    if not r.shared:
        return None, True

    def alloc(max_src: int, num_edges: int) -> Arrays4:
        nodes, edge_src, edge_dst, edge_ids = r.empty_many(
            [(max_src,), (num_edges,), (num_edges,), (num_edges,)], np.int64
        )
        return nodes, edge_src, edge_dst, edge_ids

    return alloc, False


class SamplerServicer(pb_grpc.SamplerServiceServicer):
    """Implements ``graphfeed.sampler.v1.SamplerService``; errors come from the core, domain
    metrics from :class:`MeteredSampler`, shared memory from the transport."""

    def __init__(
        self, sampler: MultiHopSampler, metrics: SamplerMetrics, transport: ServerTransport | None = None
    ) -> None:
        self._sampler = MeteredSampler(sampler, metrics)
        self._etypes = sampler.etypes
        self._transport = transport or ServerTransport(None)

    def SampleBlocks(
        self, request: pb.SampleBlocksRequest, context: grpc.ServicerContext
    ) -> pb.SampleBlocksResponse | Outgoing:
        seeds = codec.decode_ids(request.seeds, "seeds")
        fanouts, exclude = decode_fanouts(request, self._etypes), codec.decode_exclusion(request)
        key = request.step_key
        resp = pb.SampleBlocksResponse()
        with self._transport.response(context, "SampleBlocks") as r:
            alloc, narrow = compaction_for(r)
            sb = self._sampler.sample(
                seeds, fanouts, request.replace, key.job_seed, key.epoch, key.step, alloc, exclude, narrow
            )
            blocks.to_proto(sb, resp.blocks, r.encode, narrow=narrow)
        return r.framed(resp)
