"""The streaming machinery of the loader: one producer thread and a bounded queue per stream.

The producer keeps ``lookahead_steps`` sampler calls in flight on a shared pool, announcing
each sampled step to the cache policy as soon as it is done (a look-ahead policy thus knows
the window's exact future accesses). It takes the results in step order, gathers input
features (cache, then the misses from their owner partitions, all partitions requested before
any is waited on) and labels, and puts ready minibatches in a queue of ``max_inflight``; the
consumer takes them in step order. A producer failure travels through the queue and is raised
in the consumer after the minibatches before it. Closing the stream (from any thread) stops
the producer and cancels what it queued.
"""

from __future__ import annotations

import functools
import logging
import threading
import time
from collections import deque
from collections.abc import Callable, Iterator
from concurrent.futures import Future, ThreadPoolExecutor
from dataclasses import dataclass, field
from pathlib import Path
from typing import TYPE_CHECKING, Any

import numpy as np

from graphfeed.common.blocks import SampledBlocks
from graphfeed.common.errors import FailedPrecondition
from graphfeed.common.shm import Arena, Segment, SegmentPool, SegmentRegistry
from graphfeed.graph_store.types import NodeDataTarget, PartitionSet
from graphfeed.loader.cache import CachePolicy
from graphfeed.loader.fetch import DEFAULT_MAX_IDS_PER_REQUEST, PendingRows, Prefetcher, fan_out, node_data_fetcher
from graphfeed.loader.plan import EpochPlan
from graphfeed.sampler.types import BlockSampler

if TYPE_CHECKING:
    from graphfeed.loader.job import JobSpec

log = logging.getLogger(__name__)


@dataclass(frozen=True)
class MinibatchStats:
    """Counters of one minibatch; remote bytes count feature and label rows received."""

    cache_hits: int
    cache_misses: int
    remote_feature_bytes: int
    sample_seconds: float
    gather_seconds: float
    remote_bytes_by_partition: dict[int, int] = field(default_factory=dict)


@dataclass(frozen=True)
class ReadyMinibatch:
    """One minibatch ready for training: blocks, input features and seed labels."""

    job_seed: int
    epoch: int
    step: int
    steps_per_epoch: int
    blocks: SampledBlocks
    features: Any  # [len(blocks.input_nodes), *row_shape]: np.ndarray, or a device array (stream ``on_device``)
    labels: np.ndarray  # [len(blocks.output_nodes), *label_shape]; empty without label_name
    stats: MinibatchStats
    features_segment: str | None = None  # the shared-memory segment holding ``features`` at offset 0
    features_recycle: bool = False  # that segment is a pool's file (handed back, not unlinked)


@dataclass
class ShmSink:
    """Where a stream assembles minibatch features when its consumer shares memory: a segment
    per minibatch in ``directory``, which same-host graph-stores write their rows into directly
    (``direct``; switched off for good when one of them cannot see the directory)."""

    directory: Path
    registry: SegmentRegistry
    owner: object
    pool: SegmentPool | None = None  # reused files (pages already allocated); None: a new file each
    direct: bool = True


class SharedCache:
    """A cache policy shared by the streams that read one feature, behind one lock (which its
    background prefetches take too), and the streams it may hear future accesses from."""

    def __init__(self, policy: CachePolicy, max_ids_per_request: int = DEFAULT_MAX_IDS_PER_REQUEST) -> None:
        self.policy = policy
        self.lock = threading.Lock()
        self.max_ids_per_request = max_ids_per_request
        self._warm = False
        self._next_stream = 0
        self._gathered: dict[int, int] = {}  # live stream -> last step gathered (-1: none)
        self._announced: set[tuple[int, int]] = set()  # (stream, step) announced, not gathered yet

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
        if fut.cancelled() or fut.exception() is not None:
            return
        ids = fut.result()[0].input_nodes
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

    def access_device(self, stream: int, step: int, ids: np.ndarray) -> tuple[Any, np.ndarray]:
        """Like :meth:`access` for a policy with ``lookup_device`` (the GPU tier): ``(rows of
        all ids on the device, positions of the misses)``; the misses' rows are to be filled."""
        with self.lock:
            out, miss_pos = self.policy.lookup_device(ids)
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
        with self.lock:
            self._gathered.pop(stream, None)
            self._announced = {k for k in self._announced if k[0] != stream}
            self.policy.forget(stream)

    def close(self) -> None:
        """Stops the policy's background prefetches."""
        with self.lock:
            self.policy.close()


