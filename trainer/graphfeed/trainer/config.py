"""Settings of the example training job (``graphfeed train``; env prefix ``GRAPHFEED_TRAIN_``).

Light on purpose (pydantic only): ``graphfeed --help`` builds the ``train`` flags from
:class:`TrainConfig` without importing torch or DGL.
"""

from __future__ import annotations

import copy
import os
from pathlib import Path
from typing import Annotated, Any, Literal

from pydantic import BeforeValidator, Field
from pydantic_settings import BaseSettings, SettingsConfigDict

from graphfeed.loader.cache_options import CachePolicyName
from graphfeed.loader.config import LoaderSettings

__all__ = ["TrainConfig"]


def _split_commas(value: Any) -> Any:
    """``["a:1,b:2"]`` (the flag's form) or ``"a:1,b:2"`` -> ``["a:1", "b:2"]``."""
    items = value.split(",") if isinstance(value, str) else value
    if not isinstance(items, list):
        return value
    return [part for item in items for part in (item.split(",") if isinstance(item, str) else [item]) if part != ""]


def _loader_field(name: str) -> Any:
    """The loader's own setting ``name`` (default, bounds, description), for the embedded loader."""
    info = copy.copy(LoaderSettings.model_fields[name])
    info.description = f"{info.description} Embedded loader only."
    return info


def _job_completion_index() -> int:
    # A Kubernetes indexed Job numbers its pods: that index is the rank unless one is given.
    return int(os.environ.get("JOB_COMPLETION_INDEX", "0"))


class TrainConfig(BaseSettings):
    """Hyper-parameters and wiring of the example job: a loader service (``loader_address``) or,
    with ``graph_stores`` and ``sampler_address`` instead, a loader embedded in this process
    (then ``cache_*`` size its cache, and with a CUDA ``device`` and ``gpu_cache_bytes`` features
    are gathered on the GPU)."""

    model_config = SettingsConfigDict(env_prefix="GRAPHFEED_TRAIN_", extra="forbid")

    loader_address: str = Field(default="", description="host:port of the loader service.")
    graph_stores: Annotated[list[str], BeforeValidator(_split_commas)] = Field(
        default_factory=list,
        description="Comma-separated host:port of every graph-store: run the loader inside this process "
        "(needs --sampler; with --device cuda, features are gathered on the GPU).",
    )
    sampler_address: str = Field(default="", description="host:port of the sampler service (with --graph-stores).")
    cache_policy: CachePolicyName = _loader_field("cache_policy")
    cache_bytes: int = _loader_field("cache_bytes")
    gpu_cache_bytes: int = Field(
        default=-1,
        description="Embedded loader's GPU cache tier, in bytes; 0 for none, -1: a quarter of the GPU's free memory "
        "with a CUDA --device, else none.",
    )
    epochs: int = Field(default=10, description="Epochs to train (counting resumed ones).")
    batch_size: int = Field(default=256, description="Seeds per minibatch.")
    fanouts: list[int] = Field(default_factory=lambda: [10, 10], description="Neighbors per layer, input layer first (default 10 10).")
    eval_fanouts: list[int] = Field(
        default_factory=lambda: [-1, -1], description="Neighbors per layer when evaluating (default -1 -1: all)."
    )
    hidden: int = Field(default=64, description="Hidden units.")
    lr: float = Field(default=0.01, description="Adam learning rate.")
    weight_decay: float = Field(default=5e-4, description="Adam weight decay.")
    dropout: float = Field(default=0.5, description="Dropout between layers.")
    seed: int = Field(default=0, description="Job seed: model init and every sampling choice derive from it.")
    rank: int = Field(
        default_factory=_job_completion_index, description="Trainer rank (default: $JOB_COMPLETION_INDEX or 0)."
    )
    world_size: int = Field(default=1, description="Number of trainers.")
    job_id: str = Field(default="graphsage", description="Job name (loader logs and shared cache state).")
    checkpoint: Path | None = Field(default=None, description="Checkpoint file; resumed from when it exists.")
    checkpoint_every: int = Field(default=1, description="Steps between checkpoints.")
    device: str = Field(default="cpu", description="Torch device of the model and minibatches, e.g. cuda:0.")
    shm_dir: str = Field(
        default="/dev/shm",
        description="Directory offered to the loader for minibatch tensors when it shares it (same host, same "
        'mount); "" for inline gRPC only.',
    )
    feature_wire_dtype: Literal["", "float16", "bfloat16"] = Field(
        default="",
        description='Type input features travel in from the loader: "" the stored one; float16 or bfloat16 '
        "halve the bytes (rounded by the loader, upcast to float32 on --device).",
    )
    stop_after_steps: int | None = Field(default=None, description="Testing aid: exit after this many steps in this process.")
