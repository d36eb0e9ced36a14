"""Offline sampling: an epoch's minibatches computed ahead of training, exactly as the loader
computes them (the same plan, :meth:`EpochPlan.for_job`; the same sampler calls with the
same (job seed, epoch, step) keys as the loader's stream makes, through the same
:func:`~graphfeed.loader.edges.sample_step`, so an edge job's negatives and exclusions too)."""

from __future__ import annotations

import time
from collections import deque
from collections.abc import Iterator
from concurrent.futures import Future, ThreadPoolExecutor
from dataclasses import dataclass

import numpy as np

from graphfeed.common.errors import InvalidArgument
from graphfeed.graph_store.types import PartitionSet
from graphfeed.loader.edges import EdgeSeeds, edge_seeds, sample_step
from graphfeed.loader.job import JobSpec
from graphfeed.loader.plan import EpochPlan, split_ids
from graphfeed.sampler.types import BlockSampler


@dataclass(frozen=True)
class SampledEpoch:
    """The input nodes of every step of one epoch of one rank, in step order."""

    plan: EpochPlan
    input_nodes: list[np.ndarray]  # int64, one array per step, as the loader's blocks list them
    sample_seconds: float


@dataclass(frozen=True)
class JobEpoch:
    """The plan the loader builds for a job's rank and epoch, and an edge job's seeds."""

    plan: EpochPlan
    edges: EdgeSeeds | None = None


def plan_epoch(partitions: PartitionSet, job: JobSpec, epoch: int) -> JobEpoch:
    """The plan the loader builds for ``job``'s rank and ``epoch`` (and an edge job's seeds).

    Raises:
        InvalidArgument: bad job spec or epoch. NotFound: unknown split (node or edge).
    """
    job.validate()
    if epoch < 0:
        raise InvalidArgument(f"epoch must be >= 0, got {epoch}")
    if job.seed_edges:
        edges = edge_seeds(partitions, job)
        return JobEpoch(edges.plan(epoch), edges)
    return JobEpoch(EpochPlan.for_job(split_ids(partitions, job.split), job, epoch))


def sample_steps(
    sampler: BlockSampler,
    job: JobSpec,
    epoch: JobEpoch,
    workers: int = 2,
    window: int = 8,
    fanouts: list[int | list[int]] | None = None,
) -> Iterator[tuple[int, np.ndarray]]:
    """``(step, input nodes)`` of every step in order, sampled ``window`` steps ahead on
    ``workers`` threads (the sampling kernels release the GIL). ``fanouts``: the job's as the
    sampler takes them (:meth:`JobSpec.sampler_fanouts`; default ``job.fanouts``)."""
    layers = list(job.fanouts) if fanouts is None else fanouts
    plan = epoch.plan
    with ThreadPoolExecutor(max_workers=max(1, workers), thread_name_prefix="pack-sample") as pool:
        pending: deque[tuple[int, Future]] = deque()
        next_step = 0
        try:
            while next_step < plan.num_steps or pending:
                while next_step < plan.num_steps and len(pending) < max(1, window):
                    fut = pool.submit(sample_step, sampler, job, layers, plan, epoch.edges, next_step)
                    pending.append((next_step, fut))
                    next_step += 1
                step, fut = pending.popleft()
                yield step, np.asarray(fut.result()[0].input_nodes, dtype=np.int64)
        finally:
            for _, fut in pending:
                fut.cancel()


def sample_epoch(
    partitions: PartitionSet, sampler: BlockSampler, job: JobSpec, epoch: int, workers: int = 2
) -> SampledEpoch:
    """Samples every step of ``epoch`` for ``job``'s rank (see :func:`sample_steps`)."""
    planned = plan_epoch(partitions, job, epoch)
    t0 = time.perf_counter()
    fanouts = job.sampler_fanouts(partitions.info.types)
    inputs = [ids for _, ids in sample_steps(sampler, job, planned, workers, fanouts=fanouts)]
    return SampledEpoch(planned.plan, inputs, time.perf_counter() - t0)
