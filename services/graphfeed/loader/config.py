"""Settings of a loader server (env prefix ``GRAPHFEED_LOADER_``)."""

from __future__ import annotations

from typing import Literal

from pydantic import Field
from pydantic_settings import SettingsConfigDict

from graphfeed.common.config import ServiceSettings
from graphfeed.loader.cache import CacheOptions


class LoaderSettings(ServiceSettings):
    """A loader reads features from every graph-store and sampled blocks from one sampler."""

    model_config = SettingsConfigDict(env_prefix="GRAPHFEED_LOADER_", extra="forbid")

    graph_store_addresses: list[str] = Field(
        ...,
        min_length=1,
        description="host:port of every graph-store, one per partition, any order (env: a JSON list).",
    )
    sampler_address: str = Field(..., description="host:port of the sampler service.")
    cache_policy: Literal["none", "static_degree", "lru", "massivegnn", "lookahead"] = Field(
        "static_degree",
        description="Feature cache policy: none, static_degree (PaGraph), lru, massivegnn (score-decay eviction + "
        "periodic prefetch) or lookahead (Belady's rule over the sampled look-ahead window).",
    )
    cache_bytes: int = Field(64 << 20, ge=0, description="Host feature-cache budget per feature name, in bytes.")
    gpu_cache_bytes: int = Field(
        0,
        ge=0,
        description="GPU feature-cache tier per feature name, in bytes, in front of the host cache "
        "(0: none; ignored without a usable CUDA GPU and CuPy).",
    )
    lookahead_steps: int = Field(
        8,
        ge=1,
        description="Sampler calls kept in flight ahead of gathering, per stream; also the window the lookahead "
        "policy sees. Each sampled step waiting in the window holds its blocks (about 24 bytes per sampled edge).",
    )
    lookahead_prefetch_steps: int = Field(
        1, ge=0, description="lookahead policy: prefetch the misses of the sampled steps 2 .. this + 1 ahead (0: off)."
    )
    massivegnn_prefetch_fraction: float = Field(
        0.25, ge=0.0, le=1.0, description="massivegnn policy: initial fill, as a fraction of all nodes (capped at the capacity)."
    )
    massivegnn_period_steps: int = Field(32, ge=1, description="massivegnn policy: minibatches between eviction/prefetch rounds.")
    massivegnn_alpha: float = Field(
        0.005, gt=0.0, lt=1.0, description="massivegnn policy: per-minibatch score decay of a buffered node that is not hit."
    )
    massivegnn_initial_fill: Literal["degree", "random"] = Field(
        "degree", description="massivegnn policy: initial nodes by highest in-degree or at random."
    )
    max_inflight: int = Field(2, ge=1, description="Ready minibatches buffered per stream (backpressure beyond).")
    sample_workers: int = Field(2, ge=1, description="Threads issuing sampler calls, shared by all streams.")
    rpc_timeout_s: float = Field(30.0, gt=0, description="Deadline of each call to a graph-store or the sampler, in seconds.")

    def cache_options(self) -> CacheOptions:
        """The policy tuning these settings carry."""
        return CacheOptions(
            prefetch_fraction=self.massivegnn_prefetch_fraction,
            period_steps=self.massivegnn_period_steps,
            alpha=self.massivegnn_alpha,
            initial_fill=self.massivegnn_initial_fill,
            lookahead_prefetch_steps=self.lookahead_prefetch_steps,
        )
