"""A GPU cache tier for the loader, in front of the host tier of any cache policy.

The tier is loader code built on the kernels of :mod:`graphfeed.gpu_kernels` (which know
nothing of the loader); the loader imports this module only when a GPU tier is asked for, and
importing it does not import CuPy.

:class:`GpuTier` keeps feature rows in a device-memory slab and a direct-mapped int32
``slot_of`` table over all node ids in device memory (plus a host mirror, so that
``contains``/``insert``/``evict`` need no device round trip). :class:`GpuTieredCache` wraps a
policy from ``graphfeed.loader.cache.base`` and is a :class:`~graphfeed.loader.cache.base.DeviceCachePolicy`:
the GPU tier is filled once at warm-up with the highest in-degree nodes (PaGraph's choice for
GPU memory) and never changes; the wrapped policy runs its host tier exactly as before on
whatever the GPU tier misses.

Two ways to read it:

* :meth:`GpuTieredCache.lookup` (the ``CachePolicy`` API the loader's gather calls): GPU hits
  are gathered by the kernel and copied to the host; the rest go through the wrapped policy's
  own ``lookup``. Features leave the loader over gRPC anyway, so this path buys no bandwidth;
  it keeps one code path when trainer and loader are separate processes.
* :meth:`GpuTieredCache.lookup_device` (a loader embedded in the trainer's process): one
  ``cache_gather`` kernel reads GPU hits from device memory and host-tier hits zero-copy from
  the host slab, which was moved to pinned, mapped memory at construction; the result stays on
  the device and reaches PyTorch through DLPack (``memory.to_torch``) without a host copy.
"""

from __future__ import annotations

import logging
from collections.abc import Sequence
from typing import Any

import numpy as np

from graphfeed.common.errors import InvalidArgument
from graphfeed.common.limits import FETCH_IDS_PER_CALL
from graphfeed.gpu_kernels import kernels
from graphfeed.gpu_kernels._cuda import gpu_available, unavailable_reason
from graphfeed.gpu_kernels.backend import Backend, cuda_backend
from graphfeed.graph_store.fanout import fetch_rows
from graphfeed.graph_store.types import PartitionSet
from graphfeed.loader.cache.base import (
    AccessKey,
    CachePolicy,
    DeviceCachePolicy,
    Rows,
    in_degrees,
    top_by_degree,
)
from graphfeed.loader.cache.prefetch import Prefetcher
from graphfeed.loader.cache.tiers import CacheTier, SlotTier

log = logging.getLogger(__name__)


