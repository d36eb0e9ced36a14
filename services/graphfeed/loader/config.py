"""Settings of a loader server (env prefix ``GRAPHFEED_LOADER_``)."""

from __future__ import annotations

import copy
from typing import Any

from pydantic import Field
from pydantic.fields import FieldInfo
from pydantic_settings import SettingsConfigDict

from graphfeed.common.config import PeerServiceSettings
from graphfeed.loader.cache.options import CacheOptions, CachePolicyName, InitialFill

STREAMLESS_WORKERS = 4  # handler threads minibatch streams never take (DescribeJob, probes)


def max_streams(max_workers: int) -> int:
    """Minibatch streams a loader with ``max_workers`` handler threads keeps open at once: all
    but :data:`STREAMLESS_WORKERS` of them, or every one in a pool too small to keep any back."""
    return max_workers - STREAMLESS_WORKERS if max_workers > STREAMLESS_WORKERS else max_workers


CACHE_OPTION_SETTINGS = {
    "lookahead_prefetch_steps": "lookahead_prefetch_steps",
    "massivegnn_prefetch_fraction": "prefetch_fraction",
    "massivegnn_period_steps": "period_steps",
    "massivegnn_alpha": "alpha",
    "massivegnn_initial_fill": "initial_fill",
}
"""Setting -> :class:`CacheOptions` field it sets; the settings name the policy that reads them."""


def _option(setting: str) -> Any:
    """The :class:`CacheOptions` field behind ``setting``: its default, bounds and description."""
    # Set by @pydantic.dataclasses.dataclass; mypy's pydantic stubs do not declare it.
    fields: dict[str, FieldInfo] = CacheOptions.__pydantic_fields__  # type: ignore[attr-defined]
    return copy.copy(fields[CACHE_OPTION_SETTINGS[setting]])


class LoaderSettings(PeerServiceSettings):
    """A loader reads features from every graph-store and sampled blocks from one sampler."""

    model_config = SettingsConfigDict(env_prefix="GRAPHFEED_LOADER_", extra="forbid")

    graph_store_addresses: list[str] = Field(
        ...,
        min_length=1,
        description="host:port of every graph-store, one per partition, any order (env: a JSON list).",
    )
    sampler_address: str = Field(..., description="host:port of the sampler service.")
    cache_policy: CachePolicyName = Field(
        default="static_degree",
        description="Feature cache policy: none, static_degree (PaGraph), lru, massivegnn (score-decay eviction + "
        "periodic prefetch) or lookahead (Belady's rule over the sampled look-ahead window).",
    )
    cache_bytes: int = Field(
        default=64 << 20, ge=0, description="Host feature-cache budget per feature name, in bytes."
    )
    gpu_cache_bytes: int = Field(
        default=0,
        ge=0,
        description="GPU feature-cache tier per feature name, in bytes, in front of the host cache "
        "(0: none; ignored without a usable CUDA GPU and CuPy).",
    )
    lookahead_steps: int = Field(
        default=8,
        ge=1,
        description="Sampler calls kept in flight ahead of gathering, per stream; also the window the lookahead "
        "policy sees. Each sampled step waiting in the window holds its blocks (about 24 bytes per sampled edge).",
    )
    lookahead_prefetch_steps: int = _option("lookahead_prefetch_steps")
    massivegnn_prefetch_fraction: float = _option("massivegnn_prefetch_fraction")
    massivegnn_period_steps: int = _option("massivegnn_period_steps")
    massivegnn_alpha: float = _option("massivegnn_alpha")
    massivegnn_initial_fill: InitialFill = _option("massivegnn_initial_fill")
    max_inflight: int = Field(
        default=2, ge=1, description="Ready minibatches buffered per stream (backpressure beyond)."
    )
    max_workers: int = Field(
        default=64,
        ge=1,
        description="gRPC handler threads. An open minibatch stream holds one; at most max_workers - "
        f"{STREAMLESS_WORKERS} streams are open at once (all max_workers when it is {STREAMLESS_WORKERS} or "
        "fewer), so that DescribeJob is always answered.",
    )
    max_streams_per_client: int = Field(
        default=16,
        ge=1,
        description="Minibatch streams one client (a mutual-TLS identity, else one process offering shared memory, "
        "else one host) may hold open; more are refused with RESOURCE_EXHAUSTED.",
    )
    stream_stall_timeout_s: float = Field(
        default=300.0,
        ge=0,
        description="A minibatch stream whose client takes nothing (reads no message, claims no shared-memory "
        "segment) for this long is ended, freeing its thread, slot, buffered minibatches and segments; 0 never. "
        "Above the longest training step between two minibatches.",
    )
    sample_workers: int = Field(default=2, ge=1, description="Threads issuing sampler calls, shared by all streams.")
    pack_root: str = Field(
        default="",
        description="Directory where `graphfeed pack` wrote packed minibatch features; a stream whose job and epoch "
        "have packs there reads its cache misses from them before the graph-stores (empty: no pack tier).",
    )
    pack_read_threads: int = Field(default=4, ge=1, description="Preads in flight per pack read.")
    pack_direct_io: bool = Field(default=False, description="Read packs with O_DIRECT, bypassing the page cache.")
    pack_reuse: bool = Field(
        default=True,
        description="Serve an epoch that has no packs from its job's nearest packed epoch's packs (exact rows; those "
        "they lack come from the graph-stores).",
    )
    rpc_timeout_s: float = Field(
        default=30.0, gt=0, description="Deadline of each call to a graph-store or the sampler, in seconds."
    )

    def cache_options(self) -> CacheOptions:
        """The policy tuning these settings carry."""
        given = self.model_dump(include=set(CACHE_OPTION_SETTINGS))
        return CacheOptions(**{CACHE_OPTION_SETTINGS[name]: value for name, value in given.items()})
