"""Domain metrics of a graph-store (RPC counts and latencies come from ``RpcMetrics``).

They are recorded by :class:`MeteredGraphStore`, a wrapper around the core that the servicer
calls, so that :class:`~graphfeed.graph_store.store.GraphStore` stays free of Prometheus.
"""

from __future__ import annotations

import math
import time
from collections.abc import Callable, Iterator
from dataclasses import dataclass

import numpy as np
from prometheus_client import CollectorRegistry, Counter, Gauge, Histogram
from prometheus_client.core import CounterMetricFamily, Metric
from prometheus_client.registry import Collector

from graphfeed.graph_store.embeddings.store import EmbeddingStore
from graphfeed.graph_store.embeddings.types import PushAck, StepKey
from graphfeed.graph_store.rowstore import RowStats
from graphfeed.graph_store.sampling import Alloc
from graphfeed.graph_store.store import GraphStore
from graphfeed.graph_store.temporal.store import AppendAck, TemporalInfo, TemporalSample, TemporalStore
from graphfeed.graph_store.temporal.types import TemporalQuery
from graphfeed.graph_store.types import Exclusion, Fanout, PartitionInfo, SampledNeighbors

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
                "graphfeed_graph_store_node_data_rows_total",
                "Node-data rows served, by tensor name.",
                ("name",),
                registry=registry,
            ),
            node_data_bytes=Counter(
                "graphfeed_graph_store_node_data_bytes_total",
                "Node-data bytes served (raw rows), by tensor name.",
                ("name",),
                registry=registry,
            ),
            sampling_latency=Histogram(
                "graphfeed_graph_store_sampling_latency_seconds",
                "Time spent in one SampleNeighbors core call.",
                buckets=SAMPLING_LATENCY_BUCKETS,
                registry=registry,
            ),
            rocksdb_bytes=Gauge(
                "graphfeed_graph_store_rocksdb_bytes",
                "Size on disk of the partition's RocksDB directory at start.",
                registry=registry,
            ),
            partition_info=Gauge(
                "graphfeed_graph_store_partition_info",
                "Always 1; the label says which partition this server serves.",
                ("partition",),
                registry=registry,
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
            "graphfeed_graph_store_disk_read_bytes",
            "Bytes read from node-data files on disk (whole blocks with O_DIRECT).",
            value=s.disk_bytes,
        )
        yield CounterMetricFamily(
            "graphfeed_graph_store_disk_reads",
            "Reads (preads) of node-data files; adjacent rows share one.",
            value=s.disk_reads,
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
        self,
        seeds: np.ndarray,
        fanout: Fanout,
        replace: bool,
        rng_seed: int,
        alloc: Alloc | None = None,
        first_position: int = 0,
        exclude: Exclusion | None = None,
    ) -> SampledNeighbors:
        """:meth:`GraphStore.sample_neighbors`, timed, its edges counted."""
        with self._m.sampling_latency.time():
            out = self.store.sample_neighbors(seeds, fanout, replace, rng_seed, alloc, first_position, exclude)
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


# -- temporal graph (issue 16) ------------------------------------------------------------

# A durable append of one batch: an fsync (~0.1-10 ms on SSD) plus validation and the block.
APPEND_LATENCY_BUCKETS = (0.0005, 0.001, 0.0025, 0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1, 2.5, 5)


@dataclass
class TemporalMetrics:
    """What a graph-store's temporal graph exports (appends and temporal sampling)."""

    appended_edges: Counter
    append_batches: Counter
    append_bytes: Counter
    append_latency: Histogram
    append_visible: Histogram
    temporal_edges: Gauge
    temporal_roots: Counter
    temporal_sampled_edges: Counter
    temporal_latency: Histogram

    @classmethod
    def create(cls, registry: CollectorRegistry) -> TemporalMetrics:
        def counter(name: str, doc: str, labels: tuple[str, ...] = ()) -> Counter:
            return Counter(f"graphfeed_graph_store_{name}", doc, labels, registry=registry)

        def histogram(name: str, doc: str, buckets: tuple[float, ...]) -> Histogram:
            return Histogram(f"graphfeed_graph_store_{name}", doc, buckets=buckets, registry=registry)

        return cls(
            appended_edges=counter(
                "appended_edges_total", "Edges appended by AppendEdges (durable; retries not counted)."
            ),
            append_batches=counter(
                "append_batches_total", "AppendEdges batches, by outcome (applied, duplicate).", ("outcome",)
            ),
            append_bytes=counter(
                "append_bytes_total", "Edge bytes appended (src, dst, t as int64, features as float32)."
            ),
            append_latency=histogram(
                "append_latency_seconds",
                "Time in one AppendEdges core call: validate, log fsync, publish.",
                APPEND_LATENCY_BUCKETS,
            ),
            append_visible=histogram(
                "append_visible_seconds",
                "Time from an AppendEdges request's arrival until its edges are visible to sampling "
                "(before the ack; applied batches).",
                APPEND_LATENCY_BUCKETS,
            ),
            temporal_edges=Gauge(
                "graphfeed_graph_store_temporal_edges",
                "Edges of this partition's temporal graph (ingest-time + appended).",
                ("partition",),
                registry=registry,
            ),
            temporal_roots=counter("temporal_sampled_roots_total", "(node, time) roots sampled by SampleTemporal."),
            temporal_sampled_edges=counter("temporal_sampled_edges_total", "Edges returned by SampleTemporal."),
            temporal_latency=histogram(
                "temporal_sampling_latency_seconds", "Time in one SampleTemporal core call.", SAMPLING_LATENCY_BUCKETS
            ),
        )


