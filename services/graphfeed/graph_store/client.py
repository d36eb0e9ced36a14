"""Clients of the graph-store: one partition over gRPC, and a whole partition set.

:class:`RemotePartitionSet` is what samplers and loaders use; :class:`LocalPartitionSet` wraps
in-process stores with the same interface (multi-partition logic unit-tested without sockets)."""

from __future__ import annotations

import contextlib
from collections.abc import Callable, Iterable, Sequence
from concurrent.futures import Future, InvalidStateError, ThreadPoolExecutor
from typing import TYPE_CHECKING, Any, TypeVar

import grpc
import numpy as np

from graphfeed.common import bulk, codec
from graphfeed.common.bulk import Received
from graphfeed.common.errors import DataLoss, FailedPrecondition, GraphfeedError, from_rpc_error
from graphfeed.common.rpc import client_channel, streamed
from graphfeed.common.transport import ClientTransport
from graphfeed.graph_store.temporal import AppendAck, TemporalInfo, TemporalSample
from graphfeed.graph_store.types import NodeDataInfo, NodeDataTarget, PartitionInfo, SampledNeighbors
from graphfeed.graph_store.v1 import graph_store_pb2 as pb
from graphfeed.graph_store.v1 import graph_store_pb2_grpc as pb_grpc

if TYPE_CHECKING:
    from graphfeed.graph_store.store import GraphStore

# Reads, safe to send twice: retried on UNAVAILABLE (see graphfeed.common.rpc.client_channel).
# AppendEdges is idempotent per batch id but not retried here: its batches may exceed gRPC's
# retry buffer; graphfeed.graph_store.temporal_client retries it with the same batch id.
IDEMPOTENT_METHODS = (
    "GetPartitionInfo",
    "SampleNeighbors",
    "GetNodeData",
    "GetDegrees",
    "GetSplit",
    "SampleTemporal",
    "GetTemporalInfo",
)


def info_from_proto(resp: pb.GetPartitionInfoResponse) -> PartitionInfo:
    return PartitionInfo(
        partition_id=resp.partition_id,
        num_partitions=resp.num_partitions,
        num_nodes=resp.num_nodes,
        num_edges=resp.num_edges,
        node_offsets=np.asarray(resp.node_offsets, dtype=np.int64),
        node_data={
            s.name: NodeDataInfo(s.name, codec.dtype_from_proto(s.dtype), tuple(s.row_shape)) for s in resp.node_data
        },
        num_classes=resp.num_classes,
        dataset=resp.dataset,
        schema_version=resp.schema_version,
        num_local_edges=resp.num_local_edges,
        num_halo_nodes=resp.num_halo_nodes,
        graph_version=resp.graph_version,
    )


