"""A trainer's job as the loader sees it (:class:`JobSpec`, loader.proto's JobSpec) and the
static facts the loader reports about it (:class:`JobInfo`, DescribeJobResponse).

Plain values with no gRPC and no loader machinery, so the trainer's data loaders can build
them without importing the loader.
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np

from graphfeed.common.errors import InvalidArgument

__all__ = ["JobInfo", "JobSpec"]


@dataclass(frozen=True, kw_only=True)
class JobSpec:
    """A trainer's job, as loader.proto's JobSpec (see there for each field)."""

    job_id: str = ""
    job_seed: int = 0
    split: str = "train"
    batch_size: int
    fanouts: tuple[int, ...]
    replace: bool = False
    shuffle: bool = False
    drop_last: bool = False
    rank: int = 0
    world_size: int = 1
    feature_name: str = "feat"
    label_name: str = "label"  # "" attaches no labels

    def validate(self) -> None:
        """Checks what needs no graph.

        Raises:
            InvalidArgument: naming the bad field.
        """
        if not self.fanouts:
            raise InvalidArgument("fanouts must not be empty (one entry per layer)")
        bad = [f for f in self.fanouts if f < -1]
        if bad:
            raise InvalidArgument(f"each fanout must be -1 (all neighbors) or >= 0, got {list(self.fanouts)}")
        if self.batch_size < 1:
            raise InvalidArgument(f"batch_size must be >= 1, got {self.batch_size}")
        if self.world_size < 1:
            raise InvalidArgument(f"world_size must be >= 1, got {self.world_size}")
        if not 0 <= self.rank < self.world_size:
            raise InvalidArgument(f"rank must be in [0, world_size={self.world_size}), got {self.rank}")
        if not 0 <= self.job_seed < 2**64:
            raise InvalidArgument(f"job_seed must be a uint64, got {self.job_seed}")
        if not self.split:
            raise InvalidArgument("split must be named (train, val or test)")
        if not self.feature_name:
            raise InvalidArgument("feature_name must not be empty")


@dataclass(frozen=True)
class JobInfo:
    """Static facts about a job for one rank (DescribeJobResponse)."""

    steps_per_epoch: int
    seeds_per_epoch: int
    feature_row_shape: tuple[int, ...]
    feature_dtype: np.dtype
    num_classes: int
    num_nodes: int
