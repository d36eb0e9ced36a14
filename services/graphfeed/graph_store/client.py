"""The client of one graph-store over gRPC (:class:`GraphStoreClient`).

Samplers, loaders and writers reach the graph-stores through a partition set
(:mod:`graphfeed.graph_store.partitions`), which holds one of these per partition."""

from __future__ import annotations

import logging
import operator
from collections.abc import Iterable
from concurrent.futures import Future
from typing import Any

import grpc
import numpy as np

from graphfeed.common import bulk, codec
from graphfeed.common.bulk import Received
from graphfeed.common.errors import DataLoss, FailedPrecondition, GraphfeedError, InvalidArgument, from_rpc_error
from graphfeed.common.futures import settle, then
from graphfeed.common.rpc import client_channel, streamed
from graphfeed.common.schema import DEFAULT_NTYPE, types_from_proto
from graphfeed.common.transport import ClientTransport
from graphfeed.graph_store.embeddings.client import EmbeddingCalls
from graphfeed.graph_store.rows_in_place import deferred, place_chunk
from graphfeed.graph_store.temporal.types import AppendAck, EdgeBatch, TemporalInfo, TemporalQuery, TemporalSample
from graphfeed.graph_store.types import (
    Exclusion,
    Fanout,
    NodeDataInfo,
    NodeDataTarget,
    PartitionInfo,
    RowsInto,
    SampledNeighbors,
)
from graphfeed.graph_store.v1 import graph_store_pb2 as pb
from graphfeed.graph_store.v1 import graph_store_pb2_grpc as pb_grpc

log = logging.getLogger(__name__)

# Reads, safe to send twice: retried on UNAVAILABLE (see graphfeed.common.rpc.client_channel).
# AppendEdges is idempotent per batch id but not retried here: its batches may exceed gRPC's
# retry buffer; graphfeed.graph_store.temporal.client retries it with the same batch id.
IDEMPOTENT_METHODS = (
    "GetPartitionInfo",
    "SampleNeighbors",
    "GetNodeData",
    "GetDegrees",
    "GetSplit",
    "SampleTemporal",
    "GetTemporalInfo",
    # idempotent by design: by name and spec, by (job, step, rank) and content, by step
    "CreateEmbedding",
    "PullEmbedding",
    "PushEmbeddingGrad",
    "SnapshotEmbedding",
)


def info_from_proto(resp: pb.GetPartitionInfoResponse) -> PartitionInfo:
    """The PartitionInfo of a GetPartitionInfo answer (a server that predates types: one type)."""
    node_offsets = np.asarray(resp.node_offsets, dtype=np.int64)
    return PartitionInfo(
        partition_id=resp.partition_id,
        num_partitions=resp.num_partitions,
        num_nodes=resp.num_nodes,
        num_edges=resp.num_edges,
        node_offsets=node_offsets,
        node_data={
            s.name: NodeDataInfo(s.name, codec.dtype_from_proto(s.dtype), tuple(s.row_shape), s.ntype or DEFAULT_NTYPE)
            for s in resp.node_data
        },
        num_classes=resp.num_classes,
        dataset=resp.dataset,
        schema_version=resp.schema_version,
        num_local_edges=resp.num_local_edges,
        num_halo_nodes=resp.num_halo_nodes,
        graph_version=resp.graph_version,
        schema=types_from_proto(resp.types, node_offsets.tolist(), resp.num_edges),
    )


def fanout_fields(fanout: Fanout) -> dict[str, Any]:
    """SampleNeighborsRequest's ``fanout``/``etype_fanouts`` for ``fanout``: an int goes in
    ``fanout`` (every edge type), a sequence in ``etype_fanouts`` (one per edge type); ``fanout``
    then holds its largest entry, which is the sequence itself for a graph of one edge type.

    Raises:
        InvalidArgument: a sequence that is empty or not of integers.
    """
    if isinstance(fanout, (int, np.integer)):
        return {"fanout": int(fanout)}
    try:
        values = [operator.index(f) for f in fanout]
    except TypeError:
        raise InvalidArgument(
            f"fanout must be an int or a sequence of ints (one per edge type), got {fanout!r}"
        ) from None
    if not values:
        raise InvalidArgument("fanout must name one fanout per edge type, got none")
    return {"fanout": max(values), "etype_fanouts": values}


