"""Gathering one minibatch: the input nodes' features (cache first, misses from their owners)
and the seeds' labels.

There is one gather (:class:`Gatherer`); where the features are assembled is a
:class:`FeatureBuffer`:

* :class:`HostBuffer`: an array from the stream's :class:`~graphfeed.common.placement.Placement`.
  When that array lies in shared memory the consumer maps, same-host graph-stores write the
  misses' rows straight into it, so each row is copied once, from its owner's table to where the
  trainer reads it (the partition set decides, per graph-store, from ``Placed.region``).
* :class:`DeviceBuffer` (a loader embedded in a trainer on the GPU, the cache with a GPU tier):
  one kernel reads GPU-tier hits from device memory and host-tier hits zero-copy from pinned
  host memory; only the misses are fetched (to the host) and copied up.

Every step works on whole arrays (fancy indexing, or one kernel): nothing loops over rows in
Python, and no row is copied more often than the buffer requires.
"""

from __future__ import annotations

import time
from abc import ABC, abstractmethod
from collections.abc import Sequence
from dataclasses import dataclass, field
from typing import Any

import numpy as np

from graphfeed.common.blocks import SampledBlocks
from graphfeed.common.placement import Placed, Placement
from graphfeed.graph_store.fanout import RowsRequest, fetch_rows
from graphfeed.graph_store.types import PartitionSet, RowsInto
from graphfeed.loader.cache.base import DeviceCachePolicy, Rows, RowsAt
from graphfeed.loader.cache.shared import CacheGroup, SharedCache
from graphfeed.loader.minibatch import MinibatchStats
from graphfeed.loader.packs.tier import PackTier


class FeatureBuffer(ABC):
    """Where one minibatch's features are assembled. :class:`Gatherer` calls, in this order:
    :meth:`look_up`, :meth:`open`, (fetches the misses' rows into what ``open`` returned),
    :meth:`complete`, :meth:`close` (after whatever of these ran, even if one raised); then
    :meth:`missed_rows` if the policy admits rows."""

    placed: Placed | None = None  # where the features are, when a placement holds them

    @abstractmethod
    def look_up(self, cache: SharedCache, stream: int, step: int, ids: np.ndarray) -> np.ndarray:
        """Looks ``ids`` up in ``cache`` for ``step`` of ``stream``; returns the misses' positions."""

    @abstractmethod
    def open(self) -> RowsInto:
        """Where the misses' rows go, the i-th miss's at ``out[positions[i]]``."""

    @abstractmethod
    def complete(self) -> Any:
        """Puts the hits (and, where needed, the fetched rows) in place; returns the features."""

    @abstractmethod
    def missed_rows(self) -> Rows:
        """The misses' rows in miss order (for the policy to admit)."""

    def close(self) -> None:  # noqa: B027 - nothing to release by default
        """Releases what :meth:`open` took; the features stay valid."""


class HostBuffer(FeatureBuffer):
    """Features in host memory, in the array ``placement`` gives: placed at the look-up, so the
    cache copies its hits straight to their places."""

    def __init__(self, row_shape: Sequence[int], dtype: np.dtype | type, placement: Placement) -> None:
        self._row_shape, self._dtype, self._placement = tuple(row_shape), np.dtype(dtype), placement
        empty: np.ndarray = np.empty(0)
        self._miss_pos, self._features = empty, empty
        self._into = RowsInto(empty, empty)

    def look_up(self, cache: SharedCache, stream: int, step: int, ids: np.ndarray) -> np.ndarray:
        self.placed = self._placement.place((len(ids), *self._row_shape), self._dtype)
        self._features = self.placed.array
        self._miss_pos = np.flatnonzero(~cache.access_into(stream, step, ids, self._features))
        self._into = RowsInto(self._features, self._miss_pos, self.placed.region)
        return self._miss_pos

    def open(self) -> RowsInto:
        return self._into

    def complete(self) -> np.ndarray:
        return self._features

    def missed_rows(self) -> Rows:
        return RowsAt(self._features, self._miss_pos)  # gathered by the policy, only those it keeps

    def close(self) -> None:
        if self.placed is not None:
            self.placed.close()


