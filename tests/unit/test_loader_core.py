"""Loader core in-process: exact features/labels, epoch coverage, determinism, resume, cache
accounting, error propagation and prompt shutdown of an abandoned stream."""

from __future__ import annotations

import threading
import time
from collections.abc import Callable, Generator, Iterator, Sequence
from concurrent.futures import Future
from typing import Any

import numpy as np
import pytest

from graphfeed.common.blocks import SampledBlocks
from graphfeed.common.errors import InvalidArgument, NotFound, OutOfRange, Unavailable
from graphfeed.graph_store.partitions import LocalPartitionSet
from graphfeed.graph_store.store import GraphStore
from graphfeed.graph_store.types import Fanout, RowsInto
from graphfeed.loader.core import Loader
from graphfeed.loader.job import JobSpec
from graphfeed.loader.minibatch import ReadyMinibatch
from graphfeed.sampler.core import MultiHopSampler
from graphfeed.sampler.types import BlockSampler
from tests.graphs import arithmetic_features, arithmetic_labels

F = 4  # feat_dim of the arith_root fixture
JOB = JobSpec(job_id="t", job_seed=11, split="train", batch_size=8, fanouts=(3, 2), shuffle=True)


@pytest.fixture
def make_loader(parts: LocalPartitionSet) -> Iterator[Callable[..., Loader]]:
    made: list[Loader] = []

    def make(partitions: LocalPartitionSet | None = None, sampler: BlockSampler | None = None, **kw: Any) -> Loader:
        p = parts if partitions is None else partitions
        loader = Loader(p, sampler or MultiHopSampler(p), **kw)
        made.append(loader)
        return loader

    yield make
    for loader in made:
        loader.close()


def train_gids(orig: np.ndarray) -> np.ndarray:
    return np.flatnonzero(orig % 5 <= 2)  # the arithmetic graph's train split, as gids


def wait_until(cond: Callable[[], bool], timeout_s: float = 10.0) -> None:
    deadline = time.monotonic() + timeout_s
    while not cond():
        assert time.monotonic() < deadline, "condition not reached before the deadline"
        time.sleep(0.01)


def producers() -> list[threading.Thread]:
    """This module's producer threads (job ``JOB.job_id``): a stream another test in the same
    process left winding down is not this test's to wait for."""
    return [t for t in threading.enumerate() if t.name.startswith(f"loader-producer-{JOB.job_id}-")]


@pytest.mark.parametrize(
    "policy, cache_bytes",
    [
        ("none", 0),
        ("static_degree", 30 * F * 4),
        ("lru", 25 * F * 4),
        ("massivegnn", 30 * F * 4),
        ("lookahead", 25 * F * 4),
    ],
)
def test_full_epoch_has_exact_features_and_labels_and_every_seed_once(
    make_loader: Callable[..., Loader], orig: np.ndarray, policy: str, cache_bytes: int
) -> None:
    loader = make_loader(cache_policy=policy, cache_bytes=cache_bytes)
    for epoch in (0, 1):  # the second epoch runs on a warm cache
        mbs = list(loader.stream(JOB, epoch, 0))
        assert [mb.step for mb in mbs] == list(range(8))  # 60 train nodes / 8
        seeds = np.concatenate([mb.blocks.output_nodes for mb in mbs])
        assert len(seeds) == 60 and np.array_equal(np.sort(seeds), train_gids(orig))
        for mb in mbs:
            v = orig[mb.blocks.input_nodes]
            assert mb.features.dtype == np.float32
            assert np.array_equal(mb.features, arithmetic_features(v))
            assert np.array_equal(mb.labels, arithmetic_labels(orig[mb.blocks.output_nodes]))
            assert mb.stats.cache_hits + mb.stats.cache_misses == len(v)
            assert mb.epoch == epoch and mb.steps_per_epoch == 8 and mb.job_seed == 11
    (host,) = loader.cache_stats()
    assert host.nbytes <= cache_bytes
    if policy == "none":
        assert host.hits == 0
    else:
        assert host.hits > 0


def test_describe_reports_the_job(make_loader: Callable[..., Loader]) -> None:
    info = make_loader().describe(JobSpec(split="train", batch_size=8, fanouts=(2,), rank=1, world_size=4))
    assert (info.steps_per_epoch, info.seeds_per_epoch) == (2, 15)  # 60 / 4 ranks = 15 -> 8 + 7
    assert info.feature_row_shape == (F,) and info.feature_dtype == np.float32
    assert (info.num_classes, info.num_nodes) == (3, 100)


