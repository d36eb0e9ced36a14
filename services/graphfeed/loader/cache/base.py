"""The loader's feature cache: storage tiers and the policies that decide what they hold.

A :class:`~graphfeed.loader.cache.tiers.CacheTier` stores rows (``HostTier``: a preallocated
numpy slab, :mod:`graphfeed.loader.cache.tiers`). A :class:`CachePolicy` owns its tier(s) and is
driven by the loader through hooks: ``attach`` (a
:class:`~graphfeed.loader.cache.prefetch.Prefetcher`) and ``warm_up`` once at job start,
``on_sampled`` when the look-ahead window learns a future step's input nodes, ``on_access``
after every minibatch lookup, ``admit`` with the rows fetched for the misses, ``forget`` when a
stream ends.

Policies: ``none`` (never caches), ``static_degree`` (PaGraph: the highest in-degree nodes,
loaded once, never evicted), ``lru`` (least recently used at minibatch granularity),
``massivegnn`` (score-decay eviction + periodic prefetch of the most-missed nodes,
:mod:`graphfeed.loader.cache.massivegnn`) and ``lookahead`` (Belady's rule over the sampled window,
:mod:`graphfeed.loader.cache.lookahead`). A GPU tier (:mod:`graphfeed.loader.cache.gpu_tier`) wraps any of them
as a :class:`DeviceCachePolicy`.

Not thread-safe: the loader serialises access (one gather thread per stream, a lock per cache;
prefetch callbacks take the same lock).
"""

from __future__ import annotations

from abc import ABC, abstractmethod
from collections.abc import Callable
from typing import Any, Protocol

import numpy as np

from graphfeed.common.limits import FETCH_IDS_PER_CALL
from graphfeed.graph_store.fanout import fan_out_requests, fetch_rows, merge_arrays
from graphfeed.graph_store.types import PartitionSet
from graphfeed.loader.cache.options import POLICIES, CacheOptions
from graphfeed.loader.cache.prefetch import Prefetcher
from graphfeed.loader.cache.tiers import CacheTier, HostTier, TierStats

__all__ = [
    "POLICIES",
    "AccessKey",
    "CacheOptions",
    "CachePolicy",
    "CacheTier",
    "DeviceCachePolicy",
    "HostTier",
    "LruCache",
    "NoCache",
    "StaticDegreeCache",
    "TierStats",
]

AccessKey = tuple[int, int]
"""(stream, step): identifies one future or current minibatch access of one stream."""


class Rows(Protocol):
    """Rows offered to :meth:`CachePolicy.admit`: ``rows[idx]`` is an array of the rows at
    ``idx`` (an int or bool index array). An ndarray is one; the loader passes a view that
    gathers only the rows asked for, from where the minibatch's features already are."""

    def __len__(self) -> int: ...

    def __getitem__(self, idx: np.ndarray) -> np.ndarray: ...


class RowsAt:
    """``RowsAt(rows, at)[idx]`` is ``rows[at[idx]]``, gathered only when asked for: the misses'
    rows offered to a policy without copying those it will not keep."""

    def __init__(self, rows: Rows, at: np.ndarray) -> None:
        self._rows, self._at = rows, at

    def __len__(self) -> int:
        return len(self._at)

    def __getitem__(self, idx: np.ndarray) -> np.ndarray:
        return self._rows[self._at[idx]]


def all_rows(rows: Rows) -> np.ndarray:
    """Every row of ``rows`` as an array (an array as it is)."""
    return rows if isinstance(rows, np.ndarray) else rows[np.arange(len(rows))]


