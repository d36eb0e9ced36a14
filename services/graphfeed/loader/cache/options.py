"""The feature cache's choices, declared once: the policy names and the tuning of the adaptive policies.

:class:`CacheOptions` is what the cache policies read; the loader's settings expose the same
fields as ``GRAPHFEED_LOADER_*`` variables and ``--flags`` (``massivegnn_alpha`` for ``alpha``,
...), taking their types, defaults, bounds and help from here.
"""

from __future__ import annotations

import typing
from typing import Any, Literal

from pydantic import Field, ValidationError, ValidatorFunctionWrapHandler, model_validator
from pydantic.dataclasses import dataclass

from graphfeed.common.errors import InvalidArgument

__all__ = ["POLICIES", "CacheOptions", "CachePolicyName", "InitialFill", "check_policy"]

CachePolicyName = Literal["none", "static_degree", "lru", "massivegnn", "lookahead"]
"""none (never caches), static_degree (PaGraph), lru, massivegnn (score-decay eviction + periodic
prefetch) or lookahead (Belady's rule over the sampled look-ahead window)."""

POLICIES: tuple[str, ...] = typing.get_args(CachePolicyName)


def check_policy(name: str) -> None:
    """Raises InvalidArgument unless ``name`` is one of :data:`POLICIES`."""
    if name not in POLICIES:
        raise InvalidArgument(f"unknown cache policy {name!r}; expected one of {', '.join(POLICIES)}")


InitialFill = Literal["degree", "random"]


@dataclass(frozen=True)
class CacheOptions:
    """Tuning of the adaptive policies; each field's description says which policy reads it.

    Raises:
        InvalidArgument: on construction, naming the bad field.
    """

    prefetch_fraction: float = Field(
        default=0.25,
        ge=0.0,
        le=1.0,
        description="massivegnn policy: initial fill, as a fraction of all nodes (capped at the capacity).",
    )
    period_steps: int = Field(
        default=32, ge=1, description="massivegnn policy: minibatches between eviction/prefetch rounds."
    )
    alpha: float = Field(
        default=0.005,
        gt=0.0,
        lt=1.0,
        description="massivegnn policy: per-minibatch score decay of a buffered node that is not hit.",
    )
    initial_fill: InitialFill = Field(
        default="degree", description="massivegnn policy: initial nodes by highest in-degree or at random."
    )
    seed: int = Field(default=0, description="massivegnn policy: seed of the random initial fill.")
    lookahead_prefetch_steps: int = Field(
        default=1,
        ge=0,
        description="lookahead policy: prefetch the misses of the sampled steps 2 .. this + 1 ahead (0: off).",
    )

    @model_validator(mode="wrap")
    @classmethod
    def _invalid_argument(cls, data: Any, handler: ValidatorFunctionWrapHandler) -> Any:
        # The loader's error for bad input: InvalidArgument is no ValueError, so pydantic lets it through.
        try:
            return handler(data)
        except ValidationError as err:
            first = err.errors()[0]
            name = ".".join(str(part) for part in first["loc"])
            raise InvalidArgument(f"{name}: {first['msg']}, got {first['input']!r}") from None
