"""Domain metrics of a graph-store (RPC counts and latencies come from ``RpcMetrics``)."""

from __future__ import annotations

from dataclasses import dataclass

from prometheus_client import CollectorRegistry, Counter, Gauge, Histogram

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
    def create(cls, registry: CollectorRegistry) -> "GraphStoreMetrics":
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
