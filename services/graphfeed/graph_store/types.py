"""Typed values the graph-store core returns and its clients hand back (no protobuf here)."""

from __future__ import annotations

from concurrent.futures import Future
from dataclasses import dataclass
from typing import Protocol, runtime_checkable

import numpy as np


@dataclass(frozen=True)
class NodeDataTarget:
    """Where a graph-store writes rows in the caller's shared memory (graph_store.proto's
    NodeDataTarget): array ``[num_rows, *row_shape]`` at byte ``offset`` of ``segment``; the
    i-th id goes to row ``positions[i]``."""

    segment: str
    offset: int
    num_rows: int
    positions: np.ndarray  # int64 [N]


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


class PartitionSet(Protocol):
    """All partitions of a graph as seen by a sampler or loader.

    Implemented over gRPC (:class:`graphfeed.graph_store.client.RemotePartitionSet`) and
    in-process over core objects (:class:`graphfeed.graph_store.client.LocalPartitionSet`,
    for socket-free tests). Methods return futures so callers fan out to all partitions
    before waiting on any.
    """

    info: PartitionInfo  # of partition 0; graph-wide fields are the same everywhere

    @property
    def num_partitions(self) -> int: ...

    def sample_neighbors(
        self, p: int, seeds: np.ndarray, fanout: int, replace: bool, rng_seed: int, first_position: int = 0
    ) -> Future[SampledNeighbors]: ...

    def get_node_data(self, p: int, name: str, ids: np.ndarray) -> Future[np.ndarray]: ...

    def get_degrees(self, p: int, ids: np.ndarray) -> Future[np.ndarray]: ...

    def get_split(self, p: int, name: str) -> np.ndarray: ...

    def close(self) -> None: ...


@runtime_checkable
class ReadsNodeDataInto(Protocol):
    """A partition set that writes received rows straight into the caller's array (the gRPC
    one: each answer message's rows are copied once, from the message to their destination)."""

    def read_node_data_into(
        self, p: int, name: str, ids: np.ndarray, out: np.ndarray, positions: np.ndarray
    ) -> Future[int]:
        """Partition ``p``'s rows of ``ids`` into ``out[positions]``; the future gives the bytes
        received, or raises what the graph-store raised."""


class ForwardingPartitionSet:
    """A :class:`PartitionSet` that forwards every call to ``inner``: subclass it and override
    only the calls you observe or replace (metrics, benchmarks)."""

    def __init__(self, inner: PartitionSet) -> None:
        self.inner = inner
        self.info: PartitionInfo = inner.info

    @property
    def num_partitions(self) -> int:
        return self.inner.num_partitions

    def sample_neighbors(
        self, p: int, seeds: np.ndarray, fanout: int, replace: bool, rng_seed: int, first_position: int = 0
    ) -> Future[SampledNeighbors]:
        return self.inner.sample_neighbors(p, seeds, fanout, replace, rng_seed, first_position)

    def get_node_data(self, p: int, name: str, ids: np.ndarray) -> Future[np.ndarray]:
        return self.inner.get_node_data(p, name, ids)

    def get_degrees(self, p: int, ids: np.ndarray) -> Future[np.ndarray]:
        return self.inner.get_degrees(p, ids)

    def get_split(self, p: int, name: str) -> np.ndarray:
        return self.inner.get_split(p, name)

    def close(self) -> None:
        self.inner.close()
