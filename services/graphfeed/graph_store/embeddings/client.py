"""Clients of the embedding RPCs: :class:`EmbeddingCalls` for one graph-store, and
:class:`PartitionEmbeddings`, which routes by owner over every partition (DistDGL's
``_distributed_access``: ids grouped by owning partition, every request sent before any answer
is waited for, the answers merged in request order)."""

from __future__ import annotations

import time
from collections.abc import Callable, Sequence
from concurrent.futures import Future, ThreadPoolExecutor
from typing import TYPE_CHECKING, Any, Protocol, TypeVar

import grpc
import numpy as np

from graphfeed.common import bulk, codec
from graphfeed.common.errors import DataLoss, DeadlineExceeded, from_rpc_error
from graphfeed.common.owners import owners
from graphfeed.common.rpc import streamed
from graphfeed.common.schema import GraphSchema
from graphfeed.common.transport import ClientTransport
from graphfeed.graph_store.embeddings import wire
from graphfeed.graph_store.embeddings.types import EmbeddingSpec, PushAck, StepKey
from graphfeed.graph_store.v1 import graph_store_pb2 as pb
from graphfeed.graph_store.v1 import graph_store_pb2_grpc as pb_grpc

if TYPE_CHECKING:  # the in-process tables are not loaded by a process that only dials graph-stores
    from graphfeed.graph_store.embeddings.store import EmbeddingStore, TableInfo

T = TypeVar("T")


class EmbeddingCalls:
    """The embedding RPCs of one graph-store over ``channel``; every call has a deadline and
    fails with a :class:`~graphfeed.common.errors.GraphfeedError`."""

    def __init__(self, channel: grpc.Channel, address: str, timeout_s: float, transport: ClientTransport) -> None:
        self.address, self.timeout_s = address, timeout_s
        self._stub = pb_grpc.GraphStoreServiceStub(channel)
        self._transport = transport
        name = pb.DESCRIPTOR.services_by_name["GraphStoreService"].full_name
        self._pull = bulk.unary_stream(
            channel, name, "PullEmbedding", pb.PullEmbeddingRequest, pb.PullEmbeddingResponse, transport.fetch
        )

    def _call(self, method: Callable[..., T], request: object, timeout_s: float | None = None) -> T:
        try:
            return method(request, timeout=timeout_s or self.timeout_s)
        except grpc.RpcError as err:
            raise from_rpc_error(err, f"graph-store {self.address}") from None

    def create(self, spec: EmbeddingSpec) -> pb.CreateEmbeddingResponse:
        return self._call(self._stub.CreateEmbedding, pb.CreateEmbeddingRequest(spec=wire.spec_to_proto(spec)))

    def _waiting(self, fn: Callable[[float], T]) -> T:
        """``fn(seconds left)`` asked again while the graph-store answers that the step it waits
        for is not applied yet (it holds a call at most EMBEDDING_WAIT_SLICE_S), up to this
        client's deadline; then the last DeadlineExceeded (it names the missing ranks)."""
        deadline = time.monotonic() + self.timeout_s
        while True:
            try:
                return fn(max(0.001, deadline - time.monotonic()))
            except DeadlineExceeded:
                if deadline - time.monotonic() < 0.05:
                    raise

    def pull(self, name: str, ids: np.ndarray, dim: int, after: StepKey | None = None) -> np.ndarray:
        """float32 ``[len(ids), dim]`` rows of owned ``ids``, once step ``after`` was applied."""
        req = pb.PullEmbeddingRequest(name=name)
        codec.encode(np.asarray(ids, dtype=np.int64), req.ids)
        wire.key_to_proto(after, req.after)
        return self._waiting(lambda left: self._pull_once(req, len(ids), dim, left))

    def _pull_once(self, req: pb.PullEmbeddingRequest, n: int, dim: int, timeout_s: float) -> np.ndarray:
        name = req.name
        out, got = np.empty((n, dim), np.float32), 0
        try:
            call = self._pull(req, timeout=timeout_s, metadata=self._transport.metadata)
            for r in streamed(call, f"graph-store {self.address}"):
                rows = codec.decode(r.message.rows, name, self._transport.reader(), r.bulk)
                start = int(r.message.start)
                if rows.shape[1:] != (dim,) or rows.dtype != np.float32 or not 0 <= start <= n - len(rows):
                    raise DataLoss(f"graph-store {self.address}: {name} chunk {rows.shape} at {start} does not fit")
                out[start : start + len(rows)] = rows
                got += len(rows)
        except grpc.RpcError as err:
            raise from_rpc_error(err, f"graph-store {self.address}") from None
        if got != n:
            raise DataLoss(f"graph-store {self.address} sent {got} rows of {name} for {n} ids")
        return out

    def push(
        self, name: str, job: str, key: StepKey, rank: int, world_size: int, ids: np.ndarray, grads: np.ndarray
    ) -> PushAck:
        req = pb.PushEmbeddingGradRequest(name=name, job=job, rank=rank, world_size=world_size)
        wire.key_to_proto(key, req.step)
        codec.encode(np.asarray(ids, dtype=np.int64), req.ids)
        codec.encode(np.ascontiguousarray(grads, dtype=np.float32), req.grads)
        return wire.ack_from_proto(self._call(self._stub.PushEmbeddingGrad, req))

    def snapshot(self, name: str, key: StepKey) -> bool:
        req = pb.SnapshotEmbeddingRequest(name=name)
        wire.key_to_proto(key, req.step)
        return bool(self._waiting(lambda left: self._call(self._stub.SnapshotEmbedding, req, left)).created)

    def restore(self, name: str, key: StepKey | None) -> StepKey:
        req = pb.RestoreEmbeddingRequest(name=name)
        wire.key_to_proto(key, req.step)
        return wire.key_from_proto(self._call(self._stub.RestoreEmbedding, req).applied)