class Channel:
    """The bounded queue between a producer and its consumer, closable from either side."""

    def __init__(self, capacity: int) -> None:
        self._cond = threading.Condition()
        self._items: deque[ReadyMinibatch] = deque()
        self._capacity = capacity
        self._closed = False
        self._done = False
        self._error: BaseException | None = None

    def __len__(self) -> int:
        return len(self._items)

    @property
    def closed(self) -> bool:
        return self._closed

    def put(self, item: ReadyMinibatch) -> bool:
        """Blocks while full; False when the consumer has closed the channel."""
        with self._cond:
            self._cond.wait_for(lambda: self._closed or len(self._items) < self._capacity)
            if self._closed:
                return False
            self._items.append(item)
            self._cond.notify_all()
            return True

    def wait_done(self, fut: Future) -> bool:
        """Waits for ``fut``; False if the channel was closed first."""
        fut.add_done_callback(lambda _f: self.wake())
        with self._cond:
            self._cond.wait_for(lambda: self._closed or fut.done())
            return not self._closed

    def wake(self) -> None:
        with self._cond:
            self._cond.notify_all()

    def finish(self, error: BaseException | None = None) -> None:
        """No more items; ``error`` (if any) is raised to the consumer after the queued ones."""
        with self._cond:
            self._done, self._error = True, error
            self._cond.notify_all()

    def get(self) -> ReadyMinibatch:
        """The next item; StopIteration at the end, the producer's error if it failed."""
        with self._cond:
            self._cond.wait_for(lambda: self._closed or self._items or self._done)
            if self._items and not self._closed:
                item = self._items.popleft()
                self._cond.notify_all()
                return item
            error, self._error = self._error, None
        if error is not None:
            raise error
        raise StopIteration

    def close(self) -> None:
        with self._cond:
            self._closed = True
            self._items.clear()
            self._cond.notify_all()


@dataclass
class StreamWork:
    """Everything one producer needs (deliberately not the stream handle, so that an abandoned
    stream can be garbage-collected and closed)."""

    partitions: PartitionSet
    sampler: BlockSampler
    pool: ThreadPoolExecutor
    cache: SharedCache
    job: JobSpec
    plan: EpochPlan
    start_step: int
    lookahead_steps: int
    max_ids_per_request: int
    channel: Channel
    sink: ShmSink | None = None
    on_device: bool = False  # features as device arrays, where the policy has a GPU tier


def _sample(w: StreamWork, step: int) -> tuple[SampledBlocks, float]:
    t0 = time.perf_counter()
    j = w.job
    sb = w.sampler.sample(w.plan.seeds(step), list(j.fanouts), j.replace, j.job_seed, w.plan.epoch, step)
    return sb, time.perf_counter() - t0


def _gather(w: StreamWork, stream: int, step: int, sb: SampledBlocks, sample_s: float) -> ReadyMinibatch:
    """Features of the input nodes (cache first, misses from their owners) and seed labels.

    With a shared-memory sink the features are assembled in a new segment and the owners write
    their rows straight into it: each row is copied once, from its owner's table to where the
    trainer maps it."""
    t0 = time.perf_counter()
    j, parts, policy = w.job, w.partitions, w.cache.policy
    if w.on_device and hasattr(policy, "lookup_device"):
        return _gather_on_device(w, stream, step, sb, sample_s, t0)
    ids = np.asarray(sb.input_nodes, dtype=np.int64)
    spec = parts.info.node_data[j.feature_name]
    shape, dtype = (len(ids), *spec.row_shape), np.dtype(spec.dtype)
    hit, hit_rows = w.cache.access(stream, step, ids)
    miss_pos = np.flatnonzero(~hit)
    pending_labels = _request_labels(w, sb)  # in flight while the features are fetched
    segment = None
    if w.sink is not None:
        arena = Arena(w.sink.directory, w.sink.registry, w.sink.owner, w.sink.pool)
        arena.reserve(shape, dtype)  # at offset 0
        segment = arena.finish()
        features = segment.array(0, shape, dtype)
    else:
        features = np.empty(shape, dtype=dtype)
    try:
        got = _fetch_misses(w, ids[miss_pos], miss_pos, features, segment)
        features[hit] = hit_rows
        labels, got_labels = _labels(w, pending_labels)
    finally:
        if pending_labels is not None:
            pending_labels.cancel()
        if segment is not None:
            segment.close()  # the features view keeps the mapping alive
    if policy.admits:
        with w.cache.lock:
            policy.admit(ids[miss_pos], features[miss_pos])
    stats = _stats(len(ids), len(miss_pos), got, got_labels, sample_s, t0)
    name = segment.name if segment is not None else None
    recycle = segment is not None and segment.recycle
    return ReadyMinibatch(j.job_seed, w.plan.epoch, step, w.plan.num_steps, sb, features, labels, stats, name, recycle)


