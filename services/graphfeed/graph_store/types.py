"""Typed values the graph-store core returns and its clients hand back, and :class:`PartitionSet`:
the one way samplers, loaders and writers reach the graph-stores (no protobuf here)."""

from __future__ import annotations

from abc import ABC, abstractmethod
from collections.abc import Sequence
from concurrent.futures import Future
from dataclasses import dataclass

import numpy as np

from graphfeed.common.futures import then
from graphfeed.common.owners import owners
from graphfeed.common.placement import SharedRegion
from graphfeed.common.schema import DEFAULT_NTYPE, GraphSchema
from graphfeed.graph_store.temporal.types import AppendAck, EdgeBatch, TemporalQuery, TemporalSample

Exclusion = tuple[np.ndarray, np.ndarray]
"""Edges a sample leaves out (DGL's ``exclude_eids``, e.g. a link-prediction minibatch's seed edges
and their reverses): ``(dst, eids)``, int64 global ids of equal length, edge ``eids[i]`` an
in-edge of node ``dst[i]``. An excluded edge is no candidate (left out before selection)."""

Fanout = int | Sequence[int]
"""A one-hop fanout: one for every edge type, or one per edge type in the graph's edge-type order
(``-1`` all in-neighbors, else at most that many; see :meth:`GraphStore.sample_neighbors`)."""


@dataclass(frozen=True)
class RowsInto:
    """Where a node-data read puts its rows: the i-th id's row goes to ``out[positions[i]]``.

    ``shared``: ``out`` lies in a shared-memory file the reader offers, so a graph-store on the
    same host may write the rows there itself (each row copied once, table to destination).
    """

    out: np.ndarray  # [num_rows, *row_shape]
    positions: np.ndarray  # int64 [N]
    shared: SharedRegion | None = None

    @classmethod
    def new(cls, num_ids: int, row_shape: tuple[int, ...], dtype: np.dtype | type) -> RowsInto:
        """A new array for ``num_ids`` rows, in id order."""
        return cls(np.empty((num_ids, *row_shape), dtype=dtype), np.arange(num_ids, dtype=np.int64))

    def at(self, which: np.ndarray) -> RowsInto:
        """The same destination for the ids at ``which`` only."""
        return RowsInto(self.out, self.positions[which], self.shared)

    @property
    def row_bytes(self) -> int:
        """Bytes of one row of ``out``."""
        return self.out.itemsize * int(np.prod(self.out.shape[1:], dtype=np.int64))

    def place(self, rows: np.ndarray) -> int:
        """Puts ``rows`` (one per id, in id order) where they go; returns their bytes."""
        self.out[self.positions] = np.asarray(rows).reshape((len(self.positions), *self.out.shape[1:]))
        return len(self.positions) * self.row_bytes


@dataclass(frozen=True)
class NodeDataTarget:
    """Where a graph-store writes rows in the caller's shared memory (graph_store.proto's
    NodeDataTarget): array ``[num_rows, *row_shape]`` at byte ``offset`` of ``segment``; the
    i-th id goes to row ``positions[i]``."""

    segment: str
    offset: int
    num_rows: int
    positions: np.ndarray  # int64 [N]

    @classmethod
    def of(cls, into: RowsInto) -> NodeDataTarget:
        """The target of a destination in shared memory."""
        if into.shared is None:
            raise ValueError("the destination lies in no shared-memory file")
        return cls(into.shared.segment, into.shared.offset, len(into.out), into.positions)


@dataclass(frozen=True)
class SampledNeighbors:
    """One-hop sample in CSR order: seed i's neighbors are ``src[offsets[i]:offsets[i+1]]``."""

    offsets: np.ndarray  # int64 [N+1]
    src: np.ndarray  # int64 [E], global ids of in-neighbors
    edge_ids: np.ndarray  # int64 [E]


@dataclass(frozen=True)
class NodeDataInfo:
    name: str
    dtype: np.dtype
    row_shape: tuple[int, ...]
    ntype: str = DEFAULT_NTYPE  # the node type whose rows the table holds