class GraphStoreClient:
    """One graph-store over gRPC. Every call has a deadline; errors arrive as GraphfeedError.

    Args:
        address: ``host:port``.
        timeout_s: deadline of each call.
        shm_dir: shared-memory directory offered to the server for bulk answers ("" or None:
            inline bytes only; see :mod:`graphfeed.common.transport`).
    """

    def __init__(self, address: str, timeout_s: float = 30.0, shm_dir: str | None = None) -> None:
        self.address = address
        self.timeout_s = timeout_s
        self._transport = ClientTransport(shm_dir)
        self._channel = client_channel(address, pb.DESCRIPTOR.services_by_name["GraphStoreService"], IDEMPOTENT_METHODS)
        self._stub = pb_grpc.GraphStoreServiceStub(self._channel)
        # the answers with tensors, read as bulk-framed messages (graphfeed.common.bulk)
        name = pb.DESCRIPTOR.services_by_name["GraphStoreService"].full_name
        self._sample = bulk.unary_unary(
            self._channel, name, "SampleNeighbors", pb.SampleNeighborsRequest, pb.SampleNeighborsResponse
        )
        self._node_data = bulk.unary_stream(
            self._channel, name, "GetNodeData", pb.GetNodeDataRequest, pb.GetNodeDataResponse
        )
        self._temporal = bulk.unary_unary(
            self._channel, name, "SampleTemporal", pb.SampleTemporalRequest, pb.SampleTemporalResponse
        )

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
                _settle(out, exc=from_rpc_error(err, f"graph-store {self.address}"))
            else:
                _settle(out, result=result)

        call.add_done_callback(done)
        return out

    def sample_neighbors_future(
        self, seeds: np.ndarray, fanout: int, replace: bool, rng_seed: int, first_position: int = 0
    ) -> Future[SampledNeighbors]:
        req = pb.SampleNeighborsRequest(
            fanout=fanout, replace=replace, rng_seed=rng_seed, first_position=first_position
        )
        codec.encode(np.asarray(seeds, dtype=np.int64), req.seeds)
        raw = self._unary_future(self._sample, req)

        def decoded(rec: Received[pb.SampleNeighborsResponse]) -> SampledNeighbors:
            r, seg = rec.message, self._transport.reader()
            return SampledNeighbors(
                codec.decode(r.offsets, "offsets", seg, rec.bulk),
                codec.decode(r.src, "src", seg, rec.bulk),
                codec.decode(r.edge_ids, "edge_ids", seg, rec.bulk),
            )

        return _then(raw, decoded)

    def sample_neighbors(
        self, seeds: np.ndarray, fanout: int, replace: bool, rng_seed: int, first_position: int = 0
    ) -> SampledNeighbors:
        return self.sample_neighbors_future(seeds, fanout, replace, rng_seed, first_position).result()

    def get_node_data(self, name: str, ids: np.ndarray) -> np.ndarray:
        """Rows of ``name`` for ``ids`` (owned here), reassembled from the server's chunks."""
        req = pb.GetNodeDataRequest(name=name)
        codec.encode(np.asarray(ids, dtype=np.int64), req.ids)
        seg = self._transport.reader()
        chunks = [codec.decode(r.message.rows, name, seg, r.bulk) for r in self._node_data_call(req)]
        if not chunks:  # the server always sends at least one chunk, empty ones included
            raise GraphfeedError(f"graph-store {self.address} sent no rows for {name!r}")
        return chunks[0] if len(chunks) == 1 else np.concatenate(chunks)

    def read_node_data_into(self, name: str, ids: np.ndarray, out: np.ndarray, positions: np.ndarray) -> int:
        """Writes the rows of ``ids`` (owned here) into ``out[positions]`` as the server's chunks
        arrive, each copied once from its message; returns the bytes received.

        Raises:
            DataLoss: chunks that do not add up to one row per id of ``out``'s shape and dtype.
        """
        req = pb.GetNodeDataRequest(name=name)
        codec.encode(np.asarray(ids, dtype=np.int64), req.ids)
        seg, got, nbytes = self._transport.reader(), 0, 0
        for r in self._node_data_call(req, stream=True):
            rows = codec.decode(r.message.rows, name, seg, r.bulk)
            start, n = int(r.message.start), len(rows)
            if rows.shape[1:] != out.shape[1:] or rows.dtype != out.dtype or not 0 <= start <= len(ids) - n:
                raise DataLoss(
                    f"graph-store {self.address}: {name} chunk at {start} of {rows.shape} {rows.dtype} "
                    f"does not fit {len(ids)} rows of {out.shape[1:]} {out.dtype}"
                )
            out[positions[start : start + n]] = rows
            got, nbytes = got + n, nbytes + rows.nbytes
        if got != len(ids):
            raise DataLoss(f"graph-store {self.address} sent {got} rows of {name} for {len(ids)} ids")
        return nbytes

    @property
    def shares_memory(self) -> bool:
        """Whether this client offers a shared directory (direct writes may then work)."""
        return self._transport.offer is not None

    def scatter_node_data(self, name: str, ids: np.ndarray, target: NodeDataTarget) -> int:
        """Has the server write the rows of ``ids`` into ``target`` (shared memory); returns the
        rows written. FailedPrecondition when the server cannot see this client's directory."""
        req = pb.GetNodeDataRequest(name=name)
        codec.encode(np.asarray(ids, dtype=np.int64), req.ids)
        req.target.segment, req.target.offset, req.target.num_rows = target.segment, target.offset, target.num_rows
        codec.encode(np.asarray(target.positions, dtype=np.int64), req.target.positions)
        return sum(int(r.message.rows_written) for r in self._node_data_call(req))

    def _node_data_call(
        self, req: pb.GetNodeDataRequest, stream: bool = False
    ) -> Iterable[Received[pb.GetNodeDataResponse]]:
        """The messages of one GetNodeData call (with this client's shared-memory offer): all
        of them, or with ``stream`` one by one as they arrive (cancelled if not read to the end)."""
        call = self._node_data(req, timeout=self.timeout_s, metadata=self._transport.metadata)
        try:
            if not stream:
                return list(call)
            return streamed(call, f"graph-store {self.address}")
        except grpc.RpcError as err:
            raise from_rpc_error(err, f"graph-store {self.address}") from None

    def get_degrees_future(self, ids: np.ndarray) -> Future[np.ndarray]:
        req = pb.GetDegreesRequest()
        codec.encode(np.asarray(ids, dtype=np.int64), req.ids)
        return _then(self._unary_future(self._stub.GetDegrees, req), lambda r: codec.decode(r.degrees))

    def get_split(self, name: str) -> np.ndarray:
        try:
            resp = self._stub.GetSplit(pb.GetSplitRequest(name=name), timeout=self.timeout_s)
        except grpc.RpcError as err:
            raise from_rpc_error(err, f"graph-store {self.address}") from None
        return codec.decode(resp.ids)

    def append_edges_future(
        self,
        batch_id: str,
        src: np.ndarray,
        dst: np.ndarray,
        t: np.ndarray,
        efeat: np.ndarray | None = None,
        timeout_s: float | None = None,
    ) -> Future[AppendAck]:
        """Starts one AppendEdges call (not retried: see :mod:`graphfeed.graph_store.temporal_client`).

        Args:
            batch_id: the batch's id; a retry must send the same id and edges.
            src, dst, t: int64 [n] (``dst`` owned by this graph-store); efeat: float32 [n, D] or None.
            timeout_s: this call's deadline (default: the client's).
        """
        req = pb.AppendEdgesRequest(batch_id=batch_id)
        for array, field in ((src, req.src), (dst, req.dst), (t, req.t)):
            codec.encode(np.asarray(array, dtype=np.int64), field)
        if efeat is not None:
            codec.encode(np.asarray(efeat, dtype=np.float32), req.edge_feat)
        raw = self._unary_future(self._stub.AppendEdges, req, timeout_s)
        return _then(
            raw, lambda r: AppendAck(int(r.first_eid), int(r.num_edges), bool(r.duplicate), int(r.visible_seq))
        )

    def append_edges(
        self, batch_id: str, src: np.ndarray, dst: np.ndarray, t: np.ndarray, efeat: np.ndarray | None = None
    ) -> AppendAck:
        """Appends one batch (durable when this returns); see :meth:`append_edges_future`."""
        return self.append_edges_future(batch_id, src, dst, t, efeat).result()

    def sample_temporal_future(
        self,
        nodes: np.ndarray,
        times: np.ndarray,
        fanout: int,
        strategy: str = "recent",
        seed: int = 0,
        first_position: int = 0,
        with_features: bool = True,
    ) -> Future[TemporalSample]:
        """Starts one SampleTemporal call: each root's in-edges strictly before its time
        (``TEMPORAL_SPEC``); the arguments are those of :meth:`TemporalStore.sample`."""
        enum = {"recent": pb.TEMPORAL_STRATEGY_RECENT, "uniform": pb.TEMPORAL_STRATEGY_UNIFORM}.get(strategy, 0)
        req = pb.SampleTemporalRequest(
            fanout=fanout,
            strategy=enum,  # type: ignore[arg-type]
            rng_seed=seed,
            first_position=first_position,
            with_features=with_features,
        )
        codec.encode(np.asarray(nodes, dtype=np.int64), req.nodes)
        codec.encode(np.asarray(times, dtype=np.int64), req.times)

        def decoded(rec: Received[pb.SampleTemporalResponse]) -> TemporalSample:
            r, seg = rec.message, self._transport.reader()
            offsets, nbr, ts, eid = (
                codec.decode(getattr(r, f), f, seg, rec.bulk) for f in ("offsets", "nbr", "ts", "eid")
            )
            efeat = codec.decode(r.edge_feat, "edge_feat", seg, rec.bulk) if r.HasField("edge_feat") else None
            return TemporalSample(offsets, nbr, ts, eid, efeat)

        return _then(self._unary_future(self._temporal, req), decoded)

    def sample_temporal(
        self,
        nodes: np.ndarray,
        times: np.ndarray,
        fanout: int,
        strategy: str = "recent",
        seed: int = 0,
        first_position: int = 0,
        with_features: bool = True,
    ) -> TemporalSample:
        """One SampleTemporal call; see :meth:`sample_temporal_future`."""
        return self.sample_temporal_future(nodes, times, fanout, strategy, seed, first_position, with_features).result()

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