class GraphStoreClient:
    """One graph-store over gRPC. Every call has a deadline; errors arrive as GraphfeedError.

    Args:
        address: ``host:port``.
        timeout_s: deadline of each call.
        shm_dir: shared-memory directory offered to the server for bulk answers ("" or None:
            inline bytes only; see :mod:`graphfeed.common.transport`).
        plane: offer to read large answers from the server's bulk plane (:mod:`graphfeed.common.plane`).
    """

    def __init__(self, address: str, timeout_s: float = 30.0, shm_dir: str | None = None, plane: bool = True) -> None:
        self.address = address
        self.timeout_s = timeout_s
        self._transport = ClientTransport(shm_dir, address, plane)
        self._writes_shared = self._transport.offer is not None  # the server may write rows into our memory
        self._channel = client_channel(address, pb.DESCRIPTOR.services_by_name["GraphStoreService"], IDEMPOTENT_METHODS)
        self._stub = pb_grpc.GraphStoreServiceStub(self._channel)
        # the answers with tensors, read as bulk-framed messages (graphfeed.common.bulk)
        name = pb.DESCRIPTOR.services_by_name["GraphStoreService"].full_name
        self._sample = bulk.unary_unary(
            self._channel,
            name,
            "SampleNeighbors",
            pb.SampleNeighborsRequest,
            pb.SampleNeighborsResponse,
            self._transport.fetch,
        )
        self._node_data = bulk.unary_stream(
            self._channel, name, "GetNodeData", pb.GetNodeDataRequest, pb.GetNodeDataResponse, self._transport.fetch
        )
        self._node_data_in_place = self._channel.unary_stream(
            f"/{name}/GetNodeData", pb.GetNodeDataRequest.SerializeToString, deferred(pb.GetNodeDataResponse)
        )
        self._temporal = bulk.unary_unary(
            self._channel,
            name,
            "SampleTemporal",
            pb.SampleTemporalRequest,
            pb.SampleTemporalResponse,
            self._transport.fetch,
        )
        self.embeddings = EmbeddingCalls(self._channel, address, timeout_s, self._transport)  # issue 25

    def info(self) -> PartitionInfo:
        """What the graph-store says about itself; waits (within the deadline) for it to come up."""
        try:
            resp = self._stub.GetPartitionInfo(
                pb.GetPartitionInfoRequest(), timeout=self.timeout_s, wait_for_ready=True
            )
        except grpc.RpcError as err:
            raise from_rpc_error(err, f"graph-store {self.address}") from None
        return info_from_proto(resp)

    def _unary_future(self, method, request, timeout_s: float | None = None) -> Future:  # noqa: ANN001
        """Starts a unary call; the returned future raises GraphfeedError on failure.

        Cancelling the future does not cancel the call: its answer may sit in a shared-memory
        segment lent to this client, which only reading the answer claims."""
        timeout = self.timeout_s if timeout_s is None else timeout_s
        call = method.future(request, timeout=timeout, metadata=self._transport.metadata)
        out: Future = Future()

        def done(c: grpc.Future) -> None:
            try:
                result = c.result()
            except grpc.RpcError as err:
                settle(out, exc=from_rpc_error(err, f"graph-store {self.address}"))
            else:
                settle(out, result=result)

        call.add_done_callback(done)
        return out

    def sample_neighbors_future(
        self,
        seeds: np.ndarray,
        fanout: Fanout,
        replace: bool,
        rng_seed: int,
        first_position: int = 0,
        exclude: Exclusion | None = None,
    ) -> Future[SampledNeighbors]:
        """Starts one SampleNeighbors call; ``fanout``: an int for every edge type, or one per
        edge type (sent as ``etype_fanouts``); ``exclude``: ``(dst gids, edge ids)`` pairs of
        edges to leave out (see :meth:`GraphStore.sample_neighbors`), sent as given."""
        req = pb.SampleNeighborsRequest(
            replace=replace, rng_seed=rng_seed, first_position=first_position, **fanout_fields(fanout)
        )
        codec.encode(np.asarray(seeds, dtype=np.int64), req.seeds)
        codec.encode_exclusion(exclude, req)
        raw = self._unary_future(self._sample, req)

        def decoded(rec: Received[pb.SampleNeighborsResponse]) -> SampledNeighbors:
            r, seg = rec.message, self._transport.reader()
            return SampledNeighbors(
                codec.decode(r.offsets, "offsets", seg, rec.bulk),
                codec.decode(r.src, "src", seg, rec.bulk),
                codec.decode(r.edge_ids, "edge_ids", seg, rec.bulk),
            )

        return then(raw, decoded)

    def sample_neighbors(
        self,
        seeds: np.ndarray,
        fanout: Fanout,
        replace: bool,
        rng_seed: int,
        first_position: int = 0,
        exclude: Exclusion | None = None,
    ) -> SampledNeighbors:
        """:meth:`sample_neighbors_future`, waited for."""
        return self.sample_neighbors_future(seeds, fanout, replace, rng_seed, first_position, exclude).result()

    def get_node_data(self, name: str, ids: np.ndarray) -> np.ndarray:
        """Rows of ``name`` for ``ids`` (owned here), reassembled from the server's chunks."""
        req = pb.GetNodeDataRequest(name=name)
        codec.encode(np.asarray(ids, dtype=np.int64), req.ids)
        seg = self._transport.reader()
        chunks = [codec.decode(r.message.rows, name, seg, r.bulk) for r in self._node_data_call(req)]
        if not chunks:  # the server always sends at least one chunk, empty ones included
            raise GraphfeedError(f"graph-store {self.address} sent no rows for {name!r}")
        return chunks[0] if len(chunks) == 1 else np.concatenate(chunks)

    def read_node_data(self, name: str, ids: np.ndarray, into: RowsInto) -> int:
        """Puts the rows of ``ids`` (owned here) where ``into`` says; returns the bytes of rows
        delivered.

        When ``into`` lies in shared memory that this client offers, the graph-store writes the
        rows there itself (only the ids cross the wire). If it cannot see that directory (it runs
        on another host: the write is refused while a read succeeds), this client says so once
        and stops asking: the rows are then read, each answer message's rows copied once, as
        they arrive, to their place.

        Raises:
            DataLoss: chunks that do not add up to one row per id of ``into.out``'s shape and dtype.
        """
        if into.shared is not None and self._writes_shared:
            try:
                written = self._scatter(name, ids, NodeDataTarget.of(into))
                return written * into.row_bytes
            except FailedPrecondition as exc:
                nbytes = self._read_into(name, ids, into.out, into.positions)  # raises if the store itself refuses
                offer = self._transport.offer
                if offer is not None and not (offer.directory / into.shared.segment).exists():
                    # Our own segment went (its stream was closed meanwhile): the store is not to blame.
                    return nbytes
                log.warning(
                    "graph-store %s cannot write into our shared memory (%s); reading rows from now on",
                    self.address,
                    exc,
                )
                self._writes_shared = False  # only once the store answered a read: a restart does not switch it off
                return nbytes
        return self._read_into(name, ids, into.out, into.positions)

    def _read_into(self, name: str, ids: np.ndarray, out: np.ndarray, positions: np.ndarray) -> int:
        """Writes the rows of ``ids`` into ``out[positions]`` as the server's chunks arrive;
        returns the bytes received."""
        req = pb.GetNodeDataRequest(name=name)
        codec.encode(np.asarray(ids, dtype=np.int64), req.ids)
        seg, got, nbytes = self._transport.reader(), 0, 0
        where = f"graph-store {self.address}: {name}"
        for r in self._node_data_call(req, stream=True, in_place=True):
            n, b = place_chunk(r, where, out, positions, self._transport.plane, seg)
            got, nbytes = got + n, nbytes + b
        if got != len(ids):
            raise DataLoss(f"graph-store {self.address} sent {got} rows of {name} for {len(ids)} ids")
        return nbytes

    def _scatter(self, name: str, ids: np.ndarray, target: NodeDataTarget) -> int:
        """Has the server write the rows of ``ids`` into ``target`` (shared memory); returns the
        rows written. FailedPrecondition when the server cannot see this client's directory."""
        req = pb.GetNodeDataRequest(name=name)
        codec.encode(np.asarray(ids, dtype=np.int64), req.ids)
        req.target.segment, req.target.offset, req.target.num_rows = target.segment, target.offset, target.num_rows
        codec.encode(np.asarray(target.positions, dtype=np.int64), req.target.positions)
        return sum(int(r.message.rows_written) for r in self._node_data_call(req))

    def _node_data_call(
        self, req: pb.GetNodeDataRequest, stream: bool = False, in_place: bool = False
    ) -> Iterable[Received[pb.GetNodeDataResponse]]:
        """The messages of one GetNodeData call (with this client's shared-memory offer): all
        of them, or with ``stream`` one by one as they arrive (cancelled if not read to the end);
        ``in_place``: bulk-plane bytes left for :func:`place_chunk` to read into their places."""
        method = self._node_data_in_place if in_place else self._node_data
        call = method(req, timeout=self.timeout_s, metadata=self._transport.metadata)
        try:
            if not stream:
                return list(call)
            return streamed(call, f"graph-store {self.address}")
        except grpc.RpcError as err:
            raise from_rpc_error(err, f"graph-store {self.address}") from None

    def get_degrees_future(self, ids: np.ndarray) -> Future[np.ndarray]:
        req = pb.GetDegreesRequest()
        codec.encode(np.asarray(ids, dtype=np.int64), req.ids)
        return then(self._unary_future(self._stub.GetDegrees, req), lambda r: codec.decode(r.degrees))

    def get_split(self, name: str) -> np.ndarray:
        try:
            resp = self._stub.GetSplit(pb.GetSplitRequest(name=name), timeout=self.timeout_s)
        except grpc.RpcError as err:
            raise from_rpc_error(err, f"graph-store {self.address}") from None
        return codec.decode(resp.ids)

    def append_edges_future(self, batch: EdgeBatch, timeout_s: float | None = None) -> Future[AppendAck]:
        """Starts one AppendEdges call (not retried here: see :mod:`graphfeed.graph_store.temporal.client`);
        ``timeout_s`` is this call's deadline (default: the client's)."""
        req = pb.AppendEdgesRequest(batch_id=batch.batch_id)
        for array, field in ((batch.src, req.src), (batch.dst, req.dst), (batch.t, req.t)):
            codec.encode(np.asarray(array, dtype=np.int64), field)
        if batch.efeat is not None:
            codec.encode(np.asarray(batch.efeat, dtype=np.float32), req.edge_feat)
        raw = self._unary_future(self._stub.AppendEdges, req, timeout_s)
        return then(
            raw,
            lambda r: AppendAck(
                int(r.first_eid), int(r.num_edges), bool(r.duplicate), int(r.visible_seq), int(r.appended)
            ),
        )

    def append_edges(
        self, batch_id: str, src: np.ndarray, dst: np.ndarray, t: np.ndarray, efeat: np.ndarray | None = None
    ) -> AppendAck:
        """Appends one batch (durable when this returns); see :meth:`append_edges_future`."""
        return self.append_edges_future(EdgeBatch(batch_id=batch_id, src=src, dst=dst, t=t, efeat=efeat)).result()

    def sample_temporal_future(self, query: TemporalQuery) -> Future[TemporalSample]:
        """Starts one SampleTemporal call: each root's in-edges strictly before its time
        (``TEMPORAL_SPEC``)."""
        enum = {"recent": pb.TEMPORAL_STRATEGY_RECENT, "uniform": pb.TEMPORAL_STRATEGY_UNIFORM}.get(query.strategy, 0)
        req = pb.SampleTemporalRequest(
            fanout=query.fanout,
            strategy=enum,  # type: ignore[arg-type]
            rng_seed=query.seed,
            first_position=query.first_position,
            with_features=query.with_features,
        )
        if query.as_of_appended is not None:
            req.as_of_appended = query.as_of_appended
        codec.encode(np.asarray(query.nodes, dtype=np.int64), req.nodes)
        codec.encode(np.asarray(query.times, dtype=np.int64), req.times)

        def decoded(rec: Received[pb.SampleTemporalResponse]) -> TemporalSample:
            r, seg = rec.message, self._transport.reader()
            offsets, nbr, ts, eid = (
                codec.decode(getattr(r, f), f, seg, rec.bulk) for f in ("offsets", "nbr", "ts", "eid")
            )
            efeat = codec.decode(r.edge_feat, "edge_feat", seg, rec.bulk) if r.HasField("edge_feat") else None
            return TemporalSample(offsets, nbr, ts, eid, efeat)

        return then(self._unary_future(self._temporal, req), decoded)

    def sample_temporal(self, nodes: np.ndarray, times: np.ndarray, fanout: int, **query: Any) -> TemporalSample:
        """One SampleTemporal call; ``query``: the other fields of :class:`TemporalQuery`."""
        return self.sample_temporal_future(TemporalQuery(nodes=nodes, times=times, fanout=fanout, **query)).result()

    def temporal_info(self) -> TemporalInfo:
        """The partition's temporal graph: sizes, time range, edge-feature width, sequence number."""
        try:
            r = self._stub.GetTemporalInfo(pb.GetTemporalInfoRequest(), timeout=self.timeout_s)
        except grpc.RpcError as err:
            raise from_rpc_error(err, f"graph-store {self.address}") from None
        min_t, max_t = (int(r.min_t), int(r.max_t)) if r.has_edges else (None, None)
        return TemporalInfo(
            int(r.num_edges),
            int(r.num_appended),
            int(r.num_rows),
            int(r.num_blocks),
            min_t,
            max_t,
            int(r.edge_feat_dim),
            int(r.seq),
        )

    def close(self) -> None:
        self._channel.close()
        self._transport.close()
