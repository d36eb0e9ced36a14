"""Cache tiers: where cached feature rows live. A tier stores and counts; a policy decides.

:class:`CacheTier` is the interface (lookup, contains, insert, evict, bytes, counters) the GPU
tier (:mod:`graphfeed.loader.cache.gpu_tier`) implements too; :class:`HostTier` keeps rows in a
preallocated host-memory slab with a direct-mapped gid -> slot array, so looking up a whole
minibatch is two fancy-indexing operations and nothing on the hot path loops over nodes in
Python.
"""

from __future__ import annotations

from abc import ABC, abstractmethod
from collections.abc import Sequence
from dataclasses import dataclass, replace

import numpy as np

from graphfeed.common.errors import InvalidArgument
from graphfeed.common.rows import scatter_rows, take_rows
from graphfeed.common.schema import DEFAULT_NTYPE


@dataclass(frozen=True)
class TierStats:
    """Cumulative counters of one tier (rows, except the byte fields).

    ``prefetch_issued`` counts rows requested by prefetches, ``prefetch_used`` prefetched rows
    hit at least once before their eviction, ``prefetch_failed`` rows whose prefetch failed,
    ``prefetch_bytes`` bytes of prefetched rows received (remote traffic on top of the misses).
    """

    tier: str
    hits: int
    misses: int
    inserts: int
    evictions: int
    nbytes: int
    capacity_bytes: int
    prefetch_issued: int = 0
    prefetch_used: int = 0
    prefetch_failed: int = 0
    prefetch_bytes: int = 0
    ntype: str = DEFAULT_NTYPE  # the node type whose rows the tier's cache holds

    def __add__(self, other: TierStats) -> TierStats:
        """Field-wise sum (caches of several feature names on the same tier and node type)."""
        return replace(
            self,
            **{
                k: getattr(self, k) + getattr(other, k) for k in self.__dataclass_fields__ if k not in ("tier", "ntype")
            },
        )


