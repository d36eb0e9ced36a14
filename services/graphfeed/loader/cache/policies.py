"""Builds a cache policy by name: the one place that knows every policy.

Kept apart from :mod:`graphfeed.loader.cache.base` (the interface and the simple policies) because
:mod:`~graphfeed.loader.cache.massivegnn` and :mod:`~graphfeed.loader.cache.lookahead` build on that module.
"""

from __future__ import annotations

from collections.abc import Sequence

import numpy as np

from graphfeed.common.limits import FETCH_IDS_PER_CALL
from graphfeed.loader.cache.base import CachePolicy, LruCache, NoCache, StaticDegreeCache
from graphfeed.loader.cache.lookahead import LookaheadCache
from graphfeed.loader.cache.massivegnn import MassiveGnnCache
from graphfeed.loader.cache.options import CacheOptions, check_policy
from graphfeed.loader.cache.tiers import HostTier


def make_cache(
    policy: str,
    capacity_bytes: int,
    *,
    row_shape: Sequence[int],
    dtype: np.dtype | type,
    num_nodes: int,
    max_ids_per_request: int = FETCH_IDS_PER_CALL,
    options: CacheOptions | None = None,
) -> CachePolicy:
    """A cache of ``policy`` (one of :data:`~graphfeed.loader.cache.options.POLICIES`) over a host
    tier of ``capacity_bytes``.

    Raises:
        InvalidArgument: unknown policy or bad options.
    """
    check_policy(policy)
    options = options or CacheOptions()  # checked when it was made
    tier = HostTier(0 if policy == "none" else capacity_bytes, row_shape, dtype, num_nodes)
    if policy == "none":
        return NoCache(tier)
    if policy == "static_degree":
        return StaticDegreeCache(tier, max_ids_per_request)
    if policy == "lru":
        return LruCache(tier)
    if policy == "massivegnn":
        return MassiveGnnCache(tier, options, max_ids_per_request)
    return LookaheadCache(tier, options)