def _settle(out: Future, result: object = None, exc: BaseException | None = None) -> None:
    """Completes ``out`` unless it was cancelled meanwhile (then the answer is not wanted)."""
    with contextlib.suppress(InvalidStateError):
        if exc is not None:
            out.set_exception(exc)
        else:
            out.set_result(result)


def _then(fut: Future, fn: Callable[[Any], Any]) -> Future:
    """``fn(fut.result())`` as a future (``fn`` runs even if the future was cancelled meanwhile)."""
    out: Future = Future()

    def done(f: Future) -> None:
        try:
            result = fn(f.result())
        except BaseException as exc:  # noqa: BLE001 - forwarded to the consumer
            _settle(out, exc=exc)
        else:
            _settle(out, result=result)

    fut.add_done_callback(done)
    return out


PARTITION_PLACEHOLDER = "{p}"
"""In a graph-store address, stands for the partition id: ``graph-store-{p}.graph-store:50051``."""


def expand_addresses(addresses: Sequence[str], timeout_s: float = 30.0) -> list[str]:
    """``addresses`` as given, or a single template holding :data:`PARTITION_PLACEHOLDER`
    expanded for every partition (partition 0, the template with ``{p}`` -> 0, says how many).

    Raises:
        GraphfeedError: partition 0 did not answer within ``timeout_s``.
    """
    if len(addresses) != 1 or PARTITION_PLACEHOLDER not in addresses[0]:
        return list(addresses)
    template = addresses[0]
    first = GraphStoreClient(template.replace(PARTITION_PLACEHOLDER, "0"), timeout_s)
    try:
        n = first.info().num_partitions
    finally:
        first.close()
    return [template.replace(PARTITION_PLACEHOLDER, str(p)) for p in range(n)]


