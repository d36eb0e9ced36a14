"""Settings of the example training job (``graphfeed train``; env prefix ``GRAPHFEED_TRAIN_``).

Light on purpose (pydantic only): ``graphfeed --help`` builds the ``train`` flags from
:class:`TrainConfig` without importing torch or DGL.
"""

from __future__ import annotations

import copy
import os
from pathlib import Path
from typing import Annotated, Any, Literal

from pydantic import BeforeValidator, Field, model_validator
from pydantic_settings import BaseSettings, SettingsConfigDict

from graphfeed.common.config import field_from, split_commas
from graphfeed.loader.cache.options import CachePolicyName
from graphfeed.loader.config import LoaderSettings
from graphfeed.loader.job import JobSpec

__all__ = ["JOB_SETTINGS", "TrainConfig"]

JOB_SETTINGS = {
    "batch_size": "batch_size",
    "fanouts": "fanouts",
    "seed": "job_seed",
    "rank": "rank",
    "world_size": "world_size",
    "job_id": "job_id",
    "feature_wire_dtype": "feature_wire_dtype",
}
"""TrainConfig's job settings -> the JobSpec field each one is (default and description from there;
``shuffle`` is no setting: the trainer shuffles train and not eval)."""


def _loader_field(name: str) -> Any:
    """The loader's own setting ``name`` (default, bounds, description), for the embedded loader."""
    info = copy.copy(LoaderSettings.model_fields[name])
    info.description = f"{info.description} Embedded loader only."
    return info


def _env_int(*names: str, default: int) -> int:
    """The first of the environment variables ``names`` that is set, as an int."""
    for name in names:
        if os.environ.get(name):
            return int(os.environ[name])
    return default


def _rank() -> int:
    # torchrun and Kubeflow's PyTorchJob set RANK; a Kubernetes indexed Job numbers its pods.
    return _env_int("RANK", "JOB_COMPLETION_INDEX", default=_JOB_DEFAULTS.rank)


def _world_size() -> int:
    return _env_int("WORLD_SIZE", default=_JOB_DEFAULTS.world_size)


_JOB_DEFAULTS = JobSpec(fanouts=())


def _local_rank() -> int:
    return _env_int("LOCAL_RANK", default=0)