class DeviceBuffer(FeatureBuffer):
    """Features in device memory, looked up by ``policy``; the misses pass through the host."""

    def __init__(self, policy: DeviceCachePolicy, row_shape: Sequence[int], dtype: np.dtype | type) -> None:
        self._policy, self._row_shape, self._dtype = policy, tuple(row_shape), dtype
        empty: np.ndarray = np.empty(0)
        self._miss_pos, self._missed = empty, empty
        self._features: Any = None

    def look_up(self, cache: SharedCache, stream: int, step: int, ids: np.ndarray) -> np.ndarray:
        self._features, self._miss_pos = cache.access_device(stream, step, ids)
        return self._miss_pos

    def open(self) -> RowsInto:
        self._missed = np.empty((len(self._miss_pos), *self._row_shape), dtype=self._dtype)
        return RowsInto(self._missed, np.arange(len(self._miss_pos)))

    def complete(self) -> Any:
        self._policy.fill(self._features, self._miss_pos, self._missed)
        return self._features

    def missed_rows(self) -> Rows:
        return self._missed


@dataclass(frozen=True, kw_only=True)
class Gathered:
    """One minibatch's features and labels, and where the features were placed.

    In a graph of several node types, ``typed_features`` / ``typed_labels`` hold them per node
    type (the rows of that type's input / output nodes, in node-list order) and ``features`` /
    ``labels`` are empty.
    """

    features: Any  # np.ndarray, or a device array (DeviceBuffer)
    labels: np.ndarray
    stats: MinibatchStats
    placed: Placed | None  # None for device features
    typed_features: dict[str, np.ndarray] = field(default_factory=dict)
    typed_labels: dict[str, np.ndarray] = field(default_factory=dict)
    typed_placed: dict[str, Placed] = field(default_factory=dict)  # where each type's features were placed


@dataclass(frozen=True)
class _Table:
    """One table's gather: its rows, where they were placed, and its counters."""

    rows: Any
    placed: Placed | None
    misses: int
    packed: int
    got: dict[int, int]


