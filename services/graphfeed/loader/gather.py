"""Gathering one minibatch: the input nodes' features (cache first, misses from their owners)
and the seeds' labels.

There is one gather (:class:`Gatherer`); where the features are assembled is a
:class:`FeatureBuffer`:

* :class:`HostBuffer` without a sink: a NumPy array.
* :class:`HostBuffer` with a :class:`ShmSink`: a new shared-memory segment the consumer maps;
  same-host graph-stores write the misses' rows straight into it, so each row is copied once,
  from its owner's table to where the trainer reads it. When the consumer holds its quota
  unclaimed, or the directory is nearly full, the sink refuses and the minibatch is assembled
  as without one (and sent inline).
* :class:`DeviceBuffer` (a loader embedded in a trainer on the GPU, the cache with a GPU tier):
  one kernel reads GPU-tier hits from device memory and host-tier hits zero-copy from pinned
  host memory; only the misses are fetched (to the host) and copied up.

Every step works on whole arrays (fancy indexing, or one kernel): nothing loops over rows in
Python, and no row is copied more often than the buffer requires.
"""

from __future__ import annotations

import logging
import time
from abc import ABC, abstractmethod
from collections.abc import Sequence
from concurrent.futures import Future
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Protocol, runtime_checkable

import numpy as np

from graphfeed.common.blocks import SampledBlocks
from graphfeed.common.buffers import BufferPool
from graphfeed.common.errors import FailedPrecondition
from graphfeed.common.shm import Arena, Segment, SegmentPool, SegmentRegistry, ShmQuota
from graphfeed.graph_store.fanout import fan_out
from graphfeed.graph_store.types import NodeDataTarget, PartitionSet
from graphfeed.loader.cache import DeviceCachePolicy, Rows, RowsAt
from graphfeed.loader.fetch import RowsRequest, fetch_rows
from graphfeed.loader.minibatch import MinibatchStats
from graphfeed.loader.pack_tier import PackTier
from graphfeed.loader.shared_cache import SharedCache

log = logging.getLogger(__name__)


@dataclass
class ShmSink:
    """Where a stream assembles minibatch features when its consumer shares memory: a segment
    per minibatch in ``directory``, which same-host graph-stores write their rows into directly
    (``direct``; switched off for good when one of them cannot see the directory)."""

    directory: Path
    registry: SegmentRegistry
    owner: object
    quota: ShmQuota  # what may refuse ``client`` a segment
    client: str  # the consumer, as the quota counts it
    pool: SegmentPool | None = None  # reused files (pages already allocated); None: a new file each
    direct: bool = True

    def segment(self, shape: Sequence[int], dtype: np.dtype) -> Segment | None:
        """A new segment holding one ``shape`` array at offset 0, or None when the consumer may
        not be sent more through shared memory now (over its quota, or no room)."""
        arena = Arena(self.directory, self.registry, self.owner, self.pool, self.client)
        arena.reserve(shape, dtype)  # at offset 0
        return self.quota.create(arena)


@runtime_checkable
class ScattersNodeData(Protocol):
    """A partition set whose graph-stores can write rows into the caller's shared memory
    (:class:`~graphfeed.graph_store.client.RemotePartitionSet`; the in-process one cannot)."""

    def scatter_node_data(self, p: int, name: str, ids: np.ndarray, target: NodeDataTarget) -> Future[int] | None:
        """Partition ``p`` writes the rows of ``ids`` into ``target``; the future gives the rows
        written. None when ``p`` shares no memory with the caller."""


class FeatureBuffer(ABC):
    """Where one minibatch's features are assembled. :class:`Gatherer` calls, in this order:
    :meth:`look_up`, :meth:`open`, (fetches the misses' rows into what ``open`` returned),
    :meth:`complete`, :meth:`close`; then :meth:`missed_rows` if the policy admits rows."""

    segment: Segment | None = None  # the shared memory holding the features at offset 0, if any
    refused: bool = False  # a sink refused this minibatch shared memory: it goes inline

    @abstractmethod
    def look_up(self, cache: SharedCache, stream: int, step: int, ids: np.ndarray) -> np.ndarray:
        """Looks ``ids`` up in ``cache`` for ``step`` of ``stream``; returns the misses' positions."""

    @abstractmethod
    def open(self) -> tuple[np.ndarray, np.ndarray]:
        """``(rows, at)``: the host array the misses' rows go into, the i-th miss at ``rows[at[i]]``."""

    @abstractmethod
    def complete(self) -> Any:
        """Puts the hits (and, where needed, the fetched rows) in place; returns the features."""

    @abstractmethod
    def missed_rows(self) -> Rows:
        """The misses' rows in miss order (for the policy to admit)."""

    def close(self) -> None:  # noqa: B027 - nothing to release by default
        """Releases what :meth:`open` took; the features stay valid."""