class CachePolicy(ABC):
    """Decides what a tier holds. The loader calls, per minibatch of input nodes ``ids``:
    ``hit, rows = lookup(ids)``; ``on_access(ids, hit, key)``; fetch ``ids[~hit]``;
    ``admit(...)``; and ``on_sampled(key, ids)`` as soon as a future minibatch is sampled.
    """

    admits = True  # False: admit() ignores its rows, so the loader need not gather them

    name: str

    def device(self) -> DeviceCachePolicy | None:
        """This policy where it can also gather rows into device memory (a GPU tier); else None."""
        return None

    def __init__(self, tier: HostTier) -> None:
        self.tier = tier
        self.prefetcher: Prefetcher | None = None

    def tiers(self) -> list[CacheTier]:
        """The tiers, fastest first (only "host" for now)."""
        return [self.tier]

    def attach(self, prefetcher: Prefetcher) -> None:
        """Gives the policy its background row fetcher (before ``warm_up``)."""
        self.prefetcher = prefetcher

    def warm_up(self, partitions: PartitionSet, feature_name: str) -> None:  # noqa: B027 - optional hook
        """Called once before the first minibatch of the job; default: start empty."""

    def lookup(self, ids: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
        """``(hit_mask, rows of ids[hit_mask])``."""
        return self.tier.lookup(ids)

    def lookup_into(self, ids: np.ndarray, out: np.ndarray) -> np.ndarray:
        """Like :meth:`lookup`, writing the hits' rows to ``out[hit_mask]``; returns the mask.
        A policy that overrides :meth:`lookup` overrides this too."""
        return self.tier.lookup_into(ids, out)

    def on_sampled(self, key: AccessKey, ids: np.ndarray) -> None:  # noqa: B027 - optional hook
        """Step ``key`` of a stream was sampled: ``ids`` will be looked up later; default: nothing."""

    @property
    def hears_ahead(self) -> bool:
        """Whether :meth:`on_sampled` does anything (else announcing a step costs nothing)."""
        return type(self).on_sampled is not CachePolicy.on_sampled

    def on_access(self, ids: np.ndarray, hit_mask: np.ndarray, key: AccessKey | None = None) -> None:  # noqa: B027
        """Called after each minibatch lookup (``key``: which stream and step, if known); default: nothing."""

    @abstractmethod
    def admit(self, miss_ids: np.ndarray, rows: Rows) -> None:
        """Offers the rows fetched for the misses (``rows[idx]``: those of ``miss_ids[idx]``);
        the policy inserts/evicts as it sees fit, taking only the rows it keeps."""

    def forget(self, stream: int) -> None:  # noqa: B027 - optional hook
        """``stream`` ended: its announced steps will not be looked up; default: nothing."""

    def close(self) -> None:
        """Stops background prefetching."""
        if self.prefetcher is not None:
            self.prefetcher.close()

    def _prefetch(self, ids: np.ndarray, landed: Callable[[np.ndarray, np.ndarray], None] | None = None) -> bool:
        """Starts a background fetch of ``ids`` whose rows go to ``landed`` (default
        :meth:`_landed`) with the cache lock held; False if refused (no prefetcher, or busy)."""
        on_rows = self._landed if landed is None else landed
        if self.prefetcher is None or not len(ids) or not self.prefetcher.submit(ids, on_rows, self._prefetch_failed):
            return False
        self.tier.prefetch_issued += len(ids)
        return True

    def _landed(self, ids: np.ndarray, rows: np.ndarray) -> None:
        """Rows of a prefetch arrived; subclasses insert what they still want (and call this)."""
        self.tier.prefetch_bytes += len(ids) * self.tier.row_bytes

    def _prefetch_failed(self, ids: np.ndarray, error: BaseException) -> None:
        """A prefetch failed (graph-store down): its rows stay misses; subclasses release what they reserved."""
        self.tier.prefetch_failed += len(ids)


class DeviceCachePolicy(CachePolicy):
    """A policy that can also gather rows into device memory (a GPU tier in front of a host
    policy): :meth:`lookup_device` instead of :meth:`~CachePolicy.lookup`, then :meth:`fill`
    with the misses' rows; the other hooks as for any policy."""

    def device(self) -> DeviceCachePolicy:
        return self

    @abstractmethod
    def lookup_device(self, ids: np.ndarray) -> tuple[Any, np.ndarray]:
        """``(rows of all ids as a device array, positions of the misses)``; the misses' rows are unset."""

    @abstractmethod
    def fill(self, out: Any, miss_pos: np.ndarray, rows: np.ndarray) -> None:
        """Copies the fetched ``rows`` (host) into ``out[miss_pos]`` (device)."""


class NoCache(CachePolicy):
    """Never caches: every lookup misses (the counters still count them)."""

    name = "none"
    admits = False

    def admit(self, miss_ids: np.ndarray, rows: Rows) -> None:
        pass


class StaticDegreeCache(CachePolicy):
    """PaGraph: fills the tier once with the highest in-degree nodes (ties: lower gid first),
    then never changes. High in-degree nodes are the likeliest to be sampled as neighbors."""

    name = "static_degree"

    admits = False

    def __init__(self, tier: HostTier, max_ids_per_request: int = FETCH_IDS_PER_CALL) -> None:
        super().__init__(tier)
        self.max_ids_per_request = max_ids_per_request

    def warm_up(self, partitions: PartitionSet, feature_name: str) -> None:
        if not self.tier.capacity_rows:
            return
        top = np.sort(
            top_by_degree(
                in_degrees(partitions, self.tier.num_nodes, self.max_ids_per_request, feature_name),
                self.tier.capacity_rows,
            )
        )
        self.tier.insert(top, fetch_rows(partitions, feature_name, top, self.max_ids_per_request)[0])

    def admit(self, miss_ids: np.ndarray, rows: Rows) -> None:
        pass


class LruCache(CachePolicy):
    """Least recently used, exact at minibatch granularity.

    A logical clock advances once per minibatch (``on_access``); every slot remembers the
    clock of its last hit or insert. ``admit`` inserts the misses (at most the capacity) and,
    when free slots run short, evicts the slots with the oldest clock, chosen with
    ``np.argpartition`` in O(capacity). Slots used within the same minibatch are equally
    recent; which of them goes is unspecified.
    """

    name = "lru"

    def __init__(self, tier: HostTier) -> None:
        super().__init__(tier)
        self._last_used = np.zeros(tier.capacity_rows, dtype=np.int64)
        self._clock = 0

    def on_access(self, ids: np.ndarray, hit_mask: np.ndarray, key: AccessKey | None = None) -> None:
        self._clock += 1
        if self.tier.capacity_rows:
            self._last_used[self.tier.slots(np.asarray(ids)[hit_mask])] = self._clock

    def admit(self, miss_ids: np.ndarray, rows: Rows) -> None:
        cap = self.tier.capacity_rows
        if not cap or not len(miss_ids):
            return
        # Another stream sharing this cache may have inserted some of them meanwhile.
        take = np.flatnonzero(~self.tier.contains(miss_ids))[:cap]
        ids, kept = np.asarray(miss_ids)[take], rows[take]
        need = len(ids) - self.tier.num_free
        if need > 0:
            used = self.tier.used_slots()
            self.tier.evict_slots(used[np.argpartition(self._last_used[used], need - 1)[:need]])
        self._last_used[self.tier.insert(ids, kept)] = self._clock


def in_degrees(
    partitions: PartitionSet, num_nodes: int, max_ids_per_request: int = FETCH_IDS_PER_CALL, table: str = ""
) -> np.ndarray:
    """In-degree of every node, from the graph-stores (8 bytes per node over the wire); with
    ``table`` (a node-data key of a typed graph), -1 for the nodes of other types, which that
    table has no rows for (:func:`top_by_degree` never picks them)."""
    all_ids = np.arange(num_nodes, dtype=np.int64)
    pending = fan_out_requests(
        partitions, all_ids, lambda c: partitions.get_degrees(c.partition, c.ids), max_ids_per_request
    )
    degrees = merge_arrays(pending, (), np.int64)
    if "/" in table:  # "ntype/name": a table of one type of a typed graph
        schema = partitions.info.types
        degrees[schema.ntype_of(all_ids) != schema.ntype_id(table.partition("/")[0])] = -1
    return degrees


def top_by_degree(degrees: np.ndarray, k: int) -> np.ndarray:
    """The ``k`` highest-degree gids, highest first; ties: lower gid first; never a gid of degree -1."""
    top = np.argsort(-np.asarray(degrees), kind="stable")[:k]
    return top[np.asarray(degrees)[top] >= 0]
