"""gRPC adapter over :class:`~graphfeed.graph_store.store.GraphStore`: proto in, one core call, proto out.

Errors are raised by the core as GraphfeedError subclasses and mapped to statuses by the
shared interceptor, so there is no try/except here.
"""

from __future__ import annotations

import math
import time
from collections.abc import Iterator

import grpc
import numpy as np
from prometheus_client import CollectorRegistry

from graphfeed.common import codec
from graphfeed.common.bulk import Outgoing
from graphfeed.common.errors import InvalidArgument, ResourceExhausted
from graphfeed.common.limits import EMBEDDING_WAIT_SLICE_S, STREAM_CHUNK_BYTES
from graphfeed.common.schema import types_to_proto
from graphfeed.common.transport import Response, ServerTransport
from graphfeed.common.v1 import tensor_pb2
from graphfeed.graph_store.embeddings import wire
from graphfeed.graph_store.metrics import (
    EmbeddingMetrics,
    GraphStoreMetrics,
    MeteredEmbeddings,
    MeteredGraphStore,
    MeteredTemporal,
    TemporalMetrics,
)
from graphfeed.graph_store.sampling import Alloc
from graphfeed.graph_store.store import GraphStore
from graphfeed.graph_store.temporal.store import TemporalInfo, TemporalSample
from graphfeed.graph_store.temporal.types import TemporalQuery
from graphfeed.graph_store.v1 import graph_store_pb2 as pb
from graphfeed.graph_store.v1 import graph_store_pb2_grpc as pb_grpc


def info_to_proto(store: GraphStore) -> pb.GetPartitionInfoResponse:
    """The GetPartitionInfo answer for ``store``."""
    info = store.info()
    resp = pb.GetPartitionInfoResponse(
        partition_id=info.partition_id,
        num_partitions=info.num_partitions,
        num_nodes=info.num_nodes,
        num_edges=info.num_edges,
        node_offsets=[int(x) for x in info.node_offsets],
        node_data=[
            pb.NodeDataSchema(
                name=d.name, dtype=codec.dtype_to_proto(d.dtype), row_shape=list(d.row_shape), ntype=d.ntype
            )
            for d in info.node_data.values()
        ],
        num_classes=info.num_classes,
        dataset=info.dataset,
        schema_version=info.schema_version,
        num_local_edges=info.num_local_edges,
        num_halo_nodes=info.num_halo_nodes,
        graph_version=info.graph_version,
    )
    types_to_proto(info.types, resp.types)  # the one-type schema too: a client need not derive it
    return resp


def decode_fanout(request: pb.SampleNeighborsRequest) -> int | list[int]:
    """The fanout a SampleNeighbors request asks for: one per edge type (``etype_fanouts``), or
    ``fanout`` for every edge type when that is empty; the store checks count and range."""
    return list(request.etype_fanouts) if len(request.etype_fanouts) else int(request.fanout)


