"""MassiveGNN's continuous prefetch and eviction (Sarkar et al., 2024), as a loader cache policy.

The buffer starts with a fraction of the halo nodes, chosen by in-degree or at random, each
with score 1. Every minibatch, the score of every buffered node that is not hit decays by
``1 - alpha``. Every ``period`` minibatches, nodes whose score fell below ``(1 - alpha)^period``
are evicted, and the free slots are refilled by prefetching the nodes that missed most since
the last round; a prefetched node starts with its miss count as its score (as the reference
implementation does), so a node that missed often survives longer without hits. Demand misses
are not inserted: only prefetches fill the buffer.

What "halo" means for a loader: MassiveGNN's trainer owns a partition and buffers the remote
(halo) neighbours of it. A graphfeed loader owns no partition: every feature row it serves
crosses the network from a graph-store, so every node is remote and the candidate set is the
whole graph. Restricting it to nodes reachable from the training split would need the
split's L-hop neighbourhood over RPC before the first minibatch, and with 3 hops and a 60 %
training split on a power-law graph that is nearly every node with an edge, so it would
change little. The initial fill is therefore ``min(capacity, fraction * num_nodes)`` rows, the
highest in-degree nodes (PaGraph's observation: they are sampled most) or uniform at random;
free slots left when that is below the capacity are filled by the first rounds' prefetches,
so the policy uses the same capacity as the others.

Scores are kept exactly without touching every slot each minibatch: a slot stores the score it
started with, the minibatch it was inserted at and its hits since, so its score is
``base * (1 - alpha) ** (minibatches since insertion - hits)``, computed only at a round.
Prefetches run on the :class:`~graphfeed.loader.cache.prefetch.Prefetcher` (never on the minibatch
path); a failed one leaves its slots empty, so those rows are plain misses.
"""

from __future__ import annotations

import numpy as np

from graphfeed.common.limits import FETCH_IDS_PER_CALL
from graphfeed.common.seeds import rng
from graphfeed.graph_store.types import PartitionSet
from graphfeed.loader.cache.base import (
    AccessKey,
    CacheOptions,
    CachePolicy,
    Rows,
    in_degrees,
    top_by_degree,
)
from graphfeed.loader.cache.tiers import HostTier


class MassiveGnnCache(CachePolicy):
    """Score-decay eviction and periodic prefetch of the most-missed nodes.

    Args:
        tier: the host tier (its capacity is the buffer size).
        options: ``prefetch_fraction``, ``period_steps``, ``alpha``, ``initial_fill``, ``seed``.
        max_ids_per_request: ids per graph-store request for the degree scan.
    """

    name = "massivegnn"
    admits = False  # demand misses never enter (see admit): the loader need not hand their rows over

    def __init__(self, tier: HostTier, options: CacheOptions, max_ids_per_request: int = FETCH_IDS_PER_CALL) -> None:
        super().__init__(tier)
        self.options = options
        self.max_ids_per_request = max_ids_per_request
        self.decay = 1.0 - options.alpha
        self.threshold = self.decay**options.period_steps
        cap, n = tier.capacity_rows, tier.num_nodes if tier.capacity_rows else 0
        self._base = np.ones(cap, dtype=np.float64)  # score when inserted
        self._born = np.zeros(cap, dtype=np.int64)  # minibatch count when inserted
        self._hits = np.zeros(cap, dtype=np.int64)  # hits since inserted
        self._misses = np.zeros(n, dtype=np.int32)  # per node, since the last round
        self._inflight = np.zeros(n, dtype=bool)  # being prefetched
        self._reserved = 0  # free slots promised to prefetches in flight
        self._step = 0

    @property
    def steps(self) -> int:
        """Minibatches seen."""
        return self._step

    def scores(self) -> tuple[np.ndarray, np.ndarray]:
        """``(gids, scores)`` of the buffered nodes, by slot."""
        used = self.tier.used_slots()
        return self.tier.ids_at(used), self._score(used)

    def _score(self, slots: np.ndarray) -> np.ndarray:
        return self._base[slots] * self.decay ** ((self._step - self._born[slots]) - self._hits[slots])

    def warm_up(self, partitions: PartitionSet, feature_name: str) -> None:
        """Starts the initial fill in the background (the degree scan itself is one short RPC round)."""
        cap = self.tier.capacity_rows
        k = min(cap, round(self.options.prefetch_fraction * self.tier.num_nodes))
        if not k:
            return
        if self.options.initial_fill == "random":
            first = rng(self.options.seed, "massivegnn-fill").choice(self.tier.num_nodes, size=k, replace=False)
        else:
            first = top_by_degree(
                in_degrees(partitions, self.tier.num_nodes, self.max_ids_per_request, feature_name), k
            )
        self._start(np.asarray(first, dtype=np.int64), np.ones(k, dtype=np.float64))

    def on_access(self, ids: np.ndarray, hit_mask: np.ndarray, key: AccessKey | None = None) -> None:
        if not self.tier.capacity_rows:
            return
        ids = np.asarray(ids, dtype=np.int64)
        self._hits[self.tier.slots(ids[hit_mask])] += 1
        self._misses[ids[~hit_mask]] += 1  # a block's input nodes are unique: no add.at needed
        self._step += 1
        if self._step % self.options.period_steps == 0:
            self._round()

    def admit(self, miss_ids: np.ndarray, rows: Rows) -> None:
        """Demand misses never enter: the buffer is filled by prefetches only."""

    def _round(self) -> None:
        """Evicts nodes whose score fell below the threshold; prefetches the most-missed ones."""
        used = self.tier.used_slots()
        self.tier.evict_slots(used[self._score(used) < self.threshold])
        room = self.tier.num_free - self._reserved
        missed = np.flatnonzero(self._misses)
        missed = missed[~self.tier.contains(missed) & ~self._inflight[missed]]
        if room > 0 and len(missed):
            counts = self._misses[missed]
            pick = missed[np.lexsort((missed, -counts))][:room]  # most misses first, ties: lower gid
            self._start(pick, self._misses[pick].astype(np.float64))
        self._misses[:] = 0

    def _start(self, ids: np.ndarray, base: np.ndarray) -> None:
        if self._prefetch(ids, lambda got, rows: self._landed_with(got, rows, base)):
            self._inflight[ids] = True
            self._reserved += len(ids)

    def _landed_with(self, ids: np.ndarray, rows: np.ndarray, base: np.ndarray) -> None:
        self._landed(ids, rows)
        self._inflight[ids] = False
        self._reserved -= len(ids)
        new = ~self.tier.contains(ids)
        fit = np.flatnonzero(new)[: max(self.tier.num_free - self._reserved, 0)]
        slots = self.tier.insert(ids[fit], np.asarray(rows)[fit], prefetched=True)
        self._base[slots] = base[fit]
        self._born[slots] = self._step
        self._hits[slots] = 0

    def _prefetch_failed(self, ids: np.ndarray, error: BaseException) -> None:
        super()._prefetch_failed(ids, error)
        self._inflight[ids] = False
        self._reserved -= len(ids)
