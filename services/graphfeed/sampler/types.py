"""The sampling interface the loader depends on, implemented in-process and over gRPC."""

from __future__ import annotations

from collections.abc import Sequence
from typing import Protocol

import numpy as np

from graphfeed.common.blocks import SampledBlocks
from graphfeed.graph_store.types import Exclusion, Fanout


class BlockSampler(Protocol):
    """Multi-hop sampling of a batch of seeds into DGL-style blocks.

    Implemented by :class:`graphfeed.sampler.core.MultiHopSampler` (in-process, over a
    PartitionSet) and :class:`graphfeed.sampler.client.SamplerClient` (the sampler service).
    Deterministic: the same arguments always give the same blocks.
    """

    def sample(
        self,
        seeds: np.ndarray,
        fanouts: Sequence[Fanout],
        replace: bool,
        job_seed: int,
        epoch: int,
        step: int,
        *,
        exclude: Exclusion | None = None,
    ) -> SampledBlocks:
        """Samples around ``seeds`` (unique int64 gids); ``fanouts`` in DGL order (input layer first),
        each layer an int for every edge type or a sequence of one per edge type; ``exclude``:
        edges left out of every hop (DGL's ``exclude_eids``; ``(dst, eids)`` pairs)."""
        ...
