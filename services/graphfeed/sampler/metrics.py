"""Domain metrics of a sampler (RPC counts and latencies come from ``RpcMetrics``).

Per-minibatch values are recorded by :class:`MeteredSampler` and per-partition request counts
by :class:`MeteredPartitionSet`, wrappers around the sampler and the partition set, so that
:class:`~graphfeed.sampler.core.MultiHopSampler` stays free of Prometheus.
"""

from __future__ import annotations

import time
from collections.abc import Callable, Sequence
from concurrent.futures import Future
from dataclasses import dataclass

import numpy as np
from prometheus_client import CollectorRegistry, Counter, Histogram

from graphfeed.common.blocks import SampledBlocks
from graphfeed.graph_store.partitions import ForwardingPartitionSet
from graphfeed.graph_store.types import Exclusion, Fanout, PartitionSet, SampledNeighbors
from graphfeed.sampler.core import MultiHopSampler

# A multi-hop minibatch: a millisecond (tiny graph, one hop) to tens of seconds (huge fanouts).
SAMPLING_LATENCY_BUCKETS = (0.001, 0.0025, 0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1, 2.5, 5, 10, 30)


@dataclass
class SamplerMetrics:
    """What a sampler exports; ``partition`` labels are partition ids (a small fixed set)."""

    sampled_edges: Counter
    sampling_latency: Histogram
    partition_requests: Counter
    partition_request_seeds: Counter
    partition_response_bytes: Counter
    minibatches: Counter

    @classmethod
    def create(cls, registry: CollectorRegistry) -> SamplerMetrics:
        return cls(
            sampled_edges=Counter(
                "graphfeed_sampler_sampled_edges_total",
                "Edges in the blocks returned, over all layers.",
                registry=registry,
            ),
            sampling_latency=Histogram(
                "graphfeed_sampler_sampling_latency_seconds",
                "Time to sample and compact one minibatch (all hops, all partitions).",
                buckets=SAMPLING_LATENCY_BUCKETS,
                registry=registry,
            ),
            partition_requests=Counter(
                "graphfeed_sampler_partition_requests_total",
                "SampleNeighbors calls sent, by partition.",
                ("partition",),
                registry=registry,
            ),
            partition_request_seeds=Counter(
                "graphfeed_sampler_partition_request_seeds_total",
                "Frontier nodes sent to be sampled, by partition.",
                ("partition",),
                registry=registry,
            ),
            partition_response_bytes=Counter(
                "graphfeed_sampler_partition_response_bytes_total",
                "Sampled-neighbor bytes received (offsets, src, edge ids; wire or shared memory), by partition.",
                ("partition",),
                registry=registry,
            ),
            minibatches=Counter(
                "graphfeed_sampler_minibatches_total", "Minibatches sampled successfully.", registry=registry
            ),
        )


class MeteredSampler:
    """A :class:`MultiHopSampler` whose successful calls are timed and counted (latency,
    sampled edges, minibatches); arguments and errors are the sampler's."""

    def __init__(self, sampler: MultiHopSampler, metrics: SamplerMetrics) -> None:
        self.sampler = sampler
        self._m = metrics

    def sample(
        self,
        seeds: np.ndarray,
        fanouts: Sequence[Fanout],
        replace: bool,
        job_seed: int,
        epoch: int,
        step: int,
        alloc: Callable[[int, int], tuple[np.ndarray, np.ndarray, np.ndarray, np.ndarray]] | None = None,
        exclude: Exclusion | None = None,
        narrow: bool = False,
    ) -> SampledBlocks:
        """:meth:`MultiHopSampler.sample`, recorded."""
        start = time.perf_counter()
        sb = self.sampler.sample(seeds, fanouts, replace, job_seed, epoch, step, alloc, exclude, narrow)
        self._m.sampling_latency.observe(time.perf_counter() - start)
        self._m.sampled_edges.inc(sb.num_sampled_edges)
        self._m.minibatches.inc()
        return sb


class MeteredPartitionSet(ForwardingPartitionSet):
    """A :class:`PartitionSet` that counts the ``sample_neighbors`` calls it forwards."""

    def __init__(self, inner: PartitionSet, metrics: SamplerMetrics) -> None:
        super().__init__(inner)
        self._m = metrics

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
        self._m.partition_requests.labels(str(p)).inc()
        self._m.partition_request_seeds.labels(str(p)).inc(len(seeds))
        fut = self.inner.sample_neighbors(p, seeds, fanout, replace, rng_seed, first_position, exclude)
        received = self._m.partition_response_bytes.labels(str(p))

        def count(f: Future) -> None:
            if not f.cancelled() and f.exception() is None:
                r = f.result()
                received.inc(r.offsets.nbytes + r.src.nbytes + r.edge_ids.nbytes)

        fut.add_done_callback(count)
        return fut