class _PartitionSetBase:
    info: PartitionInfo

    @property
    def num_partitions(self) -> int:
        return self.info.num_partitions


class RemotePartitionSet(_PartitionSetBase):
    """All graph-stores of a graph, addressed by partition id, over gRPC.

    Args:
        addresses: ``host:port`` of each graph-store, any order; each one's partition id is
            read from GetPartitionInfo and checked for consistency. Or one template, e.g.
            ``graph-store-{p}.graph-store:50051`` (see :func:`expand_addresses`).
        timeout_s: deadline of each call.
        max_parallel: threads for the streaming calls (GetNodeData) run in parallel.
        shm_dir: shared-memory directory offered to same-host graph-stores ("" or None: never).
    """

    def __init__(
        self, addresses: Sequence[str], timeout_s: float = 30.0, max_parallel: int = 8, shm_dir: str | None = None
    ) -> None:
        addresses = expand_addresses(addresses, timeout_s)
        clients = [GraphStoreClient(a, timeout_s, shm_dir) for a in addresses]
        infos = [c.info() for c in clients]
        n = infos[0].num_partitions
        by_id = {i.partition_id: c for i, c in zip(infos, clients)}
        if sorted(by_id) != list(range(n)) or len(clients) != n:
            got = sorted(i.partition_id for i in infos)
            raise FailedPrecondition(
                f"need one graph-store per partition 0..{n - 1}, got partitions {got} at {list(addresses)}"
            )
        for i in infos:
            if i.dataset != infos[0].dataset or not np.array_equal(i.node_offsets, infos[0].node_offsets):
                raise FailedPrecondition(f"graph-stores serve different graphs: {i.dataset!r} vs {infos[0].dataset!r}")
        self.clients = [by_id[p] for p in range(n)]
        self.info = next(i for i in infos if i.partition_id == 0)
        self._pool = ThreadPoolExecutor(max_workers=max_parallel, thread_name_prefix="gs-fetch")

    def sample_neighbors(
        self, p: int, seeds: np.ndarray, fanout: int, replace: bool, rng_seed: int, first_position: int = 0
    ) -> Future[SampledNeighbors]:
        return self.clients[p].sample_neighbors_future(seeds, fanout, replace, rng_seed, first_position)

    def get_node_data(self, p: int, name: str, ids: np.ndarray) -> Future[np.ndarray]:
        return self._pool.submit(self.clients[p].get_node_data, name, ids)

    def read_node_data_into(
        self, p: int, name: str, ids: np.ndarray, out: np.ndarray, positions: np.ndarray
    ) -> Future[int]:
        """See :class:`~graphfeed.graph_store.types.ReadsNodeDataInto`."""
        return self._pool.submit(self.clients[p].read_node_data_into, name, ids, out, positions)

    def scatter_node_data(self, p: int, name: str, ids: np.ndarray, target: NodeDataTarget) -> Future[int] | None:
        """Partition ``p`` writes the rows into ``target``; None when this set offers no shared
        memory (the caller then fetches the rows)."""
        if not self.clients[p].shares_memory:
            return None
        return self._pool.submit(self.clients[p].scatter_node_data, name, ids, target)

    def get_degrees(self, p: int, ids: np.ndarray) -> Future[np.ndarray]:
        return self.clients[p].get_degrees_future(ids)

    def get_split(self, p: int, name: str) -> np.ndarray:
        return self.clients[p].get_split(name)

    def close(self) -> None:
        self._pool.shutdown(wait=False, cancel_futures=True)
        for c in self.clients:
            c.close()


