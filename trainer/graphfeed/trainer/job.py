"""The job keywords both data loaders take, and the :class:`~graphfeed.loader.job.JobSpec` they make.

``RemoteDataLoader(address, "train", fanouts=[10, 10], batch_size=1024, seed=0, ...)`` and
``EmbeddedDataLoader(loader, "train", fanouts=...)`` describe their job with the same keywords
(:class:`JobArgs`); their meaning and defaults are JobSpec's fields (:func:`job_spec`). The
remote one sends it as loader.proto's JobSpec (:func:`job_to_proto`).
"""

# No `from __future__ import annotations`: TypedDict reads Required at run time (JobArgs.__required_keys__).
from collections.abc import Sequence
from typing import Any, Required, TypedDict, Unpack

from graphfeed.loader.job import JobSpec
from graphfeed.loader.job_proto import job_to_proto

__all__ = ["JOB_ARG_FIELDS", "JobArgs", "job_spec", "job_to_proto"]


class JobArgs(TypedDict, total=False):
    """Keyword arguments that describe a data loader's job: :class:`~graphfeed.loader.job.JobSpec`'s
    fields but ``split`` (the loaders' positional argument), ``job_seed`` spelled ``seed`` and
    ``fanouts`` any sequence. Written out so that ``Unpack[JobArgs]`` types the loaders' keywords;
    tests/unit/test_job_declaration.py fails when it drifts from JobSpec."""

    job_id: str
    seed: int
    batch_size: int
    fanouts: Required[Sequence[int]]
    replace: bool
    shuffle: bool
    drop_last: bool
    rank: int
    world_size: int
    feature_name: str
    label_name: str
    feature_wire_dtype: str


JOB_ARG_FIELDS = {"seed": "job_seed"}
"""The :class:`JobArgs` keys named differently from the JobSpec field they set."""


def job_spec(split: str, **job: Unpack[JobArgs]) -> JobSpec:
    """The job a data loader asks its loader for: ``split`` ("train", "val" or "test") and ``job``,
    each keyword as the JobSpec field of that name (``seed``: ``job_seed``) describes it, with
    its default: ``batch_size`` 1024, ``shuffle`` True, ``job_id`` "graphfeed-job", ``feature_name``
    "feat", ``label_name`` "label" ("" attaches none), ``feature_wire_dtype`` "" (the stored type;
    "float16" or "bfloat16" halve the bytes, upcast to float32 on the loader's ``device``), the
    rest 0 / 1 / False. ``fanouts`` is required.
    """
    values: dict[str, Any] = {JOB_ARG_FIELDS.get(k, k): v for k, v in job.items()}
    if "fanouts" in values:
        values["fanouts"] = tuple(values["fanouts"])
    return JobSpec(split=split, **values)
