"""The loader's feature cache: storage tiers and the policies that decide what they hold.

A :class:`CacheTier` stores rows (``HostTier``: a preallocated numpy slab indexed by a
direct-mapped gid -> slot array, so a lookup of a whole minibatch is two fancy-indexing
operations). A :class:`CachePolicy` owns its tier(s) and is driven by the loader through
three hooks: ``warm_up`` once at job start, ``on_access`` after every minibatch lookup, and
``admit`` with the rows fetched for the misses.

Policies: ``none`` (never caches), ``static_degree`` (PaGraph: the highest in-degree nodes,
loaded once, never evicted) and ``lru`` (least recently used at minibatch granularity).
Score-decay prefetch (MassiveGNN), look-ahead/Belady and a GPU tier plug in as further
policies/tiers behind the same hooks.

Not thread-safe: the loader serialises access (one gather thread per stream, a lock per cache).
"""

from __future__ import annotations

from abc import ABC, abstractmethod
from collections.abc import Callable, Sequence
from concurrent.futures import Future
from dataclasses import dataclass

import numpy as np

from graphfeed.common.errors import InvalidArgument
from graphfeed.graph_store.types import PartitionSet

# Ids per graph-store request; keeps each request under the servers' per-request limits.
DEFAULT_MAX_IDS_PER_REQUEST = 1 << 16
POLICIES = ("none", "static_degree", "lru")


@dataclass(frozen=True)
class TierStats:
    """Cumulative counters of one tier (rows, except the byte fields)."""

    tier: str
    hits: int
    misses: int
    inserts: int
    evictions: int
    nbytes: int
    capacity_bytes: int


