"""gRPC adapter over :class:`~graphfeed.graph_store.store.GraphStore`: proto in, one core call, proto out.

Errors are raised by the core as GraphfeedError subclasses and mapped to statuses by the
shared interceptor, so there is no try/except here.
"""

from __future__ import annotations

from collections.abc import Iterator

import grpc
import numpy as np

from graphfeed.common import codec
from graphfeed.common.errors import FailedPrecondition, InvalidArgument
from graphfeed.common.shm import PeerSegments
from graphfeed.common.transport import ServerTransport
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

    def __init__(self, store: GraphStore, metrics: GraphStoreMetrics, transport: ServerTransport | None = None) -> None:
        self._store = store
        self._m = metrics
        self._info = info_to_proto(store)
        self._transport = transport or ServerTransport(None)
        self._peer_segments = PeerSegments()  # loaders' feature segments, mapped once per file

    def GetPartitionInfo(self, request: pb.GetPartitionInfoRequest, context: grpc.ServicerContext) -> pb.GetPartitionInfoResponse:
        return self._info

    def SampleNeighbors(self, request: pb.SampleNeighborsRequest, context: grpc.ServicerContext) -> pb.SampleNeighborsResponse:
        seeds = codec.decode_ids(request.seeds, "seeds")
        resp = pb.SampleNeighborsResponse()
        arena = self._transport.arena(context)
        segments: list = []

        def into_segment(offsets: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
            # Shared memory: the kernel samples straight into the response's segment.
            codec.encode(offsets, resp.offsets, arena)
            shape = (int(offsets[-1]),)
            at_src = codec.encode_reserved(shape, np.dtype(np.int64), resp.src, arena)
            at_eids = codec.encode_reserved(shape, np.dtype(np.int64), resp.edge_ids, arena)
            segments.append(arena.finish())
            return segments[0].array(at_src, shape, np.int64), segments[0].array(at_eids, shape, np.int64)

        try:
            with self._m.sampling_latency.time():
                out = self._store.sample_neighbors(
                    seeds, request.fanout, request.replace, request.rng_seed, into_segment if arena is not None else None,
                    request.first_position,
                )
        finally:
            for seg in segments:
                seg.close()
        self._m.sampled_edges.inc(len(out.src))
        if arena is None:
            for arr, field in ((out.offsets, resp.offsets), (out.src, resp.src), (out.edge_ids, resp.edge_ids)):
                codec.encode(arr, field)
        else:
            self._transport.count("SampleNeighbors", arena.nbytes)
        return resp

    def GetNodeData(self, request: pb.GetNodeDataRequest, context: grpc.ServicerContext) -> Iterator[pb.GetNodeDataResponse]:
        ids = codec.decode_ids(request.ids, "ids", allow_empty=True)
        chunks = self._store.iter_node_data(request.name, ids)  # validates the name: labels stay a fixed set
        rows_total = self._m.node_data_rows.labels(request.name)
        bytes_total = self._m.node_data_bytes.labels(request.name)
        if request.HasField("target"):
            yield self._node_data_into(request, ids, context, bytes_total)
            rows_total.inc(len(ids))
            return
        arena = self._transport.arena(context)
        if arena is not None:  # one message; rows gathered straight into shared memory
            rows_total.inc(len(ids))
            yield self._node_data_shm(request.name, ids, arena, bytes_total)
            return
        for start, rows in chunks:
            resp = pb.GetNodeDataResponse(start=start)
            codec.encode(rows, resp.rows)
            rows_total.inc(len(rows))
            bytes_total.inc(rows.nbytes)
            yield resp

    def _node_data_into(self, request: pb.GetNodeDataRequest, ids: np.ndarray, context: grpc.ServicerContext, bytes_total) -> pb.GetNodeDataResponse:  # noqa: ANN001
        directory = self._transport.directory(context)
        if directory is None:
            raise FailedPrecondition("GetNodeData with a target needs a shared-memory offer this server can verify")
        t = request.target
        positions = codec.decode_ids(t.positions, "target.positions", allow_empty=True)
        info = self._store.info().node_data[request.name]
        shape, dtype = (int(t.num_rows), *info.row_shape), np.dtype(info.dtype)
        segment = self._peer_segments.open(directory, t.segment)
        try:
            try:
                out = segment.array(t.offset, shape, dtype)
            except ValueError as exc:
                raise InvalidArgument(f"target {t.segment}: {exc}") from None
            written = self._store.scatter_node_data(request.name, ids, out, positions)
        finally:
            segment.close()
        nbytes = written * dtype.itemsize * int(np.prod(info.row_shape, dtype=np.int64))
        bytes_total.inc(nbytes)
        self._transport.count("GetNodeData", nbytes)
        return pb.GetNodeDataResponse(start=0, rows_written=written)

    def _node_data_shm(self, name: str, ids: np.ndarray, arena, bytes_total) -> pb.GetNodeDataResponse:  # noqa: ANN001
        info = self._store.info().node_data[name]
        shape, dtype = (len(ids), *info.row_shape), np.dtype(info.dtype)
        resp = pb.GetNodeDataResponse(start=0)
        offset = codec.encode_reserved(shape, dtype, resp.rows, arena)
        segment = arena.finish()
        try:
            self._store.get_node_data(name, ids, out=segment.array(offset, shape, dtype))
        finally:
            segment.close()
        bytes_total.inc(int(np.prod(shape)) * dtype.itemsize)
        self._transport.count("GetNodeData", arena.nbytes)
        return resp

    def GetDegrees(self, request: pb.GetDegreesRequest, context: grpc.ServicerContext) -> pb.GetDegreesResponse:
        ids = codec.decode_ids(request.ids, "ids", allow_empty=True)
        resp = pb.GetDegreesResponse()
        codec.encode(self._store.get_degrees(ids), resp.degrees)
        return resp

    def GetSplit(self, request: pb.GetSplitRequest, context: grpc.ServicerContext) -> pb.GetSplitResponse:
        resp = pb.GetSplitResponse()
        codec.encode(self._store.get_split(request.name), resp.ids)
        return resp