def key(mb: ReadyMinibatch) -> tuple:
    b = mb.blocks
    edges = tuple(
        (x.num_src, x.num_dst, x.edge_src.tobytes(), x.edge_dst.tobytes(), x.edge_ids.tobytes()) for x in b.blocks
    )
    return (
        mb.step,
        b.input_nodes.tobytes(),
        b.output_nodes.tobytes(),
        edges,
        mb.features.tobytes(),
        mb.labels.tobytes(),
    )


def test_replayed_steps_are_byte_identical_and_resume_gives_the_tail(make_loader: Callable[..., Loader]) -> None:
    loader = make_loader(cache_policy="lru", cache_bytes=20 * F * 4)
    first = [key(mb) for mb in loader.stream(JOB, 3, 0)]
    again = [key(mb) for mb in make_loader(cache_policy="none").stream(JOB, 3, 0)]
    assert first == again
    assert [key(mb) for mb in loader.stream(JOB, 3, 5)] == first[5:]
    other_epoch = [key(mb) for mb in loader.stream(JOB, 4, 0)]
    assert other_epoch != first


def test_ranks_cover_the_split_once(make_loader: Callable[..., Loader], orig: np.ndarray) -> None:
    loader = make_loader()
    seeds = [
        mb.blocks.output_nodes
        for r in range(3)
        for mb in loader.stream(
            JobSpec(job_seed=5, split="train", batch_size=7, fanouts=(2,), shuffle=True, rank=r, world_size=3), 0
        )
    ]
    assert np.array_equal(np.sort(np.concatenate(seeds)), train_gids(orig))


def test_start_step_bounds_and_labels_off(make_loader: Callable[..., Loader]) -> None:
    loader = make_loader()
    assert list(loader.stream(JOB, 0, 8)) == []
    with pytest.raises(OutOfRange, match="start_step 9"):
        loader.stream(JOB, 0, 9)
    (mb,) = list(loader.stream(JobSpec(split="val", batch_size=100, fanouts=(1,), label_name=""), 0))
    assert mb.labels.size == 0 and len(mb.blocks.output_nodes) == 20


@pytest.mark.parametrize(
    "changes, error, match",
    [
        (dict(batch_size=0), InvalidArgument, "batch_size"),
        (dict(fanouts=()), InvalidArgument, "fanouts"),
        (dict(fanouts=(2, -3)), InvalidArgument, "fanout"),
        (dict(rank=2, world_size=2), InvalidArgument, "rank"),
        (dict(world_size=0), InvalidArgument, "world_size"),
        (dict(world_size=2**31), InvalidArgument, "world_size must be <= 65536, got 2147483648"),
        (dict(split="nope"), NotFound, "nope"),
        (dict(feature_name="nope"), NotFound, "feature_name"),
        (dict(label_name="nope"), NotFound, "label_name"),
    ],
)
def test_bad_jobs_are_rejected_before_streaming(
    make_loader: Callable[..., Loader], changes: dict, error: type, match: str
) -> None:
    loader = make_loader()
    job = JobSpec(**{**JOB.__dict__, **changes})
    with pytest.raises(error, match=match):
        loader.describe(job)
    with pytest.raises(error, match=match):
        loader.stream(job, 0, 0)


class FlakyPartitions(LocalPartitionSet):
    """Partition 1's node data fails with Unavailable after ``ok_calls`` calls."""

    def __init__(self, stores: Sequence[GraphStore], ok_calls: int) -> None:
        super().__init__(stores)
        self.ok_calls = ok_calls
        self.calls = 0

    def read_node_data(self, p: int, name: str, ids: np.ndarray, into: RowsInto) -> Future[int]:
        if p == 1:
            self.calls += 1
            if self.calls > self.ok_calls:
                fut: Future = Future()
                fut.set_exception(Unavailable("graph-store of partition 1 is down"))
                return fut
        return super().read_node_data(p, name, ids, into)


def test_producer_errors_reach_the_consumer_after_the_good_minibatches(
    make_loader: Callable[..., Loader], parts: LocalPartitionSet
) -> None:
    flaky = FlakyPartitions(parts.stores, ok_calls=4)  # features + labels: 2 calls per step
    loader = make_loader(flaky, MultiHopSampler(parts), cache_policy="none")
    got: list[int] = []
    with pytest.raises(Unavailable, match="partition 1 is down"):
        for mb in loader.stream(JOB, 0, 0):
            got.append(mb.step)
    assert got == [0, 1]
    wait_until(lambda: not producers())


