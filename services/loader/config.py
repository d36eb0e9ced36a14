"""Settings of a loader server (env prefix ``GRAPHFEED_LOADER_``)."""

from __future__ import annotations

from typing import Literal

from pydantic import Field
from pydantic_settings import SettingsConfigDict

from graphfeed.common.config import ServiceSettings


class LoaderSettings(ServiceSettings):
    """A loader reads features from every graph-store and sampled blocks from one sampler."""

    model_config = SettingsConfigDict(env_prefix="GRAPHFEED_LOADER_", extra="forbid")

    graph_store_addresses: list[str] = Field(
        ...,
        min_length=1,
        description="host:port of every graph-store, one per partition, any order (env: a JSON list).",
    )
    sampler_address: str = Field(..., description="host:port of the sampler service.")
    cache_policy: Literal["none", "static_degree", "lru"] = Field(
        "static_degree", description="Feature cache policy: none, static_degree (PaGraph) or lru."
    )
    cache_bytes: int = Field(64 << 20, ge=0, description="Host feature-cache budget per feature name, in bytes.")
    lookahead_steps: int = Field(4, ge=1, description="Sampler calls kept in flight ahead of gathering, per stream.")
    max_inflight: int = Field(2, ge=1, description="Ready minibatches buffered per stream (backpressure beyond).")
    sample_workers: int = Field(2, ge=1, description="Threads issuing sampler calls, shared by all streams.")
    rpc_timeout_s: float = Field(30.0, gt=0, description="Deadline of each call to a graph-store or the sampler, in seconds.")
