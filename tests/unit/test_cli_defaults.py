"""Every flag of train, train-temporal, pack and the services comes from a settings class, and
``--help`` states the default the code uses (the settings', which are the declarations')."""

from __future__ import annotations

import argparse
import dataclasses
import re

import pytest
from pydantic_settings import BaseSettings

from graphfeed.cli import SERVICES, _load, build_parser
from graphfeed.loader.job import JobSpec
from graphfeed.pack.config import PACK_JOB_FIELDS, PackSettings
from graphfeed.pack.writer import PackOptions
from graphfeed.trainer.config import TrainConfig
from graphfeed.trainer.temporal.config import TGNConfig, TGNSettings


def _subparser(*path: str) -> argparse.ArgumentParser:
    parser = build_parser()
    for name in path:
        (sub,) = [a for a in parser._actions if isinstance(a, argparse._SubParsersAction)]
        parser = sub.choices[name]
    return parser


COMMANDS: list[tuple[tuple[str, ...], type[BaseSettings]]] = [
    (("train",), TrainConfig),
    (("train-temporal",), TGNSettings),
    (("pack",), PackSettings),
    *[(("serve", name), _load(ref)) for name, (ref, _) in SERVICES.items()],
]


def _help_default(text: str) -> str | None:
    found = re.search(r"\(default (.+)\)\s*$", " ".join(text.split()))
    return found.group(1) if found else None


@pytest.mark.parametrize(("path", "cls"), COMMANDS, ids=lambda v: " ".join(v) if isinstance(v, tuple) else "")
def test_help_states_the_settings_defaults(path: tuple[str, ...], cls: type[BaseSettings]) -> None:
    parser = _subparser(*path)
    flags = [a for a in parser._actions if not isinstance(a, argparse._HelpAction)]
    assert flags
    for action in flags:
        assert action.dest in cls.model_fields, f"{action.option_strings} is no field of {cls.__name__}"
        assert action.default is None  # "not given": the environment or the field's default applies
        info = cls.model_fields[action.dest]
        if action.help == argparse.SUPPRESS:
            continue
        shown = _help_default(action.help or "")
        if info.is_required() or info.default_factory is not None or info.default in (None, ""):
            assert shown is None, action.option_strings
        else:
            assert shown == repr(info.default), action.option_strings
        if info.is_required():
            assert "(required)" in (action.help or "")


def _declared(source: type, name: str) -> object:
    (f,) = [f for f in dataclasses.fields(source) if f.name == name]
    return f.default


@pytest.mark.parametrize("name", PACK_JOB_FIELDS)
def test_pack_job_defaults_are_job_specs(name: str) -> None:
    info = PackSettings.model_fields[name]
    if _declared(JobSpec, name) is dataclasses.MISSING:
        assert info.is_required()
    else:
        assert info.default == _declared(JobSpec, name)


@pytest.mark.parametrize(
    "name", ["max_blow_up", "steps_per_pack", "max_pack_bytes", "resident", "resident_bytes", "sample_workers"]
)
def test_pack_option_defaults_are_pack_options(name: str) -> None:
    assert PackSettings.model_fields[name].default == getattr(PackOptions(), name)


def test_temporal_defaults_are_tgn_configs() -> None:
    shared = set(TGNSettings.model_fields) & {f.name for f in dataclasses.fields(TGNConfig)}
    assert shared >= {"epochs", "batch_size", "fanout", "lr", "seed", "mrr_negatives", "checkpoint_every"}
    for name in shared:
        assert TGNSettings.model_fields[name].default == getattr(TGNConfig(), name), name
    assert TGNSettings().tgn_config() == TGNConfig()  # --dim is memory/time/embed dims, all equal


def test_old_flag_spellings_still_parse() -> None:
    args = build_parser().parse_args(
        ["pack", "--data", "/d", "--out", "/o", "--fanouts", "10,5", "--replace", "--drop-last", "--no-shuffle"]
    )
    s = PackSettings(**{k: v for k, v in vars(args).items() if k in PackSettings.model_fields and v is not None})
    assert (s.fanouts, s.replace, s.drop_last, s.shuffle) == ([10, 5], True, True, False)
    args = build_parser().parse_args(["train-temporal", "--json", "out.json", "--dim", "8"])
    assert (str(args.json_path), args.dim) == ("out.json", 8)