class TableCalls(Protocol):
    """What :class:`PartitionEmbeddings` asks of one partition (:class:`EmbeddingCalls` over
    gRPC, :class:`LocalEmbeddingCalls` in process)."""

    timeout_s: float  # how long a call (a wait for a step included) may take

    def create(self, spec: EmbeddingSpec) -> Any: ...  # anything with .created
    def pull(self, name: str, ids: np.ndarray, dim: int, after: StepKey | None = None) -> np.ndarray: ...
    def push(
        self, name: str, job: str, key: StepKey, rank: int, world_size: int, ids: np.ndarray, grads: np.ndarray
    ) -> PushAck: ...
    def snapshot(self, name: str, key: StepKey) -> bool: ...
    def restore(self, name: str, key: StepKey | None) -> StepKey: ...


class LocalEmbeddingCalls:
    """:class:`EmbeddingCalls`' interface over an in-process
    :class:`~graphfeed.graph_store.embeddings.store.EmbeddingStore` (socket-free tests, embedded
    use); waits for a step up to ``timeout_s``."""

    def __init__(self, store: EmbeddingStore, timeout_s: float = 30.0) -> None:
        self.store, self.timeout_s = store, timeout_s

    def create(self, spec: EmbeddingSpec) -> TableInfo:
        return self.store.create(spec)

    def pull(self, name: str, ids: np.ndarray, dim: int, after: StepKey | None = None) -> np.ndarray:
        return self.store.pull(name, ids, after, self.timeout_s)

    def push(
        self, name: str, job: str, key: StepKey, rank: int, world_size: int, ids: np.ndarray, grads: np.ndarray
    ) -> PushAck:
        return self.store.push(name, job, key, rank, world_size, ids, grads)

    def snapshot(self, name: str, key: StepKey) -> bool:
        return self.store.snapshot(name, key, self.timeout_s)

    def restore(self, name: str, key: StepKey | None) -> StepKey:
        self.store.restore(name, key)
        return self.store.table(name).applied


class PartitionEmbeddings:
    """Embedding tables over every graph-store of a graph: each id goes to its owner.

    Args:
        calls: one :class:`EmbeddingCalls` (or :class:`LocalEmbeddingCalls`) per partition, by partition id.
        schema: the graph's types (who owns which ids).
        max_parallel: threads that run the per-partition calls.
    """

    def __init__(self, calls: Sequence[TableCalls], schema: GraphSchema, max_parallel: int = 8) -> None:
        self.calls, self.schema = list(calls), schema
        self._node_offsets = np.concatenate([schema.ntype_offsets[:, 0], schema.ntype_offsets[-1:, -1]])
        self._pool = ThreadPoolExecutor(max_workers=max_parallel, thread_name_prefix="gs-emb")

    def _each(self, fn: Callable[[int], T]) -> list[T]:
        """``fn(p)`` for every partition, all started before any is waited for."""
        futures: list[Future[T]] = [self._pool.submit(fn, p) for p in range(len(self.calls))]
        return [f.result() for f in futures]

    def _groups(self, gids: np.ndarray) -> list[np.ndarray]:
        """Positions in ``gids`` of each partition's ids."""
        own = owners(gids, self._node_offsets)
        return [np.flatnonzero(own == p) for p in range(len(self.calls))]

    def create(self, spec: EmbeddingSpec) -> bool:
        """Creates (or finds, idempotently) the table on every partition; True if any created it."""
        return any(r.created for r in self._each(lambda p: self.calls[p].create(spec)))

    def pull(self, name: str, gids: np.ndarray, dim: int, after: StepKey | None = None) -> np.ndarray:
        """float32 ``[len(gids), dim]``: the rows of ``gids`` from their owners, after step ``after``."""
        gids = np.asarray(gids, dtype=np.int64)
        groups = self._groups(gids)
        out = np.empty((len(gids), dim), np.float32)
        futures = {
            p: self._pool.submit(self.calls[p].pull, name, gids[pos], dim, after)
            for p, pos in enumerate(groups)
            if len(pos)
        }
        for p, fut in futures.items():
            out[groups[p]] = fut.result()
        return out

    def push(
        self, name: str, job: str, key: StepKey, rank: int, world_size: int, gids: np.ndarray, grads: np.ndarray
    ) -> list[PushAck]:
        """This rank's gradients of step ``key``, each to its row's owner; every partition gets a
        push (with no ids where none of its rows are), since each applies a step once all ranks pushed it."""
        gids = np.asarray(gids, dtype=np.int64)
        groups = self._groups(gids)
        return self._each(
            lambda p: self.calls[p].push(name, job, key, rank, world_size, gids[groups[p]], grads[groups[p]])
        )

    def snapshot(self, name: str, key: StepKey) -> None:
        """Every partition keeps the table's state right after step ``key``."""
        self._each(lambda p: self.calls[p].snapshot(name, key))

    def restore(self, name: str, key: StepKey | None) -> None:
        """Every partition returns the table to step ``key`` (None: the initial rows)."""
        self._each(lambda p: self.calls[p].restore(name, key))

    def close(self) -> None:
        self._pool.shutdown(wait=False, cancel_futures=True)