def sample_into(r: Response, resp: pb.SampleNeighborsResponse, narrow: bool = False) -> Alloc:
    """The sampling kernel's allocator for ``resp``: the offsets are encoded first, then
    ``src`` and ``edge_ids`` are sampled straight into the response (its segment, when shared).
    ``narrow``: int32 arrays when the answer goes inline (the caller knows every id fits): half
    the bytes of the sampler's hop, whose cost on the wire is per byte."""

    def alloc(offsets: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
        r.encode(offsets, resp.offsets)
        dtype = np.int32 if narrow and not r.shared else np.int64
        src, eids = r.empty_many([(int(offsets[-1]),)] * 2, dtype)
        return src, eids

    return alloc


def node_data_chunks(
    store: MeteredGraphStore, name: str, ids: np.ndarray, r: Response
) -> Iterator[tuple[int, np.ndarray]]:
    """GetNodeData's ``(start, rows)`` chunks: every row gathered at once into the response's
    segment when it has one that takes them (one message holds any size there), or into one
    pooled array for the bulk plane, else the store's chunks of bounded size, also when the
    segment is refused (the whole answer is never built in one ordinary array). Validates the
    name and ids at the call."""
    chunks = store.iter_node_data(name, ids)
    spec = store.info().node_data[name]
    shape = (len(ids), *spec.row_shape)
    out = r.shared_empty(shape, spec.dtype) if r.shared else r.plane_empty(shape, spec.dtype)
    if out is None:
        return chunks
    return iter([(0, store.get_node_data(name, ids, out=out))])


def node_data_messages(
    store: MeteredGraphStore, name: str, ids: np.ndarray, r: Response
) -> Iterator[pb.GetNodeDataResponse | Outgoing]:
    """GetNodeData's answer messages for ``ids`` (see :func:`node_data_chunks`); rows built
    whole for the bulk plane that it then refuses (it holds too much) go in bounded slices."""
    for start, rows in node_data_chunks(store, name, ids, r):
        resp = pb.GetNodeDataResponse(start=start)
        r.encode(rows, resp.rows)
        out = r.framed(resp)
        parked = isinstance(out, Outgoing) and out.elsewhere > 0
        if r.plane is None or r.shared or parked or rows.nbytes <= STREAM_CHUNK_BYTES:
            yield out
            continue
        step = max(1, STREAM_CHUNK_BYTES // max(1, rows[:1].nbytes))
        for at in range(0, len(rows), step):
            resp = pb.GetNodeDataResponse(start=start + at)
            r.encode(rows[at : at + step], resp.rows)
            yield r.framed(resp)


def scatter_into_target(store: MeteredGraphStore, request: pb.GetNodeDataRequest, ids: np.ndarray, r: Response) -> int:
    """Writes the rows of ``ids`` into the caller's segment that ``request.target`` names;
    returns the rows written (the caller's name and ids are checked before its segment)."""
    store.iter_node_data(request.name, ids)  # validates: a bad name or id is reported first
    t = request.target
    spec = store.info().node_data[request.name]
    out = r.peer_array(t.segment, t.offset, (int(t.num_rows), *spec.row_shape), spec.dtype)
    positions = codec.decode_ids(t.positions, "target.positions", allow_empty=True)
    written = store.scatter_node_data(request.name, ids, out, positions)
    r.count(written * out.itemsize * math.prod(spec.row_shape))
    return written


def wait_budget(context: grpc.ServicerContext) -> float:
    """Seconds a call may wait for a step: at most EMBEDDING_WAIT_SLICE_S (the client asks again),
    and less than its deadline, so that the core's DeadlineExceeded (saying which pushes are
    missing) reaches the caller before gRPC's own."""
    left = context.time_remaining()
    return EMBEDDING_WAIT_SLICE_S if left is None else max(0.0, min(EMBEDDING_WAIT_SLICE_S, left - 0.05))


STRATEGIES: dict[int, str] = {pb.TEMPORAL_STRATEGY_RECENT: "recent", pb.TEMPORAL_STRATEGY_UNIFORM: "uniform"}


def bounded(tensor: tensor_pb2.Tensor, limit: int, what: str) -> tensor_pb2.Tensor:
    """``tensor`` after checking, from its shape alone, that it has at most ``limit`` rows
    (ResourceExhausted), so that an oversized request is refused before anything is decoded."""
    rows = int(tensor.shape[0]) if len(tensor.shape) else 0
    if rows > limit:
        raise ResourceExhausted(f"{what}: {rows} rows in one request exceed the limit of {limit}; split the request")
    return tensor


def decode_strategy(value: int) -> str:
    """The core's name of a TemporalStrategy (InvalidArgument for UNSPECIFIED or unknown)."""
    if value not in STRATEGIES:
        raise InvalidArgument(f"strategy must be TEMPORAL_STRATEGY_RECENT or TEMPORAL_STRATEGY_UNIFORM, got {value}")
    return STRATEGIES[value]


def decode_feat(tensor: tensor_pb2.Tensor) -> np.ndarray:
    """Edge features as sent: float32 (InvalidArgument for any other dtype)."""
    feat = codec.decode(tensor, "edge_feat")
    if feat.dtype != np.float32:
        raise InvalidArgument(f"edge_feat must be DTYPE_FLOAT32, got {feat.dtype}")
    return feat


def temporal_query_from_proto(request: pb.SampleTemporalRequest, max_ids: int) -> TemporalQuery:
    """The query of a SampleTemporal request (its roots bounded by ``max_ids`` before decoding)."""
    return TemporalQuery(
        nodes=codec.decode_ids(bounded(request.nodes, max_ids, "nodes"), "nodes", allow_empty=True),
        times=codec.decode_ids(bounded(request.times, max_ids, "times"), "times", allow_empty=True),
        fanout=request.fanout,
        strategy=decode_strategy(request.strategy),
        seed=request.rng_seed,
        first_position=request.first_position,
        with_features=request.with_features,
        as_of_appended=request.as_of_appended if request.HasField("as_of_appended") else None,
    )


def temporal_sample_to_proto(out: TemporalSample, r: Response) -> pb.SampleTemporalResponse:
    """The SampleTemporal answer, its arrays encoded by ``r``."""
    resp = pb.SampleTemporalResponse()
    for array, field in ((out.offsets, resp.offsets), (out.nbr, resp.nbr), (out.ts, resp.ts), (out.eid, resp.eid)):
        r.encode(array, field)
    if out.efeat is not None:
        r.encode(out.efeat, resp.edge_feat)
    return resp


def temporal_info_to_proto(info: TemporalInfo) -> pb.GetTemporalInfoResponse:
    """The GetTemporalInfo answer for ``info``."""
    has = info.min_t is not None and info.max_t is not None
    return pb.GetTemporalInfoResponse(
        num_edges=info.num_edges,
        num_appended=info.num_appended,
        num_rows=info.num_rows,
        num_blocks=info.num_blocks,
        has_edges=has,
        min_t=info.min_t or 0,
        max_t=info.max_t or 0,
        edge_feat_dim=info.edge_feat_dim,
        seq=info.seq,
    )


class GraphStoreServicer(pb_grpc.GraphStoreServiceServicer):
    """Implements ``graphfeed.graph_store.v1.GraphStoreService`` over one store.

    Shared memory or inline is the transport's business (:class:`ServerTransport`); the
    domain metrics are recorded around the core calls (:class:`MeteredGraphStore`).
    """

    def __init__(
        self,
        store: GraphStore,
        metrics: GraphStoreMetrics,
        transport: ServerTransport | None = None,
        temporal_metrics: TemporalMetrics | None = None,
        embedding_metrics: EmbeddingMetrics | None = None,
    ) -> None:
        self._store = MeteredGraphStore(store, metrics)
        self._temporal = MeteredTemporal(store, temporal_metrics or TemporalMetrics.create(CollectorRegistry()))
        self._emb = MeteredEmbeddings(
            store.embeddings, embedding_metrics or EmbeddingMetrics.create(CollectorRegistry())
        )
        self._max_ids = store.max_ids_per_request
        self._info = info_to_proto(store)
        # SampleNeighbors reads the ingest-time graph: its gids and edge ids are below these.
        self._ids_fit_int32 = max(self._info.num_nodes, self._info.num_edges) < 2**31
        self._transport = transport or ServerTransport(None)

    def GetPartitionInfo(
        self, request: pb.GetPartitionInfoRequest, context: grpc.ServicerContext
    ) -> pb.GetPartitionInfoResponse:
        return self._info

    def SampleNeighbors(
        self, request: pb.SampleNeighborsRequest, context: grpc.ServicerContext
    ) -> pb.SampleNeighborsResponse | Outgoing:
        seeds, fanout = codec.decode_ids(request.seeds, "seeds"), decode_fanout(request)
        exclude = codec.decode_exclusion(request)
        resp = pb.SampleNeighborsResponse()
        with self._transport.response(context, "SampleNeighbors") as r:
            into = sample_into(r, resp, narrow=self._ids_fit_int32)
            out = self._store.sample_neighbors(
                seeds, fanout, request.replace, request.rng_seed, into, request.first_position, exclude
            )
            r.encode(out.src, resp.src)  # the offsets were encoded when the kernel asked for room
            r.encode(out.edge_ids, resp.edge_ids)
        return r.framed(resp)

    def GetNodeData(
        self, request: pb.GetNodeDataRequest, context: grpc.ServicerContext
    ) -> Iterator[pb.GetNodeDataResponse | Outgoing]:
        ids = codec.decode_ids(request.ids, "ids", allow_empty=True)
        with self._transport.response(context, "GetNodeData") as r:
            if request.HasField("target"):  # rows go into the caller's own segment, none in the message
                yield pb.GetNodeDataResponse(start=0, rows_written=scatter_into_target(self._store, request, ids, r))
                return
            yield from node_data_messages(self._store, request.name, ids, r)

    def GetDegrees(self, request: pb.GetDegreesRequest, context: grpc.ServicerContext) -> pb.GetDegreesResponse:
        ids = codec.decode_ids(request.ids, "ids", allow_empty=True)
        resp = pb.GetDegreesResponse()
        codec.encode(self._store.get_degrees(ids), resp.degrees)
        return resp

    def GetSplit(self, request: pb.GetSplitRequest, context: grpc.ServicerContext) -> pb.GetSplitResponse:
        resp = pb.GetSplitResponse()
        codec.encode(self._store.get_split(request.name), resp.ids)
        return resp

    def AppendEdges(self, request: pb.AppendEdgesRequest, context: grpc.ServicerContext) -> pb.AppendEdgesResponse:
        arrived = time.perf_counter()
        limit = self._temporal.temporal.max_append_edges
        src, dst, t = (
            codec.decode_ids(bounded(getattr(request, f), limit, f), f, allow_empty=True) for f in ("src", "dst", "t")
        )
        feat = decode_feat(bounded(request.edge_feat, limit, "edge_feat")) if request.HasField("edge_feat") else None
        ack = self._temporal.append(request.batch_id, src, dst, t, feat, arrived)
        return pb.AppendEdgesResponse(
            first_eid=ack.first_eid,
            num_edges=ack.num_edges,
            duplicate=ack.duplicate,
            visible_seq=ack.visible_seq,
            appended=ack.appended,
        )

    def SampleTemporal(
        self, request: pb.SampleTemporalRequest, context: grpc.ServicerContext
    ) -> pb.SampleTemporalResponse | Outgoing:
        out = self._temporal.sample(temporal_query_from_proto(request, self._max_ids))
        with self._transport.response(context, "SampleTemporal") as r:
            resp = temporal_sample_to_proto(out, r)
        return r.framed(resp)

    def GetTemporalInfo(
        self, request: pb.GetTemporalInfoRequest, context: grpc.ServicerContext
    ) -> pb.GetTemporalInfoResponse:
        return temporal_info_to_proto(self._temporal.info())

    def CreateEmbedding(
        self, request: pb.CreateEmbeddingRequest, context: grpc.ServicerContext
    ) -> pb.CreateEmbeddingResponse:
        return wire.created_to_proto(self._emb.store.create(wire.spec_from_proto(request.spec)))

    def PullEmbedding(
        self, request: pb.PullEmbeddingRequest, context: grpc.ServicerContext
    ) -> Iterator[pb.PullEmbeddingResponse | Outgoing]:
        ids = codec.decode_ids(bounded(request.ids, self._max_ids, "ids"), "ids", allow_empty=True)
        chunks = self._emb.iter_pull(request.name, ids, wire.optional_key(request, "after"), wait_budget(context))
        with self._transport.response(context, "PullEmbedding") as r:
            for start, rows in chunks:
                resp = pb.PullEmbeddingResponse(start=start)
                r.encode(rows, resp.rows)
                yield r.framed(resp)

    def PushEmbeddingGrad(
        self, request: pb.PushEmbeddingGradRequest, context: grpc.ServicerContext
    ) -> pb.PushEmbeddingGradResponse:
        ids = codec.decode_ids(bounded(request.ids, self._max_ids, "ids"), "ids", allow_empty=True)
        grads = codec.decode(bounded(request.grads, self._max_ids, "grads"), "grads")
        step, rank, world = wire.key_from_proto(request.step), request.rank, request.world_size
        return wire.ack_to_proto(self._emb.push(request.name, request.job, step, rank, world, ids, grads))

    def SnapshotEmbedding(
        self, request: pb.SnapshotEmbeddingRequest, context: grpc.ServicerContext
    ) -> pb.SnapshotEmbeddingResponse:
        step = wire.key_from_proto(request.step)
        return pb.SnapshotEmbeddingResponse(created=self._emb.store.snapshot(request.name, step, wait_budget(context)))

    def RestoreEmbedding(
        self, request: pb.RestoreEmbeddingRequest, context: grpc.ServicerContext
    ) -> pb.RestoreEmbeddingResponse:
        self._emb.store.restore(request.name, wire.optional_key(request, "step"))
        resp = pb.RestoreEmbeddingResponse()
        wire.key_to_proto(self._emb.store.table(request.name).applied, resp.applied)
        return resp
