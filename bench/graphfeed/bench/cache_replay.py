"""Exact replay of an epoch's feature accesses through each cache policy (for ``bench cache``).

The trace is what the loader would look up: the input nodes of every minibatch, sampled
in-process (``MultiHopSampler`` over ``LocalPartitionSet``) with the loader's epoch plan, so it
is byte-identical to what a real job with the same seed reads. Each policy runs on a tier of
1-byte rows with the capacity in rows of the real one (the decisions depend on rows, not on
bytes); graph-store reads are answered with zeros and counted, so remote bytes = (demand
misses + rows fetched by warm-ups and prefetches) x the real row size. The replay assumes the
look-ahead window is full (all ``lookahead_steps`` ahead are sampled when a step is gathered)
and that a prefetch lands before the next minibatch: the best case for the prefetching
policies, which the end-to-end run then checks against reality.
"""

from __future__ import annotations

import time
from collections.abc import Sequence
from concurrent.futures import Future
from dataclasses import asdict, dataclass

import numpy as np

from graphfeed.common.futures import completed
from graphfeed.graph_store.partitions import ForwardingPartitionSet
from graphfeed.graph_store.types import PartitionSet, RowsInto
from graphfeed.loader.cache.base import CacheOptions
from graphfeed.loader.cache.belady import belady
from graphfeed.loader.cache.policies import make_cache
from graphfeed.loader.cache.prefetch import Prefetcher
from graphfeed.loader.plan import EpochPlan
from graphfeed.sampler.core import MultiHopSampler


@dataclass(frozen=True)
class Trace:
    """Per epoch, per step: the input nodes (int32 to halve the memory of a large epoch)."""

    epochs: list[list[np.ndarray]]
    num_nodes: int
    sample_seconds: float

    @property
    def steps(self) -> list[np.ndarray]:
        return [s for e in self.epochs for s in e]

    @property
    def accesses(self) -> int:
        return int(sum(len(s) for s in self.steps))


def record_trace(
    partitions: PartitionSet,
    *,
    fanouts: Sequence[int],
    batch_size: int,
    epochs: int,
    job_seed: int,
    max_steps: int | None = None,
    split: str = "train",
) -> Trace:
    """Samples ``epochs`` epochs (at most ``max_steps`` steps each) as the loader plans them."""
    split_ids = np.concatenate(
        [np.asarray(partitions.get_split(p, split), dtype=np.int64) for p in range(partitions.num_partitions)]
    )
    sampler = MultiHopSampler(partitions)
    t0 = time.perf_counter()
    out: list[list[np.ndarray]] = []
    for epoch in range(epochs):
        plan = EpochPlan.build(
            split_ids,
            job_seed=job_seed,
            epoch=epoch,
            rank=0,
            world_size=1,
            batch_size=batch_size,
            shuffle=True,
            drop_last=False,
        )
        n = plan.num_steps if max_steps is None else min(plan.num_steps, max_steps)
        steps = []
        for step in range(n):
            sb = sampler.sample(plan.seeds(step), list(fanouts), False, job_seed, epoch, step)
            steps.append(np.asarray(sb.input_nodes, dtype=np.int32))
        out.append(steps)
    return Trace(out, int(partitions.info.num_nodes), time.perf_counter() - t0)


class CountingZeros(ForwardingPartitionSet):
    """A PartitionSet that serves topology from ``inner`` and node data as 1-byte zeros, counting rows."""

    def __init__(self, inner: PartitionSet) -> None:
        super().__init__(inner)
        self.rows_read = 0

    def read_node_data(self, p: int, name: str, ids: np.ndarray, into: RowsInto) -> Future[int]:
        return completed(lambda: into.place(self.read(ids)))

    def read(self, ids: np.ndarray) -> np.ndarray:
        self.rows_read += len(ids)
        return np.zeros(len(ids), dtype=np.uint8)


@dataclass(frozen=True)
class PolicyResult:
    """One policy at one capacity over the whole trace."""

    policy: str
    capacity_fraction: float
    capacity_rows: int
    accesses: int
    hits: int
    misses: int
    rows_fetched: int  # misses + warm-up/prefetch rows
    prefetch_issued: int
    prefetch_used: int
    seconds: float

    @property
    def hit_rate(self) -> float:
        """Lookups served from the cache (prefetched rows count once they are there)."""
        return self.hits / self.accesses if self.accesses else 0.0

    @property
    def reuse_rate(self) -> float:
        """1 - rows fetched / lookups: comparable with Belady, whose every hit saves a fetch."""
        return 1.0 - self.rows_fetched / self.accesses if self.accesses else 0.0

    def to_json(self, row_bytes: int, epochs: int) -> dict:
        d = asdict(self)
        d.update(
            hit_rate=self.hit_rate,
            reuse_rate=self.reuse_rate,
            remote_bytes_per_epoch=self.rows_fetched * row_bytes / epochs,
        )
        return d


def replay_policy(
    trace: Trace,
    partitions: PartitionSet,
    policy: str,
    capacity_fraction: float,
    *,
    lookahead_steps: int,
    options: CacheOptions,
    feature_name: str = "feat",
) -> PolicyResult:
    """Drives ``policy`` exactly as the loader's pipeline does, one stream per epoch."""
    cap_rows = int(capacity_fraction * trace.num_nodes)
    parts = CountingZeros(partitions)
    cache = make_cache(policy, cap_rows, row_shape=(), dtype=np.uint8, num_nodes=trace.num_nodes, options=options)
    prefetcher = Prefetcher(parts.read, manual=True, max_pending=1 << 30)
    t0 = time.perf_counter()
    cache.attach(prefetcher)
    cache.warm_up(parts, feature_name)
    prefetcher.run_pending()
    for epoch, steps in enumerate(trace.epochs):
        for s, ids32 in enumerate(steps):
            for t in range(s, min(s + lookahead_steps, len(steps))):
                if t == s + lookahead_steps - 1 or s == 0:
                    cache.on_sampled((epoch, t), steps[t].astype(np.int64))
            prefetcher.run_pending()
            ids = ids32.astype(np.int64)
            hit, _ = cache.lookup(ids)
            cache.on_access(ids, hit, (epoch, s))
            cache.admit(ids[~hit], np.zeros(int(np.count_nonzero(~hit)), dtype=np.uint8))
            prefetcher.run_pending()
        cache.forget(epoch)
    tier = cache.tier
    return PolicyResult(
        policy,
        capacity_fraction,
        cap_rows,
        tier.hits + tier.misses,
        tier.hits,
        tier.misses,
        tier.misses + parts.rows_read,
        tier.prefetch_issued,
        tier.prefetch_used,
        time.perf_counter() - t0,
    )


def replay_belady(trace: Trace, capacity_fraction: float) -> PolicyResult:
    """The offline optimum over the whole trace (starting empty)."""
    cap_rows = int(capacity_fraction * trace.num_nodes)
    t0 = time.perf_counter()
    r = belady(trace.steps, cap_rows, trace.num_nodes)
    return PolicyResult(
        "belady", capacity_fraction, cap_rows, r.accesses, r.hits, r.misses, r.misses, 0, 0, time.perf_counter() - t0
    )