@dataclass(frozen=True)
class PartitionInfo:
    """What a graph-store says about itself and the graph."""

    partition_id: int
    num_partitions: int
    num_nodes: int
    num_edges: int
    node_offsets: np.ndarray  # int64 [P+1]
    node_data: dict[str, NodeDataInfo]
    num_classes: int
    dataset: str
    schema_version: int
    num_local_edges: int
    num_halo_nodes: int
    graph_version: str = ""  # the ingest run's id (GraphManifest.graph_version)
    schema: GraphSchema | None = None  # node/edge types (None: read as the one-type schema)

    def tables(self, name: str) -> list[str]:
        """The node-data keys of ``name``: itself in a one-type graph, else ``ntype/name`` of each
        node type that has it (featureless types have none)."""
        schema = self.types
        return [k for k in (schema.data_key(t, name) for t in schema.ntypes) if k in self.node_data]

    @property
    def types(self) -> GraphSchema:
        """The graph's node and edge types (:mod:`graphfeed.common.schema`)."""
        if self.schema is None:
            return GraphSchema.homogeneous(self.node_offsets.tolist(), self.num_edges)
        return self.schema


class PartitionSet(ABC):
    """All partitions of a graph, addressed by partition id: the one way to reach graph-stores.

    Over gRPC (:class:`graphfeed.graph_store.partitions.RemotePartitionSet`) or in-process over
    core objects (:class:`~graphfeed.graph_store.partitions.LocalPartitionSet`, socket-free
    tests). Calls return futures so that callers start every partition's request before waiting
    on any (:mod:`graphfeed.graph_store.fanout`). Who owns an id is :meth:`owners`.

    A backend implements the abstract calls; :meth:`read_node_data` has a working default over
    :meth:`_node_rows` that a faster backend overrides (the gRPC one writes each answer's rows
    straight into the destination, or has same-host graph-stores write them into shared memory).
    """

    info: PartitionInfo  # of partition 0; graph-wide fields are the same everywhere

    @property
    def num_partitions(self) -> int:
        return self.info.num_partitions

    def owners(self, gids: np.ndarray) -> np.ndarray:
        """int64 [n]: the partition owning each gid (:func:`graphfeed.common.owners.owners`)."""
        return owners(gids, self.info.node_offsets)

    @abstractmethod
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
        """Partition ``p`` samples up to ``fanout`` in-neighbors of each of its ``seeds`` (an int
        for every edge type, or one per edge type of ``info.types``), leaving out the edges of
        ``exclude`` (:data:`Exclusion` pairs; those whose dst ``p`` does not own are ignored)."""

    def read_node_data(self, p: int, name: str, ids: np.ndarray, into: RowsInto) -> Future[int]:
        """Partition ``p``'s rows of node-data ``name`` for ``ids`` (owned by ``p``), put where
        ``into`` says; the future gives the bytes of rows delivered, or raises what the
        graph-store raised (once nothing writes into ``into`` any more)."""
        return then(self._node_rows(p, name, ids), into.place)

    @abstractmethod
    def _node_rows(self, p: int, name: str, ids: np.ndarray) -> Future[np.ndarray]:
        """Partition ``p``'s rows of ``name`` for ``ids``, in ids order, as a new array."""

    @abstractmethod
    def get_degrees(self, p: int, ids: np.ndarray) -> Future[np.ndarray]:
        """In-degrees of ``ids`` (owned by ``p``)."""

    @abstractmethod
    def get_split(self, p: int, name: str) -> np.ndarray:
        """Partition ``p``'s gids of split ``name`` (ascending)."""

    @abstractmethod
    def append_edges(self, p: int, batch: EdgeBatch, timeout_s: float | None = None) -> Future[AppendAck]:
        """Partition ``p`` appends ``batch`` into its ``dst`` nodes, durably, once per batch id."""

    @abstractmethod
    def sample_temporal(self, p: int, query: TemporalQuery) -> Future[TemporalSample]:
        """Partition ``p``'s temporal sample of its roots before their times
        (:meth:`graphfeed.graph_store.temporal.store.TemporalStore.sample`)."""

    @abstractmethod
    def close(self) -> None:
        """Releases connections (calls in flight fail)."""
