"""Partition sets: every graph-store of a graph, addressed by partition id.

:class:`RemotePartitionSet` is what samplers, loaders, pack writers and the temporal client use
(one :class:`~graphfeed.graph_store.client.GraphStoreClient` per partition);
:class:`LocalPartitionSet` wraps in-process stores with the same semantics (multi-partition
logic unit-tested without sockets); :class:`ForwardingPartitionSet` is the base of wrappers that
observe or replace some calls (metrics, benchmarks).
"""

from __future__ import annotations

from collections.abc import Sequence
from concurrent.futures import Future, ThreadPoolExecutor
from typing import TYPE_CHECKING

import numpy as np

from graphfeed.common.errors import FailedPrecondition, InvalidArgument
from graphfeed.common.futures import completed
from graphfeed.graph_store.client import GraphStoreClient
from graphfeed.graph_store.embeddings.client import LocalEmbeddingCalls, PartitionEmbeddings
from graphfeed.graph_store.temporal.types import AppendAck, EdgeBatch, TemporalQuery, TemporalSample
from graphfeed.graph_store.types import Exclusion, Fanout, PartitionInfo, PartitionSet, RowsInto, SampledNeighbors

if TYPE_CHECKING:  # the in-process stores (RocksDB) are not loaded by a process that only dials graph-stores
    from graphfeed.graph_store.store import GraphStore

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


class RemotePartitionSet(PartitionSet):
    """All graph-stores of a graph over gRPC.

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
            if i.types.to_dict() != infos[0].types.to_dict():
                raise FailedPrecondition(
                    f"graph-stores of partitions {infos[0].partition_id} and {i.partition_id} describe different "
                    f"node/edge types: {infos[0].types.to_dict()} vs {i.types.to_dict()}"
                )
        self.clients = [by_id[p] for p in range(n)]
        self.info = next(i for i in infos if i.partition_id == 0)
        self._pool = ThreadPoolExecutor(max_workers=max_parallel, thread_name_prefix="gs-fetch")

    def embeddings(self) -> PartitionEmbeddings:
        """The trainable embedding tables of these graph-stores, routed by owner (its owner closes it)."""
        return PartitionEmbeddings([c.embeddings for c in self.clients], self.info.types)

    def sample_neighbors(
        self,
        p: int,
        seeds: np.ndarray,
        fanout: Fanout,
        replace: bool,
        rng_seed: int,
        first_position: int = 0,
        exclude: Exclusion | None = None,
    ) -> Future[SampledNeighbors]:
        return self.clients[p].sample_neighbors_future(seeds, fanout, replace, rng_seed, first_position, exclude)

    def read_node_data(self, p: int, name: str, ids: np.ndarray, into: RowsInto) -> Future[int]:
        """Each answer message's rows copied once to their place as it arrives, or written by
        the graph-store itself when ``into`` lies in shared memory it can see
        (:meth:`GraphStoreClient.read_node_data`)."""
        return self._pool.submit(self.clients[p].read_node_data, name, ids, into)

    def _node_rows(self, p: int, name: str, ids: np.ndarray) -> Future[np.ndarray]:
        return self._pool.submit(self.clients[p].get_node_data, name, ids)

    def get_degrees(self, p: int, ids: np.ndarray) -> Future[np.ndarray]:
        return self.clients[p].get_degrees_future(ids)

    def get_split(self, p: int, name: str) -> np.ndarray:
        return self.clients[p].get_split(name)

    def append_edges(self, p: int, batch: EdgeBatch, timeout_s: float | None = None) -> Future[AppendAck]:
        return self.clients[p].append_edges_future(batch, timeout_s)

    def sample_temporal(self, p: int, query: TemporalQuery) -> Future[TemporalSample]:
        return self.clients[p].sample_temporal_future(query)

    def close(self) -> None:
        self._pool.shutdown(wait=False, cancel_futures=True)
        for c in self.clients:
            c.close()


class LocalPartitionSet(PartitionSet):
    """In-process partition set over :class:`GraphStore` cores (tests, embedded use); same
    semantics, every call done by the time its future is returned."""

    def __init__(self, stores: Sequence[GraphStore]) -> None:
        self.stores = sorted(stores, key=lambda s: s.partition_id)
        self.info = self.stores[0].info()

    def sample_neighbors(
        self,
        p: int,
        seeds: np.ndarray,
        fanout: Fanout,
        replace: bool,
        rng_seed: int,
        first_position: int = 0,
        exclude: Exclusion | None = None,
    ) -> Future[SampledNeighbors]:
        store = self.stores[p]
        return completed(store.sample_neighbors, seeds, fanout, replace, rng_seed, None, first_position, exclude)

    def embeddings(self, timeout_s: float = 30.0) -> PartitionEmbeddings:
        """The stores' trainable embedding tables, routed by owner (waits up to ``timeout_s``)."""
        return PartitionEmbeddings([LocalEmbeddingCalls(s.embeddings, timeout_s) for s in self.stores], self.info.types)

    def _node_rows(self, p: int, name: str, ids: np.ndarray) -> Future[np.ndarray]:
        return completed(self.stores[p].get_node_data, name, ids)

    def get_degrees(self, p: int, ids: np.ndarray) -> Future[np.ndarray]:
        return completed(self.stores[p].get_degrees, ids)

    def get_split(self, p: int, name: str) -> np.ndarray:
        return self.stores[p].get_split(name)

    def append_edges(self, p: int, batch: EdgeBatch, timeout_s: float | None = None) -> Future[AppendAck]:
        b = batch
        return completed(lambda: self.stores[p].temporal_graph().append(b.batch_id, b.src, b.dst, b.t, b.efeat))

    def sample_temporal(self, p: int, query: TemporalQuery) -> Future[TemporalSample]:
        return completed(lambda: self.stores[p].temporal_graph().sample_query(query))

    def close(self) -> None:
        pass


class ForwardingPartitionSet(PartitionSet):
    """A :class:`PartitionSet` that forwards every call to ``inner``: subclass it and override
    only the calls you observe or replace (metrics, benchmarks)."""

    def __init__(self, inner: PartitionSet) -> None:
        self.inner = inner
        self.info: PartitionInfo = inner.info

    def sample_neighbors(
        self,
        p: int,
        seeds: np.ndarray,
        fanout: Fanout,
        replace: bool,
        rng_seed: int,
        first_position: int = 0,
        exclude: Exclusion | None = None,
    ) -> Future[SampledNeighbors]:
        return self.inner.sample_neighbors(p, seeds, fanout, replace, rng_seed, first_position, exclude)

    def read_node_data(self, p: int, name: str, ids: np.ndarray, into: RowsInto) -> Future[int]:
        return self.inner.read_node_data(p, name, ids, into)

    def _node_rows(self, p: int, name: str, ids: np.ndarray) -> Future[np.ndarray]:
        raise InvalidArgument("a forwarding partition set reads node data through its inner set's read_node_data")

    def get_degrees(self, p: int, ids: np.ndarray) -> Future[np.ndarray]:
        return self.inner.get_degrees(p, ids)

    def get_split(self, p: int, name: str) -> np.ndarray:
        return self.inner.get_split(p, name)

    def append_edges(self, p: int, batch: EdgeBatch, timeout_s: float | None = None) -> Future[AppendAck]:
        return self.inner.append_edges(p, batch, timeout_s)

    def sample_temporal(self, p: int, query: TemporalQuery) -> Future[TemporalSample]:
        return self.inner.sample_temporal(p, query)

    def close(self) -> None:
        self.inner.close()