class HostBuffer(FeatureBuffer):
    """Features in host memory: an array (from ``pool`` when given: pages already mapped, back
    in the pool once the minibatch is sent and dropped), or with ``sink`` a new shared-memory
    segment."""

    def __init__(
        self,
        row_shape: Sequence[int],
        dtype: np.dtype | type,
        sink: ShmSink | None = None,
        pool: BufferPool | None = None,
    ) -> None:
        self._row_shape, self._dtype, self._sink, self._pool = tuple(row_shape), np.dtype(dtype), sink, pool
        empty: np.ndarray = np.empty(0)
        self._hit, self._miss_pos, self._hit_rows, self._features = empty, empty, empty, empty

    def look_up(self, cache: SharedCache, stream: int, step: int, ids: np.ndarray) -> np.ndarray:
        self._hit, self._hit_rows = cache.access(stream, step, ids)
        self._miss_pos = np.flatnonzero(~self._hit)
        return self._miss_pos

    def open(self) -> tuple[np.ndarray, np.ndarray]:
        shape = (len(self._hit), *self._row_shape)
        self.segment = self._sink.segment(shape, self._dtype) if self._sink is not None else None
        self.refused = self._sink is not None and self.segment is None
        if self.segment is not None:
            self._features = self.segment.array(0, shape, self._dtype)
        elif self._pool is not None:
            nbytes = self._dtype.itemsize * int(np.prod(shape, dtype=np.int64))
            self._features = self._pool.take(nbytes).view(self._dtype).reshape(shape)
        else:
            self._features = np.empty(shape, dtype=self._dtype)
        return self._features, self._miss_pos

    def complete(self) -> np.ndarray:
        self._features[self._hit] = self._hit_rows
        return self._features

    def missed_rows(self) -> Rows:
        return RowsAt(self._features, self._miss_pos)  # gathered by the policy, only those it keeps

    def close(self) -> None:
        if self.segment is not None:
            self.segment.close()  # the features view keeps the mapping alive


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

    def open(self) -> tuple[np.ndarray, np.ndarray]:
        self._missed = np.empty((len(self._miss_pos), *self._row_shape), dtype=self._dtype)
        return self._missed, np.arange(len(self._miss_pos))

    def complete(self) -> Any:
        self._policy.fill(self._features, self._miss_pos, self._missed)
        return self._features

    def missed_rows(self) -> Rows:
        return self._missed


@dataclass(frozen=True)
class Gathered:
    """One minibatch's features and labels, and where the features live."""

    features: Any  # np.ndarray, or a device array (DeviceBuffer)
    labels: np.ndarray
    stats: MinibatchStats
    segment: str | None  # the shared-memory segment holding the features at offset 0
    recycle: bool  # that segment is a pool's file
    refused: bool = False  # shared memory was refused for this minibatch: send it inline