class TrainConfig(BaseSettings):
    """Hyper-parameters and wiring of the example job: a loader service (``loader_address``) or,
    with ``graph_stores`` and ``sampler_address`` instead, a loader embedded in this process
    (then ``cache_*`` size its cache, and with a CUDA ``device`` and ``gpu_cache_bytes`` features
    are gathered on the GPU)."""

    model_config = SettingsConfigDict(env_prefix="GRAPHFEED_TRAIN_", extra="forbid")

    loader_address: str = Field(default="", description="host:port of the loader service.")
    graph_stores: Annotated[list[str], BeforeValidator(split_commas)] = Field(
        default_factory=list,
        description="Comma-separated host:port of every graph-store: run the loader inside this process "
        "(needs --sampler; with --device cuda, features are gathered on the GPU). With --loader too: only "
        "for --embeddings server.",
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
    batch_size: int = field_from(JobSpec, "batch_size")
    # JobSpec requires fanouts (they set the model's depth); the example model's are 10 10.
    fanouts: list[int] = field_from(
        JobSpec,
        "fanouts",
        default_factory=lambda: [10, 10],
        description=f"{JobSpec.__dataclass_fields__['fanouts'].metadata['description']} (default 10 10)",
    )
    eval_fanouts: list[int] = Field(
        default_factory=list,
        description="Neighbors per layer when evaluating, one per --fanouts layer (the model's depth); "
        "not given: -1 (all neighbors) for every layer.",
    )
    task: Literal["node", "link"] = Field(
        default="node",
        description="node: node classification on the node split; link: link prediction on the edge split "
        "(ingest --edge-split): edge minibatches with negatives, the model's embeddings scored by --scorer, "
        "validation MRR through layer-wise inference of every node.",
    )
    num_negatives: int = field_from(JobSpec, "num_negatives")
    negative_sampler: Literal["uniform", "global_uniform"] = field_from(JobSpec, "negative_sampler")
    exclude: Literal["reverse_id", "self", "none"] = field_from(JobSpec, "exclude")
    loss: Literal["bce", "margin"] = Field(
        default="bce",
        description="--task link: bce (positives 1, negatives 0) or margin (hinge against each negative).",
    )
    scorer: Literal["dot", "mlp"] = Field(
        default="dot", description="--task link: dot (u . v) or mlp (an MLP on u * v) scores a pair of embeddings."
    )
    eval_negatives: int = Field(
        default=100, ge=1, description="--task link: seeded negatives each val/test edge is ranked against (MRR)."
    )
    embeddings_out: Path | None = Field(
        default=None,
        description="--task link: after training, write every node's embedding here (layer-wise inference through "
        "the services; embeddings.npy by global id, or embeddings-<ntype>.npy by type-wise id); an interrupted "
        "run resumes at its last finished layer.",
    )
    model: Literal["sage", "rgcn"] = Field(
        default="sage",
        description="Example model: sage (GraphSAGE, one node and edge type) or rgcn (an RGCN over every relation "
        "of a typed graph; learnable embeddings for featureless node types).",
    )
    embeddings: Literal["local", "server"] = Field(
        default="local",
        description="Where rgcn's featureless node types' embeddings live: local (an nn.Embedding per rank, "
        "SparseAdam) or server (tables in the graph-stores, owner-partitioned, their optimizer run there; "
        "needs --graph-stores).",
    )
    embedding_optimizer: Literal["adam", "adagrad"] = Field(
        default="adam",
        description="With --embeddings server: the graph-stores' optimizer (DGL's SparseAdam or SparseAdagrad, "
        "learning rate --lr).",
    )
    featureless_types: Annotated[list[str], BeforeValidator(split_commas)] = Field(
        default_factory=list,
        description="rgcn: node types to treat as featureless even though the graph stores features for them: "
        "their features are ignored and an embedding is learned instead (where --embeddings says). Lets a graph "
        "whose every type has features (IMDB) exercise learnable embeddings.",
    )
    hidden: int = Field(default=64, description="Hidden units.")
    lr: float = Field(default=0.01, description="Adam learning rate.")
    weight_decay: float = Field(default=5e-4, description="Adam weight decay.")
    dropout: float = Field(default=0.5, description="Dropout between layers.")
    seed: int = field_from(
        JobSpec, "job_seed", description="Job seed: model init and every sampling choice derive from it."
    )
    rank: int = field_from(
        JobSpec,
        "rank",
        default_factory=_rank,
        description=f"Trainer rank (default: $RANK, else $JOB_COMPLETION_INDEX, else {_JOB_DEFAULTS.rank}).",
    )
    world_size: int = field_from(
        JobSpec,
        "world_size",
        default_factory=_world_size,
        description=f"Number of trainers (default: $WORLD_SIZE, else {_JOB_DEFAULTS.world_size}).",
    )
    local_rank: int = Field(
        default_factory=_local_rank,
        description="Rank on this host (default: $LOCAL_RANK, else 0): picks the GPU when --device is plain cuda, "
        "and offsets --metrics-port.",
    )
    dist_backend: Literal["", "nccl", "gloo"] = Field(
        default="", description='torch.distributed backend with world_size > 1: "" nccl on a CUDA device, else gloo.'
    )
    connect_timeout_s: float = Field(
        default=60.0,
        gt=0,
        description="Seconds to keep trying to reach the loader (or, embedded, the graph-stores and sampler) before "
        "exiting with status 2.",
    )
    metrics_host: str = Field(default="127.0.0.1", description="Address of the trainer's Prometheus /metrics endpoint.")
    metrics_port: int = Field(
        default=8081,
        ge=0,
        le=65535,
        description="Prometheus /metrics port of local rank 0 (local rank r serves on port + r); 0 disables it.",
    )
    job_id: str = field_from(JobSpec, "job_id")
    checkpoint: Path | None = Field(default=None, description="Checkpoint file; resumed from when it exists.")
    checkpoint_every: int = Field(default=1, description="Steps between checkpoints.")
    device: str = Field(default="cpu", description="Torch device of the model and minibatches, e.g. cuda:0.")
    shm_dir: str = Field(
        default="/dev/shm",
        description="Directory offered to the loader for minibatch tensors when it shares it (same host, same "
        'mount); "" for inline gRPC only.',
    )
    feature_wire_dtype: Literal["", "float16", "bfloat16"] = field_from(JobSpec, "feature_wire_dtype")
    tls_ca: str = Field(default="", description="CA to verify the loader / graph-stores / samplers with: TLS to them.")
    tls_client_cert: str = Field(default="", description="PEM certificate to present (mutual TLS).")
    tls_client_key: str = Field(default="", description="PEM private key of --tls-client-cert.")
    token_file: str = Field(default="", description="File whose first line is the bearer token sent with every call.")
    progress: bool = Field(
        default=True, description="Report progress inside an epoch (a live line on a terminal, else a line every 10 s)."
    )
    stop_after_steps: int | None = Field(
        default=None, description="Testing aid: exit after this many steps in this process."
    )

    @model_validator(mode="after")
    def _eval_layers(self) -> TrainConfig:
        """Evaluation samples as many layers as the model has: -1 each unless given, and refused
        when given for another depth (the model would return its hidden layer, not logits)."""
        if not self.eval_fanouts:
            self.eval_fanouts = [-1] * len(self.fanouts)
        elif len(self.eval_fanouts) != len(self.fanouts):
            raise ValueError(
                f"eval_fanouts has {len(self.eval_fanouts)} layers but fanouts (the model's depth) has "
                f"{len(self.fanouts)}: {self.eval_fanouts} vs {self.fanouts}"
            )
        return self

    @model_validator(mode="after")
    def _server_embeddings(self) -> TrainConfig:
        """Server-side embeddings are rgcn's, and need the graph-stores' addresses."""
        if self.embeddings == "server" and (self.model != "rgcn" or not self.graph_stores):
            raise ValueError("--embeddings server needs --model rgcn and --graph-stores (the tables live there)")
        return self

    @property
    def torch_device(self) -> str:
        """:attr:`device`, with plain ``cuda`` meaning this process's GPU (``cuda:<local_rank>``)."""
        return f"cuda:{self.local_rank}" if self.device == "cuda" else self.device

    @property
    def backend(self) -> str:
        """The torch.distributed backend: :attr:`dist_backend`, or nccl on a CUDA device, else gloo."""
        return self.dist_backend or ("nccl" if self.device.startswith("cuda") else "gloo")
