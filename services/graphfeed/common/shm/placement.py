"""The shared-memory :class:`~graphfeed.common.placement.Placement`: a segment per minibatch."""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass, replace
from pathlib import Path

import numpy as np

from graphfeed.common.placement import Placed, Placement, SharedRegion
from graphfeed.common.shm.pool import SegmentPool
from graphfeed.common.shm.quota import ShmQuota
from graphfeed.common.shm.registry import SegmentRegistry
from graphfeed.common.shm.segment import Arena, Segment


@dataclass(frozen=True)
class ShmPlaced(Placed):
    """Features in ``segment`` (at offset 0), which the consumer maps."""

    segment: Segment | None = None

    def close(self) -> None:
        if self.segment is not None:
            self.segment.close()  # the array keeps the mapping alive


@dataclass
class ShmPlacement(Placement):
    """Each minibatch's features in a new segment of ``directory`` for the consumer ``client``,
    which same-host graph-stores write their rows into directly. When ``quota`` refuses the
    segment (the consumer holds its share unclaimed, or the directory is nearly full), the
    features go to ``fallback`` and the minibatch travels by value (``declined``)."""

    directory: Path
    registry: SegmentRegistry
    owner: object
    quota: ShmQuota
    client: str
    fallback: Placement
    pool: SegmentPool | None = None  # reused files (pages already allocated); None: a new file each

    def place(self, shape: Sequence[int], dtype: np.dtype) -> Placed:
        arena = Arena(self.directory, self.registry, self.owner, self.pool, self.client)
        arena.reserve(tuple(shape), dtype)  # at offset 0
        segment = self.quota.create(arena)
        if segment is None:
            return replace(self.fallback.place(shape, dtype), declined=True)
        array = segment.array(0, tuple(shape), dtype)
        return ShmPlaced(array, SharedRegion(segment.name, 0), segment=segment)

    def abandon(self) -> None:
        # Segments made after the consumer's own cleanup ran go now (pooled files back to the
        # pool), not after the TTL.
        self.registry.drop(self.owner)
