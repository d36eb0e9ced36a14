"""Domain metrics of a loader (RPC counts and latencies come from ``RpcMetrics``).

Per-minibatch values are recorded by :meth:`LoaderMetrics.record_minibatch`, the loader core's
``on_minibatch`` hook. Cache counters and the queue depth are read from the loader at scrape
time (:meth:`LoaderMetrics.watch`), so they are exact and the core never imports Prometheus.
"""

from __future__ import annotations

from collections.abc import Iterator
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Protocol

from prometheus_client import CollectorRegistry, Counter, Histogram
from prometheus_client.core import CounterMetricFamily, GaugeMetricFamily, Metric

from graphfeed.loader.cache.base import TierStats
from graphfeed.loader.packs.tier import PackStats

if TYPE_CHECKING:
    from graphfeed.loader.minibatch import ReadyMinibatch

# One multi-hop sampler round trip or one feature gather: sub-millisecond to tens of seconds.
LATENCY_BUCKETS = (0.0005, 0.001, 0.0025, 0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1, 2.5, 5, 10, 30)

# (TierStats field, metric name, help); hit rate = hits / (hits + misses) in PromQL.
_TIER_COUNTERS = (
    ("hits", "graphfeed_loader_cache_hits", "Input-feature rows served from the cache"),
    ("misses", "graphfeed_loader_cache_misses", "Input-feature rows not in the cache (fetched from graph-stores)"),
    ("inserts", "graphfeed_loader_cache_inserts", "Rows inserted into the cache"),
    ("evictions", "graphfeed_loader_cache_evictions", "Rows evicted from the cache"),
    ("prefetch_issued", "graphfeed_loader_prefetch_issued", "Rows requested by background prefetches"),
    ("prefetch_used", "graphfeed_loader_prefetch_used", "Prefetched rows hit at least once before their eviction"),
    ("prefetch_failed", "graphfeed_loader_prefetch_failed", "Prefetched rows whose fetch failed (they stay misses)"),
    ("prefetch_bytes", "graphfeed_loader_prefetch_bytes", "Bytes of prefetched rows received from graph-stores"),
)

_PACK_COUNTERS = (
    ("graphfeed_loader_pack_read_bytes", "Bytes read from pack files (packed minibatch features on disk)."),
    (
        "graphfeed_loader_pack_fallbacks",
        "Pack files that failed their checksums or length: their rows came from the graph-stores.",
    ),
    (
        "graphfeed_loader_pack_refused",
        "Pack directories refused at stream start (written for another graph, job or epoch).",
    ),
    (
        "graphfeed_loader_pack_unpacked_epochs",
        (
            "Streams (one epoch of one rank) of a loader with a pack root that found no packs: every miss "
            "went to the graph-stores."
        ),
    ),
    (
        "graphfeed_loader_pack_reused_epochs",
        "Streams (one epoch of one rank) with no packs of their own served from another epoch's packs of their job.",
    ),
    (
        "graphfeed_loader_pack_read_seconds",
        "Time spent reading and checking pack files (off the minibatch path when read ahead).",
    ),
)


class LoaderState(Protocol):
    """What the scrape-time collector reads (implemented by :class:`graphfeed.loader.core.Loader`;
    its ``pack_stats``, a :class:`PackStats`, is read where present)."""

    def cache_stats(self, by_ntype: bool = False) -> list[TierStats]: ...

    def queue_depth(self) -> int: ...

    def open_streams(self) -> int: ...


class _StateCollector:
    """Exports the loader's cumulative cache counters and queue depth when scraped."""

    def __init__(self) -> None:
        self.source: LoaderState | None = None

    def describe(self) -> list[Metric]:
        return list(self._families([], 0, 0))

    def collect(self) -> Iterator[Metric]:
        src = self.source
        if src is None:
            return iter(self.describe())
        return self._families(
            src.cache_stats(by_ntype=True), src.queue_depth(), src.open_streams(), getattr(src, "pack_stats", None)
        )

    @staticmethod
    def _families(tiers: list[TierStats], depth: int, streams: int, packs: PackStats | None = None) -> Iterator[Metric]:
        for what, name, doc in _TIER_COUNTERS:
            fam = CounterMetricFamily(name, f"{doc}, by tier and node type.", labels=["tier", "ntype"])
            for t in tiers:
                fam.add_metric([t.tier, t.ntype], getattr(t, what))
            yield fam
        size = GaugeMetricFamily(
            "graphfeed_loader_cache_bytes",
            "Bytes of feature rows held in the cache, by tier and node type.",
            labels=["tier", "ntype"],
        )
        for t in tiers:
            size.add_metric([t.tier, t.ntype], t.nbytes)
        yield size
        cap = GaugeMetricFamily(
            "graphfeed_loader_cache_capacity_bytes",
            "Bytes of feature rows the cache can hold, by tier and node type.",
            labels=["tier", "ntype"],
        )
        for t in tiers:
            cap.add_metric([t.tier, t.ntype], t.capacity_bytes)
        yield cap
        yield GaugeMetricFamily(
            "graphfeed_loader_queue_depth", "Ready minibatches waiting for their trainer, all streams.", value=depth
        )
        # The GraphfeedLoaderStreamStalled alert: streams open while no minibatch flows.
        yield GaugeMetricFamily(
            "graphfeed_loader_open_streams", "StreamMinibatches streams in progress.", value=streams
        )
        yield from _pack_families(packs or PackStats())