class LoggedPartitions(LocalPartitionSet):
    """Logs when each node-data request starts and when its result is first waited on."""

    def __init__(self, stores: Sequence[GraphStore]) -> None:
        super().__init__(stores)
        self.log: list[tuple[str, str]] = []

    def read_node_data(self, p: int, name: str, ids: np.ndarray, into: RowsInto) -> Future[int]:
        self.log.append(("start", name))
        inner, log = super().read_node_data(p, name, ids, into), self.log

        class Logged(Future):
            def result(self, timeout: float | None = None):  # noqa: ANN202
                log.append(("wait", name))
                return inner.result(timeout)

        return Logged()


def test_labels_are_requested_before_any_feature_is_awaited(
    make_loader: Callable[..., Loader], parts: LocalPartitionSet
) -> None:
    """Per minibatch, every feature and label request is in flight before any is waited on:
    one round trip, not two."""
    logged = LoggedPartitions(parts.stores)
    loader = make_loader(logged, MultiHopSampler(parts), cache_policy="none")
    with loader.stream(JOB, 0, 0) as s:
        steps = len(list(s))
    gathers: list[list[tuple[str, str]]] = []  # the producer gathers one minibatch after another
    for event in logged.log:
        if not gathers or (event[0] == "start" and gathers[-1][-1][0] == "wait"):
            gathers.append([])
        gathers[-1].append(event)
    assert len(gathers) == steps > 1
    for g in gathers:
        kinds = [kind for kind, _ in g]
        assert kinds == sorted(kinds, key=lambda k: k == "wait"), g  # all starts, then all waits
        assert {("start", "feat"), ("start", "label")} <= set(g), g


class CountingSampler:
    """Counts calls; calls for steps >= ``block_from`` wait until ``release`` is set."""

    def __init__(self, inner: MultiHopSampler, block_from: int = 1 << 30) -> None:
        self.inner = inner
        self.block_from = block_from
        self.release = threading.Event()
        self.calls = 0
        self._lock = threading.Lock()

    def sample(
        self, seeds: np.ndarray, fanouts: Sequence[Fanout], replace: bool, job_seed: int, epoch: int, step: int
    ) -> SampledBlocks:
        with self._lock:
            self.calls += 1
        if step >= self.block_from:
            self.release.wait(30)
        return self.inner.sample(seeds, fanouts, replace, job_seed, epoch, step)


def test_closing_the_consumer_generator_stops_the_producer(
    make_loader: Callable[..., Loader], parts: LocalPartitionSet
) -> None:
    sampler = CountingSampler(MultiHopSampler(parts))
    loader = make_loader(parts, sampler, lookahead_steps=2, max_inflight=1)
    job = JobSpec(**{**JOB.__dict__, "batch_size": 2})  # 30 steps

    def servicer_like() -> Generator[ReadyMinibatch, None, None]:
        with loader.stream(job, 0, 0) as stream:
            yield from stream

    gen = servicer_like()
    assert next(gen).step == 0
    wait_until(lambda: loader.queue_depth() == 1)  # the producer is blocked on the full queue
    gen.close()
    wait_until(lambda: not producers())
    # consumed 1 + queued 1 + one being gathered + lookahead 2: nothing near the 30 steps
    assert sampler.calls <= 5
    assert loader.queue_depth() == 0


def test_close_interrupts_a_producer_waiting_on_the_sampler(
    make_loader: Callable[..., Loader], parts: LocalPartitionSet
) -> None:
    sampler = CountingSampler(MultiHopSampler(parts), block_from=2)
    loader = make_loader(parts, sampler, lookahead_steps=3, max_inflight=4)
    stream = loader.stream(JOB, 0, 0)
    assert [next(stream).step, next(stream).step] == [0, 1]
    wait_until(lambda: sampler.calls >= 3)  # the producer now waits for step 2, which hangs
    stream.close()
    try:
        wait_until(lambda: not stream.producer_alive, timeout_s=5)
    finally:
        sampler.release.set()
    assert list(stream) == []


def test_on_minibatch_hook_sees_every_streamed_minibatch(make_loader: Callable[..., Loader]) -> None:
    seen: list[ReadyMinibatch] = []
    loader = make_loader(on_minibatch=seen.append)
    mbs = list(loader.stream(JOB, 0, 0))
    assert [m.step for m in seen] == [m.step for m in mbs]
    assert all(m.stats.remote_feature_bytes == sum(m.stats.remote_bytes_by_partition.values()) for m in seen)
    assert sum(m.stats.remote_feature_bytes for m in seen) > 0


def test_unknown_cache_policy_is_refused_when_the_loader_is_made(make_loader: Callable[..., Loader]) -> None:
    # At construction, not at the first stream: a misspelt --cache-policy fails at start-up.
    with pytest.raises(InvalidArgument, match="unknown cache policy 'fifo'; expected one of none, static_degree"):
        make_loader(cache_policy="fifo")