def _gather_on_device(w: StreamWork, stream: int, step: int, sb: SampledBlocks, sample_s: float, t0: float) -> ReadyMinibatch:
    """:func:`_gather` into device memory (a loader embedded in a trainer on the GPU): one
    kernel reads GPU-tier hits from device memory and host-tier hits zero-copy from pinned
    host memory; only the misses are fetched (to the host) and copied up."""
    j, policy = w.job, w.cache.policy
    ids = np.asarray(sb.input_nodes, dtype=np.int64)
    spec = w.partitions.info.node_data[j.feature_name]
    features, miss_pos = w.cache.access_device(stream, step, ids)
    missed = np.empty((len(miss_pos), *spec.row_shape), dtype=spec.dtype)
    pending_labels = _request_labels(w, sb)  # in flight while the features are fetched
    try:
        got = _fetch_misses(w, ids[miss_pos], np.arange(len(miss_pos)), missed, None)
        labels, got_labels = _labels(w, pending_labels)
    finally:
        if pending_labels is not None:
            pending_labels.cancel()
    policy.fill(features, miss_pos, missed)
    if policy.admits:
        with w.cache.lock:
            policy.admit(ids[miss_pos], missed)
    stats = _stats(len(ids), len(miss_pos), got, got_labels, sample_s, t0)
    return ReadyMinibatch(j.job_seed, w.plan.epoch, step, w.plan.num_steps, sb, features, labels, stats)


def _request_labels(w: StreamWork, sb: SampledBlocks) -> PendingRows | None:
    """Starts fetching the seeds' labels from their owners (None without a label name)."""
    j, parts = w.job, w.partitions
    if not j.label_name:
        return None
    return fan_out(parts, sb.output_nodes, lambda p, c: parts.get_node_data(p, j.label_name, c), w.max_ids_per_request)


def _labels(w: StreamWork, pending: PendingRows | None) -> tuple[np.ndarray, dict[int, int]]:
    """The labels :func:`_request_labels` asked for and the bytes received per partition."""
    if pending is None:
        return np.empty((0,), dtype=np.int64), {}
    lspec = w.partitions.info.node_data[w.job.label_name]
    return pending.wait(lspec.row_shape, lspec.dtype)


def _stats(n: int, misses: int, got: dict[int, int], got_labels: dict[int, int], sample_s: float, t0: float) -> MinibatchStats:
    by_part = {p: got.get(p, 0) + got_labels.get(p, 0) for p in sorted(set(got) | set(got_labels))}
    return MinibatchStats(
        cache_hits=n - misses,
        cache_misses=misses,
        remote_feature_bytes=sum(by_part.values()),
        sample_seconds=sample_s,
        gather_seconds=time.perf_counter() - t0,
        remote_bytes_by_partition=by_part,
    )


