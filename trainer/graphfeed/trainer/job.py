"""The job keywords both data loaders take, and the :class:`~graphfeed.loader.job.JobSpec` they make.

``RemoteDataLoader(address, "train", fanouts=[10, 10], batch_size=1024, seed=0, ...)`` and
``EmbeddedDataLoader(loader, "train", fanouts=...)`` describe their job with the same keywords
(:class:`JobArgs`, defaults in :func:`job_spec`); the remote one sends it as loader.proto's
JobSpec (:func:`job_to_proto`).
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Required, TypedDict

from graphfeed.loader.job import JobSpec
from graphfeed.loader.v1 import loader_pb2 as pb

__all__ = ["JobArgs", "job_spec", "job_to_proto"]


class JobArgs(TypedDict, total=False):
    """Keyword arguments that describe a data loader's job; see :func:`job_spec` for each."""

    fanouts: Required[Sequence[int]]
    batch_size: int
    shuffle: bool
    drop_last: bool
    replace: bool
    seed: int
    rank: int
    world_size: int
    job_id: str
    feature_name: str
    label_name: str
    feature_wire_dtype: str


def job_spec(
    split: str,
    *,
    fanouts: Sequence[int],
    batch_size: int = 1024,
    shuffle: bool = True,
    drop_last: bool = False,
    replace: bool = False,
    seed: int = 0,
    rank: int = 0,
    world_size: int = 1,
    job_id: str = "graphfeed-job",
    feature_name: str = "feat",
    label_name: str = "label",
    feature_wire_dtype: str = "",
) -> JobSpec:
    """The job a data loader asks its loader for.

    Args:
        split: seed nodes: "train", "val" or "test".
        fanouts: neighbors per layer, DGL order (first = input layer); -1 for all.
        batch_size: seeds per minibatch.
        shuffle: reshuffle each epoch.
        drop_last: drop the last partial minibatch.
        replace: sample neighbors with replacement.
        seed: job seed; every random choice derives from (seed, epoch, step).
        rank: this trainer's rank (DDP).
        world_size: number of trainers.
        job_id: name of the job (logs, the loader's shared cache state).
        feature_name: node-data name of the input features.
        label_name: node-data name of the labels; "" attaches none.
        feature_wire_dtype: "" (features travel in their stored type), "float16" or "bfloat16"
            (half the bytes, rounded by the loader; the data loaders upcast them to float32 on
            ``device``). See :mod:`graphfeed.loader.wire`.
    """
    return JobSpec(
        job_id=job_id,
        job_seed=seed,
        split=split,
        batch_size=batch_size,
        fanouts=tuple(fanouts),
        replace=replace,
        shuffle=shuffle,
        drop_last=drop_last,
        rank=rank,
        world_size=world_size,
        feature_name=feature_name,
        label_name=label_name,
        feature_wire_dtype=feature_wire_dtype,
    )


def job_to_proto(job: JobSpec) -> pb.JobSpec:
    """loader.proto's JobSpec, every field set (``label_name`` too, so "" means "no labels")."""
    return pb.JobSpec(
        job_id=job.job_id,
        job_seed=job.job_seed,
        split=job.split,
        batch_size=job.batch_size,
        fanouts=list(job.fanouts),
        replace=job.replace,
        shuffle=job.shuffle,
        drop_last=job.drop_last,
        rank=job.rank,
        world_size=job.world_size,
        feature_name=job.feature_name,
        label_name=job.label_name,
        feature_wire_dtype=job.feature_wire_dtype,
    )
