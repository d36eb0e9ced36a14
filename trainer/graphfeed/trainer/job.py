"""The job keywords both data loaders take, and the :class:`~graphfeed.loader.job.JobSpec` they make.

``RemoteDataLoader(address, "train", fanouts=[10, 10], batch_size=1024, seed=0, ...)`` and
``EmbeddedDataLoader(loader, "train", fanouts=...)`` describe their job with the same keywords
(:class:`JobArgs`); their meaning and defaults are JobSpec's fields (:func:`job_spec`). The
remote one sends it as loader.proto's JobSpec (:func:`job_to_proto`).
"""

# No `from __future__ import annotations`: TypedDict reads Required at run time (JobArgs.__required_keys__).
from collections.abc import Mapping, Sequence
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
    fanouts: Required[Sequence[int | Mapping[str, int]]]
    replace: bool
    shuffle: bool
    drop_last: bool
    rank: int
    world_size: int
    feature_name: str
    label_name: str
    feature_wire_dtype: str
    etype_fanouts: Sequence[tuple[int, str, int]]
    skip_features: bool
    seed_edges: bool
    num_negatives: int
    negative_sampler: str
    negatives_avoid_positives: bool
    exclude: str


JOB_ARG_FIELDS = {"seed": "job_seed"}
"""The :class:`JobArgs` keys named differently from the JobSpec field they set."""


def job_spec(split: str, **job: Unpack[JobArgs]) -> JobSpec:
    """The job a data loader asks its loader for: ``split`` ("train", "val" or "test") and ``job``,
    each keyword as the JobSpec field of that name (``seed``: ``job_seed``) describes it, with
    its default: ``batch_size`` 1024, ``shuffle`` True, ``job_id`` "graphfeed-job", ``feature_name``
    "feat", ``label_name`` "label" ("" attaches none), ``feature_wire_dtype`` "" (the stored type;
    "float16" or "bfloat16" halve the bytes, upcast to float32 on the loader's ``device``), the
    rest 0 / 1 / False. ``fanouts`` is required: per layer an int for every edge type, or (a
    graph of several edge types) a dict ``{etype: k}`` naming each of them, as DGL's
    ``NeighborSampler`` takes (edge types as ``"src:rel:dst"`` or a relation name).
    """
    values: dict[str, Any] = {JOB_ARG_FIELDS.get(k, k): v for k, v in job.items()}
    if "fanouts" in values:
        layers, per_type = [], []
        for layer, f in enumerate(values["fanouts"]):
            if isinstance(f, Mapping):
                per_type += [(layer, ":".join(e) if isinstance(e, tuple) else str(e), int(k)) for e, k in f.items()]
                f = max(f.values(), default=0)  # unused: the layer samples per edge type
            layers.append(int(f))
        values["fanouts"] = tuple(layers)
        if per_type:
            values["etype_fanouts"] = tuple(per_type)
    return JobSpec(split=split, **values)