class CacheTier(ABC):
    """Storage for feature rows keyed by gid. Counters are cumulative row counts (bytes for
    ``prefetch_bytes``); the policy that fetched rows counts the prefetch ones."""

    name: str
    hits: int = 0
    misses: int = 0
    inserts: int = 0
    evictions: int = 0
    prefetch_issued: int = 0
    prefetch_used: int = 0
    prefetch_failed: int = 0
    prefetch_bytes: int = 0

    @abstractmethod
    def lookup(self, ids: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
        """``(hit_mask, rows)``: which ``ids`` are cached, and the rows of ``ids[hit_mask]``."""

    def lookup_into(self, ids: np.ndarray, out: np.ndarray) -> np.ndarray:
        """Like :meth:`lookup`, writing the hits' rows to ``out[hit_mask]``; returns the mask."""
        hit, rows = self.lookup(ids)
        out[hit] = rows
        return hit

    @abstractmethod
    def contains(self, ids: np.ndarray) -> np.ndarray:
        """Boolean mask of cached ``ids``, without touching the counters."""

    @abstractmethod
    def insert(self, ids: np.ndarray, rows: np.ndarray, prefetched: bool = False) -> np.ndarray:
        """Stores rows of uncached, unique ``ids`` in free slots; returns the slots used.
        ``prefetched`` rows count in ``prefetch_used`` on their first hit."""

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
        return TierStats(
            self.name,
            self.hits,
            self.misses,
            self.inserts,
            self.evictions,
            self.nbytes,
            self.capacity_bytes,
            self.prefetch_issued,
            self.prefetch_used,
            self.prefetch_failed,
            self.prefetch_bytes,
        )


class SlotTier(CacheTier):
    """A tier of ``capacity_rows`` fixed-size slots over gids ``[0, num_nodes)``: the byte
    accounting and id checks shared by the host and GPU tiers. Subclasses set
    ``capacity_rows``, ``row_bytes``, ``num_nodes``, keep ``_num_free`` current and define
    ``slots`` and ``evict_slots``."""

    capacity_rows: int
    row_bytes: int
    num_nodes: int
    _num_free: int
    _free: np.ndarray  # stack of free slots; the top ``_num_free`` entries are free
    _id_of: np.ndarray  # gid held by each slot, -1 when free

    @abstractmethod
    def slots(self, ids: np.ndarray) -> np.ndarray:
        """Slot of each id, -1 where not cached."""

    @abstractmethod
    def evict_slots(self, slots: np.ndarray) -> int:
        """Frees occupied, unique ``slots``; returns how many."""

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

    def _hit_slots(self, ids: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
        """``(hit mask, slots of the hits)`` for a lookup of ``ids``, counted in hits/misses."""
        slots = self.slots(ids)
        hit = slots >= 0
        n_hit = int(np.count_nonzero(hit))
        self.hits += n_hit
        self.misses += int(hit.size) - n_hit
        return hit, slots[hit]

    def _take_slots(self, ids: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
        """Pops a free slot for each of the uncached, unique ``ids``; the caller stores the rows.

        Raises:
            ValueError: not enough free slots, duplicate ids, or an id already cached.
        """
        ids = self._check(ids)
        k = int(ids.size)
        if k > self._num_free:
            raise ValueError(f"{k} rows do not fit in {self._num_free} free slots; evict first")
        if np.unique(ids).size != k or self.contains(ids).any():
            raise ValueError("insert takes unique ids that are not cached yet")
        slots = self._free[self._num_free - k : self._num_free][::-1].copy()
        self._num_free -= k
        self._id_of[slots] = ids
        self.inserts += k
        return ids, slots

    def _release_slots(self, slots: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
        """Pushes occupied, unique ``slots`` back on the free stack; returns them and their gids."""
        slots = np.asarray(slots, dtype=np.int64)
        ids = self._id_of[slots]
        self._id_of[slots] = -1
        k = int(slots.size)
        self._free[self._num_free : self._num_free + k] = slots
        self._num_free += k
        self.evictions += k
        return slots, ids

    def evict(self, ids: np.ndarray) -> int:
        slots = self.slots(ids)
        return self.evict_slots(np.unique(slots[slots >= 0]))


class HostTier(SlotTier):
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
        self._prefetched = np.zeros(rows, dtype=bool)  # inserted by a prefetch, not hit yet

    def slots(self, ids: np.ndarray) -> np.ndarray:
        """Slot of each id, -1 where not cached."""
        ids = self._check(ids)
        if not self.capacity_rows:
            return np.full(ids.shape, -1, dtype=np.int64)
        return self._slot_of[ids].astype(np.int64)

    @property
    def slab(self) -> tuple[np.ndarray, np.ndarray]:
        """``(rows, slot_of)``: the row slab ``[capacity_rows, *row_shape]`` and the gid -> slot
        table (-1: not cached; int32 below 2**31 slots, empty without capacity), as a kernel reads them."""
        return self._rows, self._slot_of

    def move_slab(self, rows: np.ndarray, slot_of: np.ndarray) -> None:
        """Continues in ``rows`` and ``slot_of`` (e.g. pinned host memory a GPU reads in place),
        which take the current contents.

        Raises:
            ValueError: their shapes or dtypes differ from :attr:`slab`'s.
        """
        for new, old in ((rows, self._rows), (slot_of, self._slot_of)):
            if new.shape != old.shape or new.dtype != old.dtype:
                raise ValueError(
                    f"cannot move a {old.dtype}{list(old.shape)} array into a {new.dtype}{list(new.shape)} one"
                )
        rows[...] = self._rows
        slot_of[...] = self._slot_of
        self._rows, self._slot_of = rows, slot_of

    def used_slots(self) -> np.ndarray:
        """Slots that hold a row."""
        return np.flatnonzero(self._id_of >= 0)

    def cached_ids(self) -> np.ndarray:
        """Gids held, sorted."""
        return np.sort(self._id_of[self._id_of >= 0])

    def ids_at(self, slots: np.ndarray) -> np.ndarray:
        """Gid held in each of ``slots`` (-1 for a free slot)."""
        return self._id_of[np.asarray(slots, dtype=np.int64)]

    def contains(self, ids: np.ndarray) -> np.ndarray:
        return self.slots(ids) >= 0

    def lookup(self, ids: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
        hit, hit_slots = self._used_slots(ids)
        return hit, take_rows(self._rows, hit_slots)  # GIL released, prefetching

    def lookup_into(self, ids: np.ndarray, out: np.ndarray) -> np.ndarray:
        """The hits' rows copied once, from the slab to their places in ``out`` (no temporary:
        a lookup then a masked assignment copied 120 MB of a minibatch's hits twice)."""
        hit, hit_slots = self._used_slots(ids)
        scatter_rows(self._rows, hit_slots, out, np.flatnonzero(hit))
        return hit

    def _used_slots(self, ids: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
        """:meth:`_hit_slots` (int64), counting prefetched rows at their first use."""
        hit, hit_slots = self._hit_slots(ids)
        first_use = hit_slots[self._prefetched[hit_slots]]
        self.prefetch_used += int(np.unique(first_use).size)
        self._prefetched[first_use] = False
        return hit, np.asarray(hit_slots, dtype=np.int64)

    def insert(self, ids: np.ndarray, rows: np.ndarray, prefetched: bool = False) -> np.ndarray:
        ids, slots = self._take_slots(ids)
        self._rows[slots] = np.asarray(rows).reshape((len(ids), *self.row_shape))
        self._slot_of[ids] = slots
        self._prefetched[slots] = prefetched
        return slots

    def evict_slots(self, slots: np.ndarray) -> int:
        """Frees occupied, unique ``slots``; returns how many."""
        slots, ids = self._release_slots(slots)
        self._slot_of[ids] = -1
        self._prefetched[slots] = False
        return len(slots)
