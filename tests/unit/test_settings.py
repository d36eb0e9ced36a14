"""Settings declared once: the loader's cache flags come from CacheOptions, train's from TrainConfig."""

from __future__ import annotations

import argparse

import pytest
from pydantic.dataclasses import is_pydantic_dataclass
from pydantic.fields import FieldInfo

from graphfeed.cli import build_parser
from graphfeed.common.config import add_settings_arguments
from graphfeed.loader.cache.options import CacheOptions
from graphfeed.loader.config import CACHE_OPTION_SETTINGS, LoaderSettings
from graphfeed.trainer.config import TrainConfig


def _cache_option_fields() -> dict[str, FieldInfo]:
    options: type = CacheOptions
    assert is_pydantic_dataclass(options)  # narrows to a type that declares __pydantic_fields__
    return options.__pydantic_fields__


@pytest.mark.parametrize(("setting", "option"), CACHE_OPTION_SETTINGS.items())
def test_loader_cache_settings_are_the_cache_options(setting: str, option: str) -> None:
    ours, theirs = LoaderSettings.model_fields[setting], _cache_option_fields()[option]
    assert (ours.annotation, ours.default, ours.metadata, ours.description) == (
        theirs.annotation,
        theirs.default,
        theirs.metadata,
        theirs.description,
    )


def test_help_says_required_not_pydantic_undefined() -> None:
    parser = argparse.ArgumentParser()
    add_settings_arguments(parser, LoaderSettings)
    text = parser.format_help()
    assert "PydanticUndefined" not in text
    assert "GRAPHFEED_LOADER_SAMPLER_ADDRESS] (required)" in " ".join(text.split())


def test_train_flags_fill_the_train_config(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.delenv("JOB_COMPLETION_INDEX", raising=False)
    args = build_parser().parse_args(["train", "--graph-stores", "a:1,b:2", "--sampler", "s:3", "--fanouts", "5", "5"])
    cfg = TrainConfig(**{k: v for k, v in vars(args).items() if k in TrainConfig.model_fields and v is not None})
    assert cfg.graph_stores == ["a:1", "b:2"] and cfg.sampler_address == "s:3" and cfg.fanouts == [5, 5]
    assert (cfg.cache_policy, cfg.cache_bytes) == (LoaderSettings.model_fields["cache_policy"].default, 64 << 20)
    assert cfg.rank == 0 and cfg.loader_address == "" and cfg.stop_after_steps is None
    monkeypatch.setenv("JOB_COMPLETION_INDEX", "3")
    assert TrainConfig().rank == 3


def test_a_missing_or_bad_setting_is_one_line_naming_flag_and_env(capsys: pytest.CaptureFixture[str]) -> None:
    from graphfeed.cli import build_parser
    from graphfeed.common.config import settings_from_args
    from graphfeed.graph_store.config import GraphStoreSettings

    args = build_parser().parse_args(["serve", "graph-store", "--port", "70000"])
    with pytest.raises(SystemExit) as info:
        settings_from_args(GraphStoreSettings, args)
    assert info.value.code == 2
    err = capsys.readouterr().err
    assert "--part-dir (env GRAPHFEED_GRAPH_STORE_PART_DIR): is required" in err
    assert "--port (env GRAPHFEED_GRAPH_STORE_PORT): Input should be less than or equal to 65535" in err
    assert "Traceback" not in err and "pydantic" not in err


def test_evaluation_samples_as_many_layers_as_the_model_has() -> None:
    """A 3-layer model evaluated with 2 layers of blocks returns its hidden layer, not logits:
    evaluation defaults to all neighbors per training layer, and another depth is refused."""
    from graphfeed.trainer.config import TrainConfig

    assert TrainConfig(fanouts=[15, 10, 5]).eval_fanouts == [-1, -1, -1]
    assert TrainConfig(fanouts=[15, 10, 5], eval_fanouts=[20, 20, 20]).eval_fanouts == [20, 20, 20]
    with pytest.raises(ValueError, match="eval_fanouts has 2 layers but fanouts"):
        TrainConfig(fanouts=[15, 10, 5], eval_fanouts=[-1, -1])