class MeteredTemporal:
    """A partition's :class:`~graphfeed.graph_store.temporal.store.TemporalStore` (or its absence)
    with :class:`TemporalMetrics` recorded around the calls the servicer makes."""

    def __init__(self, store: GraphStore, metrics: TemporalMetrics) -> None:
        self._store = store
        self._m = metrics
        self._partition = str(store.partition_id)
        if store.temporal is not None:
            metrics.temporal_edges.labels(self._partition).set(store.temporal.info().num_edges)

    @property
    def temporal(self) -> TemporalStore:
        """The temporal graph; FailedPrecondition when the partition has none."""
        return self._store.temporal_graph()

    def append(
        self, batch_id: str, src: np.ndarray, dst: np.ndarray, t: np.ndarray, efeat: np.ndarray | None, arrived: float
    ) -> AppendAck:
        """:meth:`TemporalStore.append`, timed; ``arrived`` is the request's ``time.perf_counter()``."""
        temporal = self.temporal
        t0 = time.perf_counter()
        ack = temporal.append(batch_id, src, dst, t, efeat)
        done = time.perf_counter()  # the snapshot with the batch was published before append returned
        self._m.append_latency.observe(done - t0)
        self._m.append_batches.labels("duplicate" if ack.duplicate else "applied").inc()
        if not ack.duplicate:  # a retry's edges were visible long before
            self._m.append_visible.observe(done - arrived)
            width = 8 * 3 + 4 * temporal.edge_feat_dim
            self._m.appended_edges.inc(ack.num_edges)
            self._m.append_bytes.inc(ack.num_edges * width)
            self._m.temporal_edges.labels(self._partition).set(temporal.info().num_edges)
        return ack

    def sample(self, q: TemporalQuery) -> TemporalSample:
        """:meth:`TemporalStore.sample` of a query, timed, its roots and edges counted."""
        with self._m.temporal_latency.time():
            out = self.temporal.sample_query(q)
        self._m.temporal_roots.inc(len(q.nodes))
        self._m.temporal_sampled_edges.inc(len(out.nbr))
        return out

    def info(self) -> TemporalInfo:
        """:meth:`TemporalStore.info`."""
        return self.temporal.info()


# -- trainable embeddings (issue 25) ---------------------------------------------------------

# A push: validation, a log fsync (~0.1-10 ms on SSD) and, for a step's last rank, the update.
PUSH_LATENCY_BUCKETS = (0.0005, 0.001, 0.0025, 0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1, 2.5, 5)


@dataclass
class EmbeddingMetrics:
    """What a graph-store's embedding tables export (no table label: names are per job)."""

    rows: Counter
    bytes: Counter
    pushes: Counter
    push_latency: Histogram

    @classmethod
    def create(cls, registry: CollectorRegistry) -> EmbeddingMetrics:
        prefix = "graphfeed_graph_store_embedding"
        return cls(
            rows=Counter(
                f"{prefix}_rows_total",
                "Embedding rows pulled, or gradient rows pushed, by direction (pull, push).",
                ("direction",),
                registry=registry,
            ),
            bytes=Counter(
                f"{prefix}_bytes_total",
                "Embedding bytes pulled (rows) or pushed (ids and gradients), by direction (pull, push).",
                ("direction",),
                registry=registry,
            ),
            pushes=Counter(
                f"{prefix}_pushes_total",
                "PushEmbeddingGrad calls taken, by outcome (pending: the step awaits other ranks; applied: this push "
                "completed its step; duplicate: a retry or replay, nothing taken).",
                ("outcome",),
                registry=registry,
            ),
            push_latency=Histogram(
                f"{prefix}_push_latency_seconds",
                "Time in one PushEmbeddingGrad core call: validate, log fsync and (last rank of a step) the update.",
                buckets=PUSH_LATENCY_BUCKETS,
                registry=registry,
            ),
        )


class MeteredEmbeddings:
    """A partition's :class:`~graphfeed.graph_store.embeddings.store.EmbeddingStore` with
    :class:`EmbeddingMetrics` recorded around the calls the servicer makes."""

    def __init__(self, store: EmbeddingStore, metrics: EmbeddingMetrics) -> None:
        self.store = store
        self._m = metrics

    def iter_pull(
        self, name: str, ids: np.ndarray, after: StepKey | None, timeout_s: float | None
    ) -> Iterator[tuple[int, np.ndarray]]:
        """:meth:`EmbeddingStore.iter_pull` (validated, waited for and read at the call), its
        rows and bytes counted as they are sent."""
        chunks = self.store.iter_pull(name, ids, after, timeout_s)
        return self._counted(chunks)

    def _counted(self, chunks: Iterator[tuple[int, np.ndarray]]) -> Iterator[tuple[int, np.ndarray]]:
        for start, rows in chunks:
            self._m.rows.labels("pull").inc(len(rows))
            self._m.bytes.labels("pull").inc(rows.nbytes)
            yield start, rows

    def push(
        self, name: str, job: str, key: StepKey, rank: int, world: int, ids: np.ndarray, grads: np.ndarray
    ) -> PushAck:
        """:meth:`EmbeddingStore.push`, timed, counted by outcome."""
        with self._m.push_latency.time():
            ack = self.store.push(name, job, key, rank, world, ids, grads)
        outcome = "duplicate" if ack.duplicate else ("pending" if ack.pending_ranks else "applied")
        self._m.pushes.labels(outcome).inc()
        if not ack.duplicate:
            self._m.rows.labels("push").inc(len(ids))
            self._m.bytes.labels("push").inc(np.asarray(ids).nbytes + np.asarray(grads).nbytes)
        return ack