class CacheTier(ABC):
    """Storage for feature rows keyed by gid. Counters are cumulative row counts."""

    name: str
    hits: int = 0
    misses: int = 0
    inserts: int = 0
    evictions: int = 0

    @abstractmethod
    def lookup(self, ids: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
        """``(hit_mask, rows)``: which ``ids`` are cached, and the rows of ``ids[hit_mask]``."""

    @abstractmethod
    def contains(self, ids: np.ndarray) -> np.ndarray:
        """Boolean mask of cached ``ids``, without touching the counters."""

    @abstractmethod
    def insert(self, ids: np.ndarray, rows: np.ndarray) -> np.ndarray:
        """Stores rows of uncached, unique ``ids`` in free slots; returns the slots used."""

    @abstractmethod
    def evict(self, ids: np.ndarray) -> int:
        """Drops the cached ones among ``ids``; returns how many were dropped."""

    @property
    @abstractmethod
    def nbytes(self) -> int:
        """Bytes of rows held now."""

    @property
    @abstractmethod
    def capacity_bytes(self) -> int:
        """Bytes of rows the tier can hold."""

    def stats(self) -> TierStats:
        return TierStats(self.name, self.hits, self.misses, self.inserts, self.evictions, self.nbytes, self.capacity_bytes)


class HostTier(CacheTier):
    """Rows in a preallocated host-memory slab; ``slot_of[gid]`` is the row's slot or -1.

    Args:
        capacity_bytes: budget for rows; ``capacity_bytes // row_bytes`` rows (at most num_nodes).
        row_shape: shape of one row.
        dtype: element type.
        num_nodes: gids are in ``[0, num_nodes)``.
    """

    name = "host"

    def __init__(self, capacity_bytes: int, row_shape: Sequence[int], dtype: np.dtype | type, num_nodes: int) -> None:
        self.row_shape = tuple(int(d) for d in row_shape)
        self.dtype = np.dtype(dtype)
        self.num_nodes = int(num_nodes)
        self.row_bytes = self.dtype.itemsize * int(np.prod(self.row_shape, dtype=np.int64))
        rows = min(max(int(capacity_bytes), 0) // self.row_bytes, self.num_nodes) if self.row_bytes else 0
        self.capacity_rows = int(rows)
        self._rows = np.empty((rows, *self.row_shape), dtype=self.dtype)
        # The id map costs 4 bytes per node of the graph; a tier without capacity skips it.
        self._slot_of = np.full(self.num_nodes if rows else 0, -1, dtype=np.int32 if rows < 2**31 else np.int64)
        self._id_of = np.full(rows, -1, dtype=np.int64)
        self._free = np.arange(rows - 1, -1, -1, dtype=np.int64)  # a stack: slot 0 is used first
        self._num_free = rows

    @property
    def nbytes(self) -> int:
        return (self.capacity_rows - self._num_free) * self.row_bytes

    @property
    def capacity_bytes(self) -> int:
        return self.capacity_rows * self.row_bytes

    @property
    def num_free(self) -> int:
        return self._num_free

    def _check(self, ids: np.ndarray) -> np.ndarray:
        ids = np.asarray(ids, dtype=np.int64)
        if ids.size and (ids.min() < 0 or ids.max() >= self.num_nodes):
            raise InvalidArgument(f"node ids must be in [0, {self.num_nodes}), got [{ids.min()}, {ids.max()}]")
        return ids

    def slots(self, ids: np.ndarray) -> np.ndarray:
        """Slot of each id, -1 where not cached."""
        ids = self._check(ids)
        if not self.capacity_rows:
            return np.full(ids.shape, -1, dtype=np.int64)
        return self._slot_of[ids].astype(np.int64)

    def used_slots(self) -> np.ndarray:
        """Slots that hold a row."""
        return np.flatnonzero(self._id_of >= 0)

    def cached_ids(self) -> np.ndarray:
        """Gids held, sorted."""
        return np.sort(self._id_of[self._id_of >= 0])

    def contains(self, ids: np.ndarray) -> np.ndarray:
        return self.slots(ids) >= 0

    def lookup(self, ids: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
        slots = self.slots(ids)
        hit = slots >= 0
        n_hit = int(np.count_nonzero(hit))
        self.hits += n_hit
        self.misses += int(hit.size) - n_hit
        return hit, self._rows[slots[hit]]

    def insert(self, ids: np.ndarray, rows: np.ndarray) -> np.ndarray:
        ids = self._check(ids)
        k = int(ids.size)
        if k > self._num_free:
            raise ValueError(f"{k} rows do not fit in {self._num_free} free slots; evict first")
        if np.unique(ids).size != k or self.contains(ids).any():
            raise ValueError("insert takes unique ids that are not cached yet")
        slots = self._free[self._num_free - k : self._num_free][::-1].copy()
        self._num_free -= k
        self._rows[slots] = np.asarray(rows).reshape((k, *self.row_shape))
        self._slot_of[ids] = slots
        self._id_of[slots] = ids
        self.inserts += k
        return slots

    def evict(self, ids: np.ndarray) -> int:
        slots = self.slots(ids)
        return self.evict_slots(np.unique(slots[slots >= 0]))

    def evict_slots(self, slots: np.ndarray) -> int:
        """Frees occupied, unique ``slots``; returns how many."""
        slots = np.asarray(slots, dtype=np.int64)
        k = int(slots.size)
        self._slot_of[self._id_of[slots]] = -1
        self._id_of[slots] = -1
        self._free[self._num_free : self._num_free + k] = slots
        self._num_free += k
        self.evictions += k
        return k


class CachePolicy(ABC):
    """Decides what a tier holds. The loader calls, per minibatch of input nodes ``ids``:
    ``hit, rows = lookup(ids)``; ``on_access(ids, hit)``; fetch ``ids[~hit]``; ``admit(...)``.
    """

    name: str

    def __init__(self, tier: HostTier) -> None:
        self.tier = tier

    def tiers(self) -> list[CacheTier]:
        """The tiers, fastest first (only "host" for now)."""
        return [self.tier]

    def warm_up(self, partitions: PartitionSet, feature_name: str) -> None:  # noqa: B027 - optional hook
        """Called once before the first minibatch of the job; default: start empty."""

    def lookup(self, ids: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
        """``(hit_mask, rows of ids[hit_mask])``."""
        return self.tier.lookup(ids)

    def on_access(self, ids: np.ndarray, hit_mask: np.ndarray) -> None:  # noqa: B027 - optional hook
        """Called after each minibatch lookup; default: nothing."""

    @abstractmethod
    def admit(self, miss_ids: np.ndarray, rows: np.ndarray) -> None:
        """Offers the rows fetched for the misses; the policy inserts/evicts as it sees fit."""


class NoCache(CachePolicy):
    """Never caches: every lookup misses (the counters still count them)."""

    name = "none"

    def admit(self, miss_ids: np.ndarray, rows: np.ndarray) -> None:
        pass


class StaticDegreeCache(CachePolicy):
    """PaGraph: fills the tier once with the highest in-degree nodes (ties: lower gid first),
    then never changes. High in-degree nodes are the likeliest to be sampled as neighbors."""

    name = "static_degree"

    def __init__(self, tier: HostTier, max_ids_per_request: int = DEFAULT_MAX_IDS_PER_REQUEST) -> None:
        super().__init__(tier)
        self.max_ids_per_request = max_ids_per_request

    def warm_up(self, partitions: PartitionSet, feature_name: str) -> None:
        if not self.tier.capacity_rows:
            return
        all_ids = np.arange(self.tier.num_nodes, dtype=np.int64)
        degrees = fan_out(partitions, all_ids, partitions.get_degrees, self.max_ids_per_request).wait((), np.int64)[0]
        top = np.sort(np.argsort(-degrees, kind="stable")[: self.tier.capacity_rows])
        call = lambda p, ids: partitions.get_node_data(p, feature_name, ids)  # noqa: E731
        rows, _ = fan_out(partitions, top, call, self.max_ids_per_request).wait(self.tier.row_shape, self.tier.dtype)
        self.tier.insert(top, rows)

    def admit(self, miss_ids: np.ndarray, rows: np.ndarray) -> None:
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

    def on_access(self, ids: np.ndarray, hit_mask: np.ndarray) -> None:
        self._clock += 1
        if self.tier.capacity_rows:
            self._last_used[self.tier.slots(np.asarray(ids)[hit_mask])] = self._clock

    def admit(self, miss_ids: np.ndarray, rows: np.ndarray) -> None:
        cap = self.tier.capacity_rows
        if not cap or not len(miss_ids):
            return
        # Another stream sharing this cache may have inserted some of them meanwhile.
        new = ~self.tier.contains(miss_ids)
        ids, rows = np.asarray(miss_ids)[new][:cap], np.asarray(rows)[new][:cap]
        need = len(ids) - self.tier.num_free
        if need > 0:
            used = self.tier.used_slots()
            self.tier.evict_slots(used[np.argpartition(self._last_used[used], need - 1)[:need]])
        self._last_used[self.tier.insert(ids, rows)] = self._clock


def make_cache(
    policy: str,
    capacity_bytes: int,
    *,
    row_shape: Sequence[int],
    dtype: np.dtype | type,
    num_nodes: int,
    max_ids_per_request: int = DEFAULT_MAX_IDS_PER_REQUEST,
) -> CachePolicy:
    """A cache of ``policy`` ("none", "static_degree" or "lru") over a host tier of ``capacity_bytes``.

    Raises:
        InvalidArgument: unknown policy.
    """
    if policy not in POLICIES:
        raise InvalidArgument(f"unknown cache policy {policy!r}; expected one of {', '.join(POLICIES)}")
    tier = HostTier(0 if policy == "none" else capacity_bytes, row_shape, dtype, num_nodes)
    if policy == "none":
        return NoCache(tier)
    if policy == "static_degree":
        return StaticDegreeCache(tier, max_ids_per_request)
    return LruCache(tier)


class PendingRows:
    """Requests in flight for rows of ``ids``, fanned out by owner partition (see :func:`fan_out`)."""

    def __init__(self, num_ids: int, parts: list[tuple[int, np.ndarray, Future]]) -> None:
        self.num_ids = num_ids
        self.parts = parts  # (partition, positions in ids, future of their rows)

    def wait(self, row_shape: Sequence[int], dtype: np.dtype | type) -> tuple[np.ndarray, dict[int, int]]:
        """Rows in ``ids`` order and the bytes received per partition; re-raises a failed request."""
        out = np.empty((self.num_ids, *row_shape), dtype=dtype)
        received: dict[int, int] = {}
        try:
            for p, pos, fut in self.parts:
                rows = np.asarray(fut.result())
                out[pos] = rows.reshape((len(pos), *row_shape))
                received[p] = received.get(p, 0) + int(rows.nbytes)
        finally:
            self.cancel()
        return out, received

    def cancel(self) -> None:
        """Cancels requests not started yet (running ones finish on their own deadline)."""
        for _, _, fut in self.parts:
            fut.cancel()


def fan_out(
    partitions: PartitionSet,
    ids: np.ndarray,
    call: Callable[[int, np.ndarray], Future],
    max_ids_per_request: int = DEFAULT_MAX_IDS_PER_REQUEST,
) -> PendingRows:
    """Groups ``ids`` by owner partition and starts ``call(p, chunk)`` for every chunk at once
    (DistDGL's ``_distributed_access``): all requests fly before any is waited on."""
    ids = np.asarray(ids, dtype=np.int64)
    owners = partitions.owner(ids)
    order = np.argsort(owners, kind="stable")
    bounds = np.searchsorted(owners[order], np.arange(partitions.num_partitions + 1))
    pending = PendingRows(len(ids), [])
    try:
        for p in range(partitions.num_partitions):
            pos = order[bounds[p] : bounds[p + 1]]
            for lo in range(0, len(pos), max_ids_per_request):
                chunk = pos[lo : lo + max_ids_per_request]
                pending.parts.append((p, chunk, call(p, ids[chunk])))
    except BaseException:
        pending.cancel()
        raise
    return pending
