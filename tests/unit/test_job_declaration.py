"""The job is declared once, by JobSpec's fields: the data loaders' keywords, the proto mappings
and the settings of ``graphfeed train`` follow it, and a drift fails here."""

from __future__ import annotations

import dataclasses
import typing
from collections.abc import Mapping, Sequence

import pytest

from graphfeed.loader.job import JobSpec
from graphfeed.loader.job_proto import job_from_proto, job_to_proto
from graphfeed.loader.v1 import loader_pb2 as pb
from graphfeed.trainer.config import JOB_SETTINGS, TrainConfig
from graphfeed.trainer.job import JOB_ARG_FIELDS, JobArgs, job_spec

SPEC_TYPES = typing.get_type_hints(JobSpec)
SPEC_FIELDS = {f.name: f for f in dataclasses.fields(JobSpec)}


def test_job_args_are_the_job_spec_fields_but_split() -> None:
    args = typing.get_type_hints(JobArgs)
    as_fields = {JOB_ARG_FIELDS.get(k, k): v for k, v in args.items()}
    want = {name: tp for name, tp in SPEC_TYPES.items() if name != "split"}
    want["fanouts"] = Sequence[int | Mapping[str, int]]  # any sequence, {etype: k} layers too; JobSpec keeps a tuple
    want["etype_fanouts"] = Sequence[tuple[int, str, int]]
    assert as_fields == want
    required = {JOB_ARG_FIELDS.get(k, k) for k in JobArgs.__required_keys__}
    assert required == {n for n, f in SPEC_FIELDS.items() if f.default is dataclasses.MISSING}


def test_job_spec_defaults_are_job_specs() -> None:
    assert job_spec("val", fanouts=[2, 1]) == JobSpec(split="val", fanouts=(2, 1))
    assert job_spec("train", fanouts=[3], seed=9).job_seed == 9


def test_every_job_spec_field_is_described() -> None:
    assert all(f.metadata.get("description") for f in SPEC_FIELDS.values())


def test_the_proto_has_the_job_specs_fields() -> None:
    assert set(pb.JobSpec.DESCRIPTOR.fields_by_name) == set(SPEC_FIELDS)


@pytest.mark.parametrize(
    "job",
    [
        JobSpec(fanouts=(3, -1)),
        JobSpec(
            job_id="j",
            job_seed=2**64 - 1,
            split="test",
            batch_size=7,
            fanouts=(1,),
            replace=True,
            shuffle=False,
            drop_last=True,
            rank=2,
            world_size=3,
            feature_name="x",
            label_name="",
            feature_wire_dtype="bfloat16",
        ),
    ],
)
def test_a_job_survives_the_proto(job: JobSpec) -> None:
    assert job_from_proto(job_to_proto(job)) == job


def test_the_protos_own_defaults_are_kept() -> None:
    job = job_from_proto(pb.JobSpec(batch_size=4, fanouts=[2]))
    assert (job.feature_name, job.label_name) == ("feat", "label")  # empty / unset
    assert (job.job_id, job.shuffle, job.world_size) == ("", False, 0)  # taken as sent
    assert job_from_proto(pb.JobSpec(label_name="")).label_name == ""  # set to "": no labels


@pytest.mark.parametrize(("setting", "name"), JOB_SETTINGS.items())
def test_train_job_settings_are_job_spec_fields(setting: str, name: str, monkeypatch: pytest.MonkeyPatch) -> None:
    for var in ("RANK", "JOB_COMPLETION_INDEX", "WORLD_SIZE"):
        monkeypatch.delenv(var, raising=False)
    spec, info = SPEC_FIELDS[name], TrainConfig.model_fields[setting]
    if spec.default is dataclasses.MISSING:  # fanouts: the example model's own choice
        assert not info.is_required()
    else:
        assert info.get_default(call_default_factory=True) == spec.default
    if name in ("batch_size", "job_id", "feature_wire_dtype"):
        assert info.description == spec.metadata["description"]
