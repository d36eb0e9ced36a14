"""One cache policy shared by every stream that reads the same feature, behind one lock."""

from __future__ import annotations

import threading
from collections.abc import Callable
from concurrent.futures import Future
from typing import Any

import numpy as np

from graphfeed.common.limits import FETCH_IDS_PER_CALL
from graphfeed.graph_store.types import PartitionSet
from graphfeed.loader.cache.base import CachePolicy, DeviceCachePolicy
from graphfeed.loader.cache.prefetch import Prefetcher, node_data_fetcher


class SharedCache:
    """A cache policy shared by the streams that read one feature, behind one lock (which its
    background prefetches take too), and the streams it may hear future accesses from."""

    def __init__(
        self,
        policy: CachePolicy,
        max_ids_per_request: int = FETCH_IDS_PER_CALL,
        select: Callable[[np.ndarray], np.ndarray] | None = None,
    ) -> None:
        self.policy = policy
        self.select = select  # the announced ids this cache's table has rows for (None: all)
        self.lock = threading.Lock()
        self.max_ids_per_request = max_ids_per_request
        self._warm = False
        self._next_stream = 0
        self._gathered: dict[int, int] = {}  # live stream -> last step gathered (-1: none)
        self._announced: set[tuple[int, int]] = set()  # (stream, step) announced, not gathered yet

    @property
    def device_policy(self) -> DeviceCachePolicy | None:
        """The policy, where it can gather rows into device memory (a GPU tier); else None."""
        return self.policy.device()

    def ensure_warm(self, partitions: PartitionSet, feature_name: str) -> None:
        """Gives the policy its prefetcher and warms it up, once."""
        with self.lock:
            if not self._warm:
                fetch = node_data_fetcher(partitions, feature_name, self.max_ids_per_request)
                self.policy.attach(Prefetcher(fetch, self.lock))
                self.policy.warm_up(partitions, feature_name)
                self._warm = True

    def open_stream(self) -> int:
        """A new stream id; its announcements count until :meth:`close_stream`."""
        with self.lock:
            self._next_stream += 1
            self._gathered[self._next_stream] = -1
            return self._next_stream

    def announce(self, stream: int, step: int, fut: Future) -> None:
        """Tells the policy which ids ``step`` will look up, once: the sampling future's
        done-callback calls it, and the producer again just before gathering (a callback may
        run after the waiter wakes). Late calls for a gathered step or a closed stream are ignored."""
        if fut.cancelled() or fut.exception() is not None or not self.policy.hears_ahead:
            return
        ids = fut.result()[0].input_nodes
        if self.select is not None:
            ids = self.select(ids)
        with self.lock:
            if step > self._gathered.get(stream, step) and (stream, step) not in self._announced:
                self._announced.add((stream, step))
                self.policy.on_sampled((stream, step), ids)

    def access(self, stream: int, step: int, ids: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
        """Looks ``ids`` up for ``step`` of ``stream``: ``(hit_mask, rows of ids[hit_mask])``."""
        with self.lock:
            hit, rows = self.policy.lookup(ids)
            self._accessed(stream, step, ids, hit)
            return hit, rows

    def access_into(self, stream: int, step: int, ids: np.ndarray, out: np.ndarray) -> np.ndarray:
        """Like :meth:`access`, writing the hits' rows to ``out[hit_mask]``; returns the mask."""
        with self.lock:
            hit = self.policy.lookup_into(ids, out)
            self._accessed(stream, step, ids, hit)
            return hit

    def access_device(self, stream: int, step: int, ids: np.ndarray) -> tuple[Any, np.ndarray]:
        """Like :meth:`access` into device memory: ``(rows of all ids on the device, positions of
        the misses)``; the misses' rows are to be filled (:meth:`DeviceCachePolicy.fill`).

        Raises:
            TypeError: the policy has no device lookup (see :attr:`device_policy`).
        """
        policy = self.device_policy
        if policy is None:
            raise TypeError(f"cache policy {self.policy.name!r} has no device lookup")
        with self.lock:
            out, miss_pos = policy.lookup_device(ids)
            hit = np.ones(len(ids), dtype=bool)
            hit[miss_pos] = False
            self._accessed(stream, step, ids, hit)
            return out, miss_pos

    def _accessed(self, stream: int, step: int, ids: np.ndarray, hit: np.ndarray) -> None:
        """Bookkeeping of a lookup, under the lock: the policy hears of it, the step counts as gathered."""
        self.policy.on_access(ids, hit, (stream, step))
        self._gathered[stream] = step
        self._announced.discard((stream, step))

    def close_stream(self, stream: int) -> None:
        """``stream`` ended: its announced steps will not be gathered; the policy forgets them."""
        with self.lock:
            self._gathered.pop(stream, None)
            self._announced = {k for k in self._announced if k[0] != stream}
            self.policy.forget(stream)

    def close(self) -> None:
        """Stops the policy's background prefetches."""
        with self.lock:
            self.policy.close()


class CacheGroup:
    """The caches one stream reads, by node-data key: one per node type that has the job's
    feature (a one-type graph: one). The stream opens, announces to and closes them together."""

    def __init__(self, caches: dict[str, SharedCache]) -> None:
        self.caches = caches
        self._lock = threading.Lock()
        self._next = 0
        self._members: dict[int, dict[str, int]] = {}  # group stream -> each cache's stream id

    def open_stream(self) -> int:
        with self._lock:
            self._next += 1
            self._members[self._next] = {k: c.open_stream() for k, c in self.caches.items()}
            return self._next

    def stream_of(self, stream: int, key: str) -> int:
        """The stream id of group stream ``stream`` in the cache of ``key``."""
        return self._members[stream][key]

    def announce(self, stream: int, step: int, fut: Future) -> None:
        members = self._members.get(stream, {})
        for key, member in members.items():
            self.caches[key].announce(member, step, fut)

    def close_stream(self, stream: int) -> None:
        with self._lock:
            members = self._members.pop(stream, {})
        for key, member in members.items():
            self.caches[key].close_stream(member)