def _pack_families(packs: PackStats) -> Iterator[Metric]:
    """The packed-disk tier's own counters (its row hits are the cache counters' tier="pack")."""
    with packs.lock:
        values = (packs.disk_bytes, packs.fallbacks, packs.refused, packs.unpacked, packs.reused, packs.read_seconds)
    for (name, doc), value in zip(_PACK_COUNTERS, values):
        yield CounterMetricFamily(name, doc, value=value)


@dataclass
class LoaderMetrics:
    """What a loader exports; ``partition`` labels are partition ids, ``tier`` a cache tier ("host", "gpu")."""

    minibatches: Counter
    sampled_edges: Counter
    sample_latency: Histogram
    gather_latency: Histogram
    remote_feature_bytes: Counter
    seed_edges: Counter  # edge minibatches (link prediction): positive edges, negative pairs, excluded edges
    negative_pairs: Counter
    excluded_edges: Counter
    _state: _StateCollector = field(repr=False)

    @classmethod
    def create(cls, registry: CollectorRegistry) -> LoaderMetrics:
        state = _StateCollector()
        registry.register(state)
        return cls(
            minibatches=Counter(
                "graphfeed_loader_minibatches_total", "Minibatches streamed to trainers.", registry=registry
            ),
            sampled_edges=Counter(
                "graphfeed_loader_sampled_edges_total",
                "Edges in the blocks of streamed minibatches.",
                registry=registry,
            ),
            sample_latency=Histogram(
                "graphfeed_loader_sample_latency_seconds",
                "Sampler round trip of one minibatch.",
                buckets=LATENCY_BUCKETS,
                registry=registry,
            ),
            gather_latency=Histogram(
                "graphfeed_loader_gather_latency_seconds",
                "Cache lookup plus remote fetch of one minibatch's features and labels.",
                buckets=LATENCY_BUCKETS,
                registry=registry,
            ),
            remote_feature_bytes=Counter(
                "graphfeed_loader_remote_feature_bytes_total",
                "Node-data bytes (features and labels) received for minibatches, by partition "
                "(prefetches: graphfeed_loader_prefetch_bytes_total).",
                ("partition",),
                registry=registry,
            ),
            seed_edges=Counter(
                "graphfeed_loader_seed_edges_total",
                "Positive (seed) edges of streamed edge minibatches (link prediction).",
                registry=registry,
            ),
            negative_pairs=Counter(
                "graphfeed_loader_negative_pairs_total",
                "Negative pairs of streamed edge minibatches.",
                registry=registry,
            ),
            excluded_edges=Counter(
                "graphfeed_loader_excluded_edges_total",
                "Edges left out of the sampled neighbourhoods of edge minibatches (seed edges and reverse twins).",
                registry=registry,
            ),
            _state=state,
        )

    def watch(self, loader: LoaderState) -> None:
        """Exports ``loader``'s cache counters and queue depth from now on."""
        self._state.source = loader

    def record_minibatch(self, mb: ReadyMinibatch) -> None:
        """The loader's ``on_minibatch`` hook: one streamed minibatch."""
        self.minibatches.inc()
        self.sampled_edges.inc(mb.blocks.num_sampled_edges)
        self.sample_latency.observe(mb.stats.sample_seconds)
        self.gather_latency.observe(mb.stats.gather_seconds)
        for p, nbytes in mb.stats.remote_bytes_by_partition.items():
            self.remote_feature_bytes.labels(str(p)).inc(nbytes)
        if mb.pairs is not None:
            self.seed_edges.inc(len(mb.pairs.src))
            self.negative_pairs.inc(len(mb.pairs.neg_src))
            self.excluded_edges.inc(mb.pairs.excluded_edges)
