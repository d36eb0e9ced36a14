"""The streaming machinery of the loader: one producer thread and a bounded queue per stream.

The producer keeps ``lookahead_steps`` sampler calls in flight on a shared pool, announcing
each sampled step to the cache policy as soon as it is done (a look-ahead policy thus knows
the window's exact future accesses). It takes the results in step order, gathers input
features and labels (:mod:`graphfeed.loader.gather`), converts the features to the job's wire
dtype (:mod:`graphfeed.loader.wire`), and puts ready minibatches in a queue of
``max_inflight``; the consumer takes them in step order. A producer failure travels through
the queue and is raised in the consumer after the minibatches before it. Closing the stream
(from any thread) stops the producer and cancels what it queued.
"""

from __future__ import annotations

import functools
import logging
import threading
import time
from collections import deque
from collections.abc import Callable, Iterator
from concurrent.futures import Future, ThreadPoolExecutor
from dataclasses import dataclass
from typing import TYPE_CHECKING

from graphfeed.common.blocks import SampledBlocks
from graphfeed.loader.edges import EdgePairs, EdgeSeeds, sample_step
from graphfeed.loader.gather import Gatherer
from graphfeed.loader.minibatch import ReadyMinibatch
from graphfeed.loader.plan import EpochPlan
from graphfeed.loader.wire import to_wire
from graphfeed.sampler.types import BlockSampler

if TYPE_CHECKING:
    from graphfeed.loader.job import JobSpec

log = logging.getLogger(__name__)


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
        """True once the consumer closed the channel."""
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
        """Wakes the waiters (to re-check their condition)."""
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
        """Drops the queued items; the producer stops at its next put or wait."""
        with self._cond:
            self._closed = True
            self._items.clear()
            self._cond.notify_all()


@dataclass(kw_only=True)
class StreamWork:
    """Everything one producer needs (deliberately not the stream handle, so that an abandoned
    stream can be garbage-collected and closed)."""

    sampler: BlockSampler
    pool: ThreadPoolExecutor
    gatherer: Gatherer
    job: JobSpec
    fanouts: list[int | list[int]]  # per layer: one for all edge types, or one per edge type
    plan: EpochPlan
    edges: EdgeSeeds | None  # an edge job's seeds (link prediction), else None
    start_step: int
    lookahead_steps: int
    channel: Channel


def _sample(w: StreamWork, step: int) -> tuple[SampledBlocks, float, EdgePairs | None]:
    t0 = time.perf_counter()
    sb, pairs = sample_step(w.sampler, w.job, w.fanouts, w.plan, w.edges, step)
    return sb, time.perf_counter() - t0, pairs


def _ready(
    w: StreamWork, stream: int, step: int, sb: SampledBlocks, sample_s: float, pairs: EdgePairs | None
) -> ReadyMinibatch:
    g = w.gatherer.gather(stream, step, sb, sample_s)
    # Converted here, in the producer: overlaps with the consumer sending the previous minibatch.
    features = to_wire(g.features, w.job.feature_wire_dtype)
    typed = {t: to_wire(f, w.job.feature_wire_dtype) for t, f in g.typed_features.items()}
    return ReadyMinibatch(
        job_seed=w.job.job_seed,
        epoch=w.plan.epoch,
        step=step,
        steps_per_epoch=w.plan.num_steps,
        blocks=sb,
        features=features,
        labels=g.labels,
        stats=g.stats,
        placed=g.placed if features is g.features else None,  # a converted copy lies in no placement
        typed_features=typed,
        typed_labels=g.typed_labels,
        typed_placed={t: p for t, p in g.typed_placed.items() if typed[t] is g.typed_features[t]},
        pairs=pairs,
    )


def _produce(w: StreamWork) -> None:
    """The producer thread: sampling window, then gather in step order, then the queue."""
    pending: deque[tuple[int, Future]] = deque()
    next_step = w.start_step
    cache = w.gatherer.caches
    stream = cache.open_stream()
    try:
        if w.start_step < w.plan.num_steps:
            w.gatherer.warm_up()
        while not w.channel.closed:
            while next_step < w.plan.num_steps and len(pending) < w.lookahead_steps:
                fut = w.pool.submit(_sample, w, next_step)
                fut.add_done_callback(functools.partial(cache.announce, stream, next_step))
                pending.append((next_step, fut))
                next_step += 1
            if not pending:
                break
            step, fut = pending.popleft()
            if not w.channel.wait_done(fut):
                fut.cancel()
                break
            cache.announce(stream, step, fut)  # before the gather, even if the callback has not run yet
            if not w.channel.put(_ready(w, stream, step, *fut.result())):
                break
        w.channel.finish()
    except BaseException as exc:  # noqa: BLE001 - handed to the consumer, which raises it
        w.channel.finish(exc)
    finally:
        for _, fut in pending:
            fut.cancel()
        cache.close_stream(stream)
        for packs in w.gatherer.packs.values():
            packs.close()
        if w.channel.closed:  # consumer gone mid-stream
            w.gatherer.placement.abandon()
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

    def __iter__(self) -> MinibatchStream:
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
        """Whether the producer thread still runs."""
        return self._thread.is_alive()

    @property
    def closed(self) -> bool:
        """True once closed (the servicer closes every stream when its call ends)."""
        return self._channel.closed

    def close(self) -> None:
        """Stops the producer (it exits after its current step) and drops queued minibatches.
        Thread-safe: the gRPC layer may call it from another thread when a stream is cancelled."""
        self._channel.close()

    def __enter__(self) -> MinibatchStream:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()

    def __del__(self) -> None:
        self._channel.close()