_R = TypeVar("_R")


def _done(fn: Callable[..., _R], *args: object) -> Future[_R]:
    fut: Future[_R] = Future()
    try:
        fut.set_result(fn(*args))
    except BaseException as exc:  # noqa: BLE001 - forwarded to the consumer
        fut.set_exception(exc)
    return fut


class LocalPartitionSet(_PartitionSetBase):
    """In-process partition set over GraphStore cores (tests, embedded use). Same semantics."""

    def __init__(self, stores: Sequence[GraphStore]) -> None:
        self.stores = sorted(stores, key=lambda s: s.partition_id)
        self.info = self.stores[0].info()

    def sample_neighbors(
        self, p: int, seeds: np.ndarray, fanout: int, replace: bool, rng_seed: int, first_position: int = 0
    ) -> Future[SampledNeighbors]:
        return _done(self.stores[p].sample_neighbors, seeds, fanout, replace, rng_seed, None, first_position)

    def get_node_data(self, p: int, name: str, ids: np.ndarray) -> Future[np.ndarray]:
        return _done(self.stores[p].get_node_data, name, ids)

    def get_degrees(self, p: int, ids: np.ndarray) -> Future[np.ndarray]:
        return _done(self.stores[p].get_degrees, ids)

    def get_split(self, p: int, name: str) -> np.ndarray:
        return self.stores[p].get_split(name)

    def close(self) -> None:
        pass