class GpuTier(SlotTier):
    """Rows in a device-memory slab; ``slot_of[gid]`` (device, int32) is the slot or -1.

    Args:
        capacity_bytes: budget for rows; ``capacity_bytes // row_bytes`` rows (at most num_nodes).
        row_shape: shape of one row.
        dtype: element type.
        num_nodes: gids are in ``[0, num_nodes)``; the slot table costs 4 bytes per node on the
            device and 4 on the host.
        backend: where the slab lives; default the CUDA device.
    """

    name = "gpu"

    def __init__(
        self,
        capacity_bytes: int,
        row_shape: Sequence[int],
        dtype: np.dtype | type,
        num_nodes: int,
        *,
        backend: Backend | None = None,
    ) -> None:
        self.backend = backend or cuda_backend()
        xp = self.backend.xp
        self.row_shape = tuple(int(d) for d in row_shape)
        self.dtype = np.dtype(dtype)
        self.num_nodes = int(num_nodes)
        if self.num_nodes >= 2**31:
            raise InvalidArgument(f"the GPU tier's int32 slot table needs < 2**31 nodes, got {self.num_nodes}")
        self.row_bytes = self.dtype.itemsize * int(np.prod(self.row_shape, dtype=np.int64))
        self.capacity_rows = (
            int(min(max(int(capacity_bytes), 0) // self.row_bytes, self.num_nodes)) if self.row_bytes else 0
        )
        self.rows = xp.empty((self.capacity_rows, *self.row_shape), dtype=self.dtype)
        self.slot_of = xp.full(self.num_nodes, -1, dtype=xp.int32)
        self._slot_host = np.full(self.num_nodes, -1, dtype=np.int32)
        self._id_of = np.full(self.capacity_rows, -1, dtype=np.int64)
        self._free = np.arange(self.capacity_rows - 1, -1, -1, dtype=np.int64)  # a stack: slot 0 first
        self._num_free = self.capacity_rows

    def slots(self, ids: np.ndarray) -> np.ndarray:
        """Slot of each id, -1 where not cached (from the host mirror)."""
        return self._slot_host[self._check(ids)].astype(np.int64)

    def contains(self, ids: np.ndarray) -> np.ndarray:
        return self.slots(ids) >= 0

    def lookup(self, ids: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
        hit, hit_slots = self._hit_slots(ids)
        rows = kernels.gather_rows(self.rows, hit_slots, backend=self.backend)
        return hit, self.backend.to_host(rows)

    def insert(self, ids: np.ndarray, rows: np.ndarray, prefetched: bool = False) -> np.ndarray:
        """Stores rows of uncached, unique ``ids`` (``prefetched`` is accepted for the
        interface; this tier is filled at warm-up and does not count prefetches)."""
        ids, slots = self._take_slots(ids)
        xp = self.backend.xp
        self.rows[xp.asarray(slots)] = xp.asarray(
            np.asarray(rows, dtype=self.dtype).reshape((len(ids), *self.row_shape))
        )
        self.slot_of[xp.asarray(ids)] = xp.asarray(slots.astype(np.int32))
        self._slot_host[ids] = slots
        return slots

    def evict_slots(self, slots: np.ndarray) -> int:
        """Frees occupied, unique ``slots``; returns how many."""
        slots, ids = self._release_slots(slots)
        self.slot_of[self.backend.xp.asarray(ids)] = -1
        self._slot_host[ids] = -1
        return len(slots)


# From this share of GPU hits (in the previous device lookup) on, the host-tier rows are read in
# the ids' order: sorting them first cost more than it saved (H100, 100k ids, 10M-row pinned
# table: 183 GB/s sorted vs 322 as given at 90 % GPU hits; 44 vs 32 at 50 %).
SORTED_READS_BELOW_GPU_HITS = 0.75


class GpuTieredCache(DeviceCachePolicy):
    """A static GPU tier in front of ``inner``, a policy with a host tier.

    Every ``CachePolicy`` hook reaches ``inner`` (``on_access`` for the ids the GPU tier does
    not hold), so the wrapped policy keeps its behaviour; a hook added to ``CachePolicy`` must
    be delegated here too.

    Args:
        inner: the host-tier policy (from ``graphfeed.loader.cache.base.make_cache``).
        gpu: an empty GPU tier with the same row shape, dtype and node count.
        max_ids_per_request: ids per graph-store request at warm-up.
        pin_host: move ``inner``'s host slab and slot table to pinned, mapped memory so that
            :meth:`lookup_device` reads host hits zero-copy.
    """

    def __init__(
        self,
        inner: CachePolicy,
        gpu: GpuTier,
        *,
        max_ids_per_request: int = FETCH_IDS_PER_CALL,
        pin_host: bool = True,
    ) -> None:
        super().__init__(inner.tier)
        self.inner, self.gpu, self.backend = inner, gpu, gpu.backend
        self.name = f"gpu+{inner.name}"
        self.admits = inner.admits
        self.max_ids_per_request = max_ids_per_request
        self._host_rows: Any
        self._host_slot_of: Any
        self._host_rows, self._host_slot_of = self._pin_host_tier() if pin_host else (None, None)
        self._gpu_share = 0.0  # of the previous device lookup's ids

    def _pin_host_tier(self) -> tuple[Any, Any]:
        """Moves the host tier's slab and slot table to mapped memory (contents copied; the tier
        keeps using them as NumPy arrays); returns their device views. (None, None) when the tier
        has no rows or is not laid out as the kernel reads it (lookup_device then gathers host
        hits on the CPU)."""
        tier = self.inner.tier
        rows, slot_of = tier.slab
        if (
            not len(rows)
            or slot_of.dtype != np.int32
            or slot_of.shape != (self.gpu.num_nodes,)
            or rows.shape[1:] != self.gpu.row_shape
        ):
            return None, None
        host_rows, dev_rows = self.backend.mapped_empty(rows.shape, rows.dtype)
        host_slot_of, dev_slot_of = self.backend.mapped_empty(slot_of.shape, slot_of.dtype)
        tier.move_slab(host_rows, host_slot_of)
        return dev_rows, dev_slot_of

    @property
    def host_pinned(self) -> bool:
        """Whether host-tier hits are read zero-copy by :meth:`lookup_device`."""
        return self._host_rows is not None

    def tiers(self) -> list[CacheTier]:
        return [self.gpu, *self.inner.tiers()]

    def attach(self, prefetcher: Prefetcher) -> None:
        """The prefetcher serves ``inner`` (the GPU tier is filled at warm-up only)."""
        self.inner.attach(prefetcher)

    def on_sampled(self, key: AccessKey, ids: np.ndarray) -> None:
        self.inner.on_sampled(key, ids)

    def forget(self, stream: int) -> None:
        self.inner.forget(stream)

    def close(self) -> None:
        """Stops ``inner``'s background prefetches."""
        self.inner.close()

    def warm_up(self, partitions: PartitionSet, feature_name: str) -> None:
        """Warms ``inner``, then fills the GPU tier with the highest in-degree nodes."""
        self.inner.warm_up(partitions, feature_name)
        gpu = self.gpu
        if not gpu.capacity_rows or gpu.num_free < gpu.capacity_rows:
            return
        top = np.sort(
            top_by_degree(
                in_degrees(partitions, gpu.num_nodes, self.max_ids_per_request, feature_name), gpu.capacity_rows
            )
        )
        gpu.insert(top, fetch_rows(partitions, feature_name, top, self.max_ids_per_request)[0])
        log.info("GPU tier warm: %d rows, %d bytes", len(top), gpu.nbytes)

    def lookup(self, ids: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
        """``(hit_mask, rows of ids[hit_mask])`` on the host: GPU tier first, then ``inner``."""
        ids = np.asarray(ids, dtype=np.int64)
        gpu_hit, gpu_rows = self.gpu.lookup(ids)
        rest = np.flatnonzero(~gpu_hit)
        host_hit, host_rows = self.inner.lookup(ids[rest])
        hit = gpu_hit.copy()
        hit[rest[host_hit]] = True
        rows = np.empty((len(ids), *self.gpu.row_shape), dtype=self.gpu.dtype)
        rows[gpu_hit] = gpu_rows
        rows[rest[host_hit]] = host_rows
        return hit, rows[hit]

    def lookup_into(self, ids: np.ndarray, out: np.ndarray) -> np.ndarray:
        hit, rows = self.lookup(ids)
        out[hit] = rows
        return hit

    def on_access(self, ids: np.ndarray, hit_mask: np.ndarray, key: AccessKey | None = None) -> None:
        """Forwards the ids the GPU tier does not hold (the host policy never sees the others)."""
        rest = ~self.gpu.contains(ids)
        self.inner.on_access(np.asarray(ids)[rest], np.asarray(hit_mask)[rest], key)

    def admit(self, miss_ids: np.ndarray, rows: Rows) -> None:
        self.inner.admit(miss_ids, rows)

    def lookup_device(self, ids: np.ndarray) -> tuple[Any, np.ndarray]:
        """Rows of ``ids`` on the device and the positions of the misses (their rows are zero).

        GPU hits come from device memory, host-tier hits zero-copy from pinned memory (or, if
        the host tier could not be pinned, through ``inner.lookup`` and one copy). Counters are
        kept as by :meth:`lookup`; ``inner.lookup``'s per-row bookkeeping beyond the counters
        (first use of prefetched rows) is not replayed on the zero-copy path. Call
        ``on_access``/``admit`` as with :meth:`lookup`; :meth:`fill` puts fetched rows in place.
        """
        ids = np.asarray(ids, dtype=np.int64)
        xp, n = self.backend.xp, len(ids)
        sort = None if self._gpu_share < SORTED_READS_BELOW_GPU_HITS else False  # None: the kernels' default
        out, where = kernels.cache_gather(
            ids,
            self.gpu.slot_of,
            self.gpu.rows,
            self._host_rows,
            self._host_slot_of,
            sorted_reads=sort,
            backend=self.backend,
        )
        where = self.backend.to_host(where)
        n_gpu = int(np.count_nonzero(where == 0))
        self._gpu_share = n_gpu / n if n else self._gpu_share
        self.gpu.hits += n_gpu
        self.gpu.misses += n - n_gpu
        if self.host_pinned:
            n_host = int(np.count_nonzero(where == 1))
            self.inner.tier.hits += n_host
            self.inner.tier.misses += n - n_gpu - n_host
            return out, np.flatnonzero(where < 0)
        rest = np.flatnonzero(where < 0)
        host_hit, host_rows = self.inner.lookup(ids[rest])
        if len(host_rows):
            out[xp.asarray(rest[host_hit])] = xp.asarray(host_rows)
        return out, rest[~host_hit]

    def fill(self, out: Any, miss_pos: np.ndarray, rows: np.ndarray) -> None:
        """Copies fetched ``rows`` (host) into ``out[miss_pos]`` (device)."""
        if len(miss_pos):
            xp = self.backend.xp
            out[xp.asarray(miss_pos)] = xp.asarray(np.asarray(rows, dtype=self.gpu.dtype))


def with_gpu_tier(
    policy: CachePolicy,
    gpu_cache_bytes: int,
    *,
    max_ids_per_request: int = FETCH_IDS_PER_CALL,
    backend: Backend | None = None,
) -> CachePolicy:
    """``policy`` behind a GPU tier of ``gpu_cache_bytes``, or ``policy`` itself when the budget
    is 0, no GPU is usable (logged) or the budget holds no row.

    Args:
        policy: a policy from ``make_cache`` (its tier gives row shape, dtype, node count).
        gpu_cache_bytes: device-memory budget for rows.
        max_ids_per_request: ids per graph-store request at warm-up.
        backend: where the GPU tier lives; default the CUDA device when one is usable.
    """
    if gpu_cache_bytes <= 0:
        return policy
    if backend is None:
        if not gpu_available():
            log.warning(
                "gpu_cache_bytes=%d but no usable GPU (%s): host cache only", gpu_cache_bytes, unavailable_reason()
            )
            return policy
        backend = cuda_backend()
    t = policy.tier
    gpu = GpuTier(gpu_cache_bytes, t.row_shape, t.dtype, t.num_nodes, backend=backend)
    if not gpu.capacity_rows:
        return policy
    return GpuTieredCache(policy, gpu, max_ids_per_request=max_ids_per_request)
