"""Settings of a sampler server (env prefix ``GRAPHFEED_SAMPLER_``)."""

from __future__ import annotations

from pydantic import Field
from pydantic_settings import SettingsConfigDict

from graphfeed.common.config import PeerServiceSettings
from graphfeed.common.limits import MAX_FANOUT, SAMPLE_SEEDS_PER_CALL, SAMPLER_MAX_SEEDS_PER_REQUEST


class SamplerSettings(PeerServiceSettings):
    """A sampler talks to one graph-store per partition and holds no graph data itself."""

    model_config = SettingsConfigDict(env_prefix="GRAPHFEED_SAMPLER_", extra="forbid")

    graph_store_addresses: list[str] = Field(
        ...,
        min_length=1,
        description="host:port of every graph-store, one per partition, any order (env: a JSON list).",
    )
    max_seeds_per_request: int = Field(
        default=SAMPLER_MAX_SEEDS_PER_REQUEST,
        ge=1,
        description="Most seeds accepted in one SampleBlocks request (RESOURCE_EXHAUSTED beyond).",
    )
    max_fanout: int = Field(
        default=MAX_FANOUT, ge=0, description="Largest fanout accepted per layer besides -1 (all neighbors)."
    )
    max_ids_per_request: int = Field(
        default=SAMPLE_SEEDS_PER_CALL,
        ge=1,
        description="Most seeds sent to one graph-store in one call; a hop's larger share goes out in several "
        "concurrent calls (same sample). Keep it within the graph-stores' own max_ids_per_request.",
    )
    rpc_timeout_s: float = Field(default=30.0, gt=0, description="Deadline of each call to a graph-store, in seconds.")