@dataclass
class Gatherer:
    """Gathers the minibatches of one stream (see the module docstring).

    ``on_device``: assemble features in device memory where the cache has a device lookup.
    ``label_name`` "": no labels (an empty int64 array).
    """

    partitions: PartitionSet
    cache: SharedCache
    feature_name: str
    label_name: str
    max_ids_per_request: int
    sink: ShmSink | None = None
    on_device: bool = False
    pool: BufferPool | None = None  # where host feature arrays come from (None: new arrays)
    packs: PackTier | None = None  # the stream's packed-disk tier, between the cache and the graph-stores

    def warm_up(self) -> None:
        """Warms the cache up (once per cache, whichever stream comes first)."""
        self.cache.ensure_warm(self.partitions, self.feature_name)

    def gather(self, stream: int, step: int, sb: SampledBlocks, sample_s: float) -> Gathered:
        """Features of ``sb``'s input nodes and labels of its seeds for ``step`` of ``stream``.

        Raises:
            whatever the graph-stores raised (e.g. Unavailable).
        """
        t0 = time.perf_counter()
        ids = np.asarray(sb.input_nodes, dtype=np.int64)
        buf = self._buffer()
        miss_pos = buf.look_up(self.cache, stream, step, ids)
        labels_req = (
            RowsRequest(self.partitions, self.label_name, sb.output_nodes, self.max_ids_per_request)
            if self.label_name
            else None
        )
        try:  # the labels are in flight while the features are fetched
            rows, at = buf.open()
            packed, got = self._fetch_misses(step, ids[miss_pos], rows, at, buf.segment)
            features = buf.complete()
            labels, got_labels = labels_req.wait() if labels_req is not None else (np.empty((0,), dtype=np.int64), {})
        finally:
            if labels_req is not None:
                labels_req.cancel()
            buf.close()
        policy = self.cache.policy
        if policy.admits:
            with self.cache.lock:
                policy.admit(ids[miss_pos], buf.missed_rows())
        stats = _stats(len(ids), len(miss_pos), packed, got, got_labels, sample_s, t0)
        seg = buf.segment
        return Gathered(
            features, labels, stats, seg.name if seg is not None else None, seg is not None and seg.recycle, buf.refused
        )

    def _buffer(self) -> FeatureBuffer:
        spec = self.partitions.info.node_data[self.feature_name]
        device = self.cache.device_policy if self.on_device else None
        if device is not None:
            return DeviceBuffer(device, spec.row_shape, spec.dtype)
        return HostBuffer(spec.row_shape, spec.dtype, self.sink, self.pool)

    def _fetch_misses(
        self, step: int, miss_ids: np.ndarray, rows: np.ndarray, at: np.ndarray, segment: Segment | None
    ) -> tuple[int, dict[int, int]]:
        """Fills ``rows[at]`` with the rows of ``miss_ids``: from the step's pack where it has
        them, the rest from the owners (written by them into ``segment`` where they can);
        returns the rows read from the pack and the bytes received per partition."""
        packed = 0
        if self.packs is not None and len(miss_ids):
            found, pack_rows = self.packs.lookup(step, miss_ids)
            packed = len(pack_rows)
            if packed:
                rows[at[found]] = pack_rows
                miss_ids, at = miss_ids[~found], at[~found]
        return packed, self._fetch_remote(miss_ids, rows, at, segment)

    def _fetch_remote(
        self, miss_ids: np.ndarray, rows: np.ndarray, at: np.ndarray, segment: Segment | None
    ) -> dict[int, int]:
        """Fills ``rows[at]`` with the rows of ``miss_ids`` from their owners; bytes per partition."""
        parts, sink = self.partitions, self.sink
        if (
            segment is not None
            and sink is not None
            and sink.direct
            and len(miss_ids)
            and isinstance(parts, ScattersNodeData)
        ):
            got = self._scatter(parts, sink, miss_ids, rows, at, segment)
            if got is not None:
                return got
        return fetch_rows(parts, self.feature_name, miss_ids, self.max_ids_per_request, rows, at)[1]

    def _scatter(
        self,
        parts: ScattersNodeData,
        sink: ShmSink,
        miss_ids: np.ndarray,
        rows: np.ndarray,
        at: np.ndarray,
        segment: Segment,
    ) -> dict[int, int] | None:
        """Has the owners write ``rows[at]`` into ``segment``; bytes per partition, or None where
        an owner cannot (the caller fetches the rows then)."""
        row_bytes = rows.itemsize * int(np.prod(rows.shape[1:], dtype=np.int64))

        def call(p: int, chunk: np.ndarray, pos: np.ndarray) -> Future | None:
            return parts.scatter_node_data(
                p, self.feature_name, chunk, NodeDataTarget(segment.name, 0, len(rows), at[pos])
            )

        pending = fan_out(self.partitions, miss_ids, call, self.max_ids_per_request, with_positions=True)
        try:
            started = [(p, fut) for p, _, fut in pending.parts if fut is not None]
            if len(started) == len(pending.parts):
                got: dict[int, int] = {}
                for p, fut in started:
                    got[p] = got.get(p, 0) + int(fut.result()) * row_bytes
                return got
        except FailedPrecondition as exc:  # a graph-store does not see our directory
            log.warning("graph-stores cannot write into %s (%s); fetching rows instead", sink.directory, exc)
            sink.direct = False
        finally:
            pending.cancel()
        return None


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
