"""Domain metrics of a graph-store (RPC counts and latencies come from ``RpcMetrics``).

They are recorded by :class:`MeteredGraphStore`, a wrapper around the core that the servicer
calls, so that :class:`~graphfeed.graph_store.store.GraphStore` stays free of Prometheus.
"""

from __future__ import annotations

import math
from collections.abc import Callable, Iterator
from dataclasses import dataclass

import numpy as np
from prometheus_client import CollectorRegistry, Counter, Gauge, Histogram
from prometheus_client.core import CounterMetricFamily, Metric
from prometheus_client.registry import Collector

from graphfeed.graph_store.rowstore import RowStats
from graphfeed.graph_store.sampling import Alloc
from graphfeed.graph_store.store import GraphStore
from graphfeed.graph_store.types import PartitionInfo, SampledNeighbors

# One-hop sampling of a minibatch's seeds: tens of microseconds to about a second.
SAMPLING_LATENCY_BUCKETS = (0.0001, 0.00025, 0.0005, 0.001, 0.0025, 0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1, 2.5)


@dataclass
class GraphStoreMetrics:
    """Counters and gauges a graph-store exports; ``name`` labels are node-data names (a handful)."""

    sampled_edges: Counter
    node_data_rows: Counter
    node_data_bytes: Counter
    sampling_latency: Histogram
    rocksdb_bytes: Gauge
    partition_info: Gauge

    @classmethod
    def create(cls, registry: CollectorRegistry) -> GraphStoreMetrics:
        return cls(
            sampled_edges=Counter(
                "graphfeed_graph_store_sampled_edges_total", "Edges returned by SampleNeighbors.", registry=registry
            ),
            node_data_rows=Counter(
                "graphfeed_graph_store_node_data_rows_total", "Node-data rows served, by tensor name.", ("name",),
                registry=registry,
            ),
            node_data_bytes=Counter(
                "graphfeed_graph_store_node_data_bytes_total", "Node-data bytes served (raw rows), by tensor name.",
                ("name",), registry=registry,
            ),
            sampling_latency=Histogram(
                "graphfeed_graph_store_sampling_latency_seconds", "Time spent in one SampleNeighbors core call.",
                buckets=SAMPLING_LATENCY_BUCKETS, registry=registry,
            ),
            rocksdb_bytes=Gauge(
                "graphfeed_graph_store_rocksdb_bytes", "Size on disk of the partition's RocksDB directory at start.",
                registry=registry,
            ),
            partition_info=Gauge(
                "graphfeed_graph_store_partition_info", "Always 1; the label says which partition this server serves.",
                ("partition",), registry=registry,
            ),
        )


class RowTierCollector(Collector):
    """Where node-data rows came from (memory or disk under a memory budget), read from the
    store's own counters at scrape time, so that the read path counts without Prometheus.

    Register with ``registry.register(RowTierCollector(store.row_stats))``.
    """

    def __init__(self, stats: Callable[[], RowStats]) -> None:
        self._stats = stats

    def collect(self) -> Iterator[Metric]:
        s = self._stats()
        rows = CounterMetricFamily(
            "graphfeed_graph_store_node_data_tier_rows",
            "Node-data rows served, by where they were: in memory or read from disk (beyond the memory budget).",
            labels=("tier",),
        )
        rows.add_metric(("memory",), s.rows_memory)
        rows.add_metric(("disk",), s.rows_disk)
        yield rows
        yield CounterMetricFamily(
            "graphfeed_graph_store_disk_read_bytes", "Bytes read from node-data files on disk (whole blocks with O_DIRECT).",
            value=s.disk_bytes,
        )
        yield CounterMetricFamily(
            "graphfeed_graph_store_disk_reads", "Reads (preads) of node-data files; adjacent rows share one.", value=s.disk_reads
        )


class MeteredGraphStore:
    """The graph-store core with its domain metrics recorded around each call the servicer
    makes (sampled edges and sampling latency, node-data rows and bytes per name), so that
    neither the core nor the servicer knows Prometheus. Arguments and errors are the core's."""

    def __init__(self, store: GraphStore, metrics: GraphStoreMetrics) -> None:
        self.store = store
        self._m = metrics

    def info(self) -> PartitionInfo:
        return self.store.info()

    def sample_neighbors(
        self, seeds: np.ndarray, fanout: int, replace: bool, rng_seed: int, alloc: Alloc | None = None, first_position: int = 0
    ) -> SampledNeighbors:
        """:meth:`GraphStore.sample_neighbors`, timed, its edges counted."""
        with self._m.sampling_latency.time():
            out = self.store.sample_neighbors(seeds, fanout, replace, rng_seed, alloc, first_position)
        self._m.sampled_edges.inc(len(out.src))
        return out

    def get_node_data(self, name: str, ids: np.ndarray, out: np.ndarray | None = None) -> np.ndarray:
        """:meth:`GraphStore.get_node_data`, its rows counted."""
        rows = self.store.get_node_data(name, ids, out)
        self._served(name, len(rows), rows.nbytes)
        return rows

    def iter_node_data(self, name: str, ids: np.ndarray) -> Iterator[tuple[int, np.ndarray]]:
        """:meth:`GraphStore.iter_node_data` (validating at the call), each chunk counted as it is taken."""
        chunks = self.store.iter_node_data(name, ids)
        return self._counted(name, chunks)

    def _counted(self, name: str, chunks: Iterator[tuple[int, np.ndarray]]) -> Iterator[tuple[int, np.ndarray]]:
        for start, rows in chunks:
            self._served(name, len(rows), rows.nbytes)
            yield start, rows

    def scatter_node_data(self, name: str, ids: np.ndarray, out: np.ndarray, positions: np.ndarray) -> int:
        """:meth:`GraphStore.scatter_node_data`, the rows written counted."""
        written = self.store.scatter_node_data(name, ids, out, positions)
        self._served(name, written, written * out.itemsize * math.prod(out.shape[1:]))
        return written

    def _served(self, name: str, rows: int, nbytes: int) -> None:
        self._m.node_data_rows.labels(name).inc(rows)
        self._m.node_data_bytes.labels(name).inc(nbytes)

    def get_degrees(self, ids: np.ndarray) -> np.ndarray:
        return self.store.get_degrees(ids)

    def get_split(self, name: str) -> np.ndarray:
        return self.store.get_split(name)