@dataclass(kw_only=True)
class Gatherer:
    """Gathers the minibatches of one stream (see the module docstring).

    A graph of several node types gathers each node type's rows of the feature from that
    table's own cache (:attr:`caches`, keyed by node-data key), the same way a one-type graph
    gathers its one table.

    Attributes:
        caches: the caches of the feature's tables (one in a one-type graph).
        placement: where host features are assembled (ordinary memory, or shared memory the
            consumer maps).
        on_device: assemble features in device memory where the cache has a device lookup.
        label_name: "" for no labels (an empty int64 array).
        packs: the stream's packed-disk tiers by node-data key, between the cache and the graph-stores.
    """

    partitions: PartitionSet
    caches: CacheGroup
    feature_name: str
    label_name: str
    max_ids_per_request: int
    placement: Placement
    on_device: bool = False
    packs: dict[str, PackTier] = field(default_factory=dict)  # by node-data key: the stream's packed tables

    def warm_up(self) -> None:
        """Warms the caches up (once per cache, whichever stream comes first)."""
        for key, cache in self.caches.caches.items():
            cache.ensure_warm(self.partitions, key)

    def gather(self, stream: int, step: int, sb: SampledBlocks, sample_s: float) -> Gathered:
        """Features of ``sb``'s input nodes and labels of its seeds for ``step`` of ``stream``.

        Raises:
            whatever the graph-stores raised (e.g. Unavailable).
        """
        t0 = time.perf_counter()
        schema = self.partitions.info.types
        if schema.is_hetero:
            return self._gather_typed(stream, step, sb, sample_s, t0)
        ids = np.asarray(sb.input_nodes, dtype=np.int64)
        labels_req = (
            RowsRequest(self.partitions, self.label_name, sb.output_nodes, self.max_ids_per_request)
            if self.label_name
            else None
        )
        try:  # the labels are in flight while the features are fetched
            t = (
                self._gather_table(stream, step, self.feature_name, ids, self.placement, self.on_device)
                if self.caches.caches
                else _Table(np.empty((0,), np.float32), None, 0, 0, {})  # a job without features (skip_features)
            )
            labels, got_labels = labels_req.wait() if labels_req is not None else (np.empty((0,), np.int64), {})
        finally:
            if labels_req is not None:
                labels_req.cancel()
        stats = _stats(len(ids), t.misses, t.packed, t.got, got_labels, sample_s, t0)
        return Gathered(features=t.rows, labels=labels, stats=stats, placed=t.placed)

    def _gather_typed(self, stream: int, step: int, sb: SampledBlocks, sample_s: float, t0: float) -> Gathered:
        """Per node type: the feature rows of its input nodes, the labels of its output nodes."""
        schema, known = self.partitions.info.types, self.partitions.info.node_data
        ids = np.asarray(sb.input_nodes, dtype=np.int64)
        seeds = np.asarray(sb.output_nodes, dtype=np.int64)
        label_reqs: dict[str, RowsRequest] = {}
        if self.label_name:
            for ntype, pos in schema.group_by_ntype(seeds).items():
                key = schema.data_key(ntype, self.label_name)
                if key in known:
                    label_reqs[ntype] = RowsRequest(self.partitions, key, seeds[pos], self.max_ids_per_request)
        features: dict[str, np.ndarray] = {}
        placed: dict[str, Placed] = {}
        labels: dict[str, np.ndarray] = {}
        got: dict[int, int] = {}
        got_labels: dict[int, int] = {}
        misses = packed = rows = 0
        try:
            for ntype, pos in schema.group_by_ntype(ids).items():
                key = schema.data_key(ntype, self.feature_name)
                if key not in self.caches.caches:
                    continue  # a featureless type
                t = self._gather_table(stream, step, key, ids[pos], self.placement, False)
                features[ntype] = t.rows
                if t.placed is not None:
                    placed[ntype] = t.placed
                misses, packed, rows = misses + t.misses, packed + t.packed, rows + len(pos)
                _add(got, t.got)
            for ntype, req in label_reqs.items():
                labels[ntype], by_part = req.wait()
                _add(got_labels, by_part)
        finally:
            for req in label_reqs.values():
                req.cancel()
        stats = _stats(rows, misses, packed, got, got_labels, sample_s, t0)
        empty = np.empty((0,), np.float32)
        return Gathered(
            features=empty,
            labels=np.empty((0,), np.int64),
            stats=stats,
            placed=None,
            typed_features=features,
            typed_labels=labels,
            typed_placed=placed,
        )

    def _gather_table(
        self, stream: int, step: int, key: str, ids: np.ndarray, placement: Placement, on_device: bool
    ) -> _Table:
        """The rows of node-data ``key`` for ``ids``: cache hits, then the misses from the step's
        pack and their owners; admitted to the cache where its policy admits rows."""
        cache = self.caches.caches[key]
        buf = self._buffer(key, cache, placement, on_device)
        try:
            miss_pos = buf.look_up(cache, self.caches.stream_of(stream, key), step, ids)
            into = buf.open()
            packed, got = self._fetch_misses(step, key, ids[miss_pos], into)
            rows = buf.complete()
        finally:
            buf.close()
        policy = cache.policy
        if policy.admits:
            with cache.lock:
                policy.admit(ids[miss_pos], buf.missed_rows())
        return _Table(rows, buf.placed, len(miss_pos), packed, got)

    def _buffer(self, key: str, cache: SharedCache, placement: Placement, on_device: bool) -> FeatureBuffer:
        spec = self.partitions.info.node_data[key]
        device = cache.device_policy if on_device else None
        if device is not None:
            return DeviceBuffer(device, spec.row_shape, spec.dtype)
        return HostBuffer(spec.row_shape, spec.dtype, placement)

    def _fetch_misses(self, step: int, key: str, miss_ids: np.ndarray, into: RowsInto) -> tuple[int, dict[int, int]]:
        """Puts the rows of ``miss_ids`` where ``into`` says: from the step's pack where it has
        them, the rest from their owners; returns the rows read from the pack and the bytes
        received per partition."""
        packed = 0
        packs = self.packs.get(key)
        if packs is not None and len(miss_ids):
            found = packs.place(step, miss_ids, into)
            packed = int(np.count_nonzero(found))
            if packed:
                miss_ids, into = miss_ids[~found], into.at(~found)
        if not len(miss_ids):
            return packed, {}
        return packed, fetch_rows(self.partitions, key, miss_ids, self.max_ids_per_request, into)[1]


def _add(total: dict[int, int], more: dict[int, int]) -> None:
    for p, n in more.items():
        total[p] = total.get(p, 0) + n


def _stats(
    n: int, misses: int, packed: int, got: dict[int, int], got_labels: dict[int, int], sample_s: float, t0: float
) -> MinibatchStats:
    by_part = {p: got.get(p, 0) + got_labels.get(p, 0) for p in sorted(set(got) | set(got_labels))}
    return MinibatchStats(
        cache_hits=n - misses,
        cache_misses=misses,
        remote_feature_bytes=sum(by_part.values()),
        sample_seconds=sample_s,
        gather_seconds=time.perf_counter() - t0,
        remote_bytes_by_partition=by_part,
        pack_rows=packed,
    )