def _fetch_misses(
    w: StreamWork, miss_ids: np.ndarray, miss_pos: np.ndarray, features: np.ndarray, segment: Segment | None
) -> dict[int, int]:
    """Fills ``features[miss_pos]`` from the owners; returns the bytes received per partition."""
    j, parts = w.job, w.partitions
    row_bytes = features.itemsize * int(np.prod(features.shape[1:], dtype=np.int64))
    scatter = getattr(parts, "scatter_node_data", None)
    if segment is not None and w.sink.direct and scatter is not None and len(miss_ids):

        def call(p: int, chunk: np.ndarray, pos: np.ndarray) -> Future | None:
            return scatter(p, j.feature_name, chunk, NodeDataTarget(segment.name, 0, len(features), miss_pos[pos]))

        pending = fan_out(parts, miss_ids, call, w.max_ids_per_request, with_positions=True)
        try:
            if all(fut is not None for _, _, fut in pending.parts):
                got: dict[int, int] = {}
                for p, _pos, fut in pending.parts:
                    got[p] = got.get(p, 0) + int(fut.result()) * row_bytes
                return got
        except FailedPrecondition as exc:  # a graph-store does not see our directory
            log.warning("graph-stores cannot write into %s (%s); fetching rows instead", w.sink.directory, exc)
            w.sink.direct = False
        finally:
            pending.cancel()
    feats = fan_out(parts, miss_ids, lambda p, c: parts.get_node_data(p, j.feature_name, c), w.max_ids_per_request)
    try:
        rows, got = feats.wait(features.shape[1:], features.dtype)
    finally:
        feats.cancel()
    features[miss_pos] = rows
    return got


def _produce(w: StreamWork) -> None:
    """The producer thread: sampling window, then gather in step order, then the queue."""
    pending: deque[tuple[int, Future]] = deque()
    next_step = w.start_step
    stream = w.cache.open_stream()
    try:
        if w.start_step < w.plan.num_steps:
            w.cache.ensure_warm(w.partitions, w.job.feature_name)
        while not w.channel.closed:
            while next_step < w.plan.num_steps and len(pending) < w.lookahead_steps:
                fut = w.pool.submit(_sample, w, next_step)
                fut.add_done_callback(functools.partial(w.cache.announce, stream, next_step))
                pending.append((next_step, fut))
                next_step += 1
            if not pending:
                break
            step, fut = pending.popleft()
            if not w.channel.wait_done(fut):
                fut.cancel()
                break
            w.cache.announce(stream, step, fut)  # before the gather, even if the callback has not run yet
            if not w.channel.put(_gather(w, stream, step, *fut.result())):
                break
        w.channel.finish()
    except BaseException as exc:  # noqa: BLE001 - handed to the consumer, which raises it
        w.channel.finish(exc)
    finally:
        for _, fut in pending:
            fut.cancel()
        w.cache.close_stream(stream)
        if w.sink is not None and w.channel.closed:
            # Consumer gone mid-stream: segments made after its own cleanup ran go now
            # (pooled files back to the pool), not after the TTL.
            w.sink.registry.drop(w.sink.owner)
        log.debug("producer job=%s rank=%d epoch=%d exits", w.job.job_id, w.job.rank, w.plan.epoch)


class MinibatchStream(Iterator[ReadyMinibatch]):
    """Ready minibatches of one epoch in step order; close it to stop early (also a context manager)."""

    def __init__(self, work: StreamWork, on_minibatch: Callable[[ReadyMinibatch], None] | None) -> None:
        self.start_step = work.start_step
        self.steps_per_epoch = work.plan.num_steps
        self._channel = work.channel
        self._on_minibatch = on_minibatch
        name = f"loader-producer-{work.job.job_id or 'job'}-r{work.job.rank}-e{work.plan.epoch}"
        self._thread = threading.Thread(target=_produce, args=(work,), name=name, daemon=True)
        self._thread.start()

    def __iter__(self) -> "MinibatchStream":
        return self

    def __next__(self) -> ReadyMinibatch:
        mb = self._channel.get()
        if self._on_minibatch is not None:
            self._on_minibatch(mb)
        return mb

    @property
    def queued(self) -> int:
        """Ready minibatches waiting for the consumer."""
        return len(self._channel)

    @property
    def producer_alive(self) -> bool:
        return self._thread.is_alive()

    @property
    def closed(self) -> bool:
        """True once closed (the servicer closes every stream when its call ends)."""
        return self._channel.closed

    def close(self) -> None:
        """Stops the producer (it exits after its current step) and drops queued minibatches.
        Thread-safe: the gRPC layer may call it from another thread when a stream is cancelled."""
        self._channel.close()

    def __enter__(self) -> "MinibatchStream":
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()

    def __del__(self) -> None:
        self._channel.close()
