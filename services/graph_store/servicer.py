"""gRPC adapter over :class:`~graphfeed.graph_store.store.GraphStore`: proto in, one core call, proto out.

Errors are raised by the core as GraphfeedError subclasses and mapped to statuses by the
shared interceptor, so there is no try/except here.
"""

from __future__ import annotations

from collections.abc import Iterator

import grpc

from graphfeed.common import codec
from graphfeed.graph_store.metrics import GraphStoreMetrics
from graphfeed.graph_store.store import GraphStore
from graphfeed.graph_store.v1 import graph_store_pb2 as pb
from graphfeed.graph_store.v1 import graph_store_pb2_grpc as pb_grpc


def info_to_proto(store: GraphStore) -> pb.GetPartitionInfoResponse:
    """The GetPartitionInfo answer for ``store``."""
    info = store.info()
    return pb.GetPartitionInfoResponse(
        partition_id=info.partition_id,
        num_partitions=info.num_partitions,
        num_nodes=info.num_nodes,
        num_edges=info.num_edges,
        node_offsets=[int(x) for x in info.node_offsets],
        node_data=[
            pb.NodeDataSchema(name=d.name, dtype=codec.dtype_to_proto(d.dtype), row_shape=list(d.row_shape))
            for d in info.node_data.values()
        ],
        num_classes=info.num_classes,
        dataset=info.dataset,
        schema_version=info.schema_version,
        num_local_edges=info.num_local_edges,
        num_halo_nodes=info.num_halo_nodes,
    )


class GraphStoreServicer(pb_grpc.GraphStoreServiceServicer):
    """Implements ``graphfeed.graph_store.v1.GraphStoreService`` over one store."""

    def __init__(self, store: GraphStore, metrics: GraphStoreMetrics) -> None:
        self._store = store
        self._m = metrics
        self._info = info_to_proto(store)

    def GetPartitionInfo(self, request: pb.GetPartitionInfoRequest, context: grpc.ServicerContext) -> pb.GetPartitionInfoResponse:
        return self._info

    def SampleNeighbors(self, request: pb.SampleNeighborsRequest, context: grpc.ServicerContext) -> pb.SampleNeighborsResponse:
        seeds = codec.decode_ids(request.seeds, "seeds")
        with self._m.sampling_latency.time():
            out = self._store.sample_neighbors(seeds, request.fanout, request.replace, request.rng_seed)
        self._m.sampled_edges.inc(len(out.src))
        resp = pb.SampleNeighborsResponse()
        codec.encode(out.offsets, resp.offsets)
        codec.encode(out.src, resp.src)
        codec.encode(out.edge_ids, resp.edge_ids)
        return resp

    def GetNodeData(self, request: pb.GetNodeDataRequest, context: grpc.ServicerContext) -> Iterator[pb.GetNodeDataResponse]:
        ids = codec.decode_ids(request.ids, "ids", allow_empty=True)
        chunks = self._store.iter_node_data(request.name, ids)  # validates the name: labels stay a fixed set
        rows_total = self._m.node_data_rows.labels(request.name)
        bytes_total = self._m.node_data_bytes.labels(request.name)
        for start, rows in chunks:
            resp = pb.GetNodeDataResponse(start=start)
            codec.encode(rows, resp.rows)
            rows_total.inc(len(rows))
            bytes_total.inc(rows.nbytes)
            yield resp

    def GetDegrees(self, request: pb.GetDegreesRequest, context: grpc.ServicerContext) -> pb.GetDegreesResponse:
        ids = codec.decode_ids(request.ids, "ids", allow_empty=True)
        resp = pb.GetDegreesResponse()
        codec.encode(self._store.get_degrees(ids), resp.degrees)
        return resp

    def GetSplit(self, request: pb.GetSplitRequest, context: grpc.ServicerContext) -> pb.GetSplitResponse:
        resp = pb.GetSplitResponse()
        codec.encode(self._store.get_split(request.name), resp.ids)
        return resp
