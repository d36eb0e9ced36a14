"""A trainer's job as the loader sees it (:class:`JobSpec`, loader.proto's JobSpec) and the
static facts the loader reports about it (:class:`JobInfo`, DescribeJobResponse).

Plain values with no gRPC and no loader machinery, so the trainer's data loaders can build
them without importing the loader.
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np

from graphfeed.common.errors import InvalidArgument
from graphfeed.common.limits import MAX_BATCH_SIZE, MAX_LAYERS, MAX_WORLD_SIZE

__all__ = ["FEATURE_WIRE_DTYPES", "JobInfo", "JobSpec"]

FEATURE_WIRE_DTYPES = ("float16", "bfloat16")
"""Reduced-precision element types a job may ask its features to travel in (besides "", the
stored type); see :mod:`graphfeed.loader.wire`."""


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
    feature_wire_dtype: str = ""  # "" sends the stored dtype; else one of FEATURE_WIRE_DTYPES

    def validate(self) -> None:
        """Checks what needs no graph, before anything is sized by these fields.

        Raises:
            InvalidArgument: naming the bad field, its value and the allowed range.
        """
        self._check_fanouts()
        _check_range("batch_size", self.batch_size, 1, MAX_BATCH_SIZE)
        _check_range("world_size", self.world_size, 1, MAX_WORLD_SIZE)
        if not 0 <= self.rank < self.world_size:
            raise InvalidArgument(f"rank must be in [0, world_size={self.world_size}), got {self.rank}")
        if not 0 <= self.job_seed < 2**64:
            raise InvalidArgument(f"job_seed must be a uint64, got {self.job_seed}")
        if not self.split:
            raise InvalidArgument("split must be named (train, val or test)")
        if not self.feature_name:
            raise InvalidArgument("feature_name must not be empty")
        if self.feature_wire_dtype not in ("", *FEATURE_WIRE_DTYPES):
            raise InvalidArgument(
                "feature_wire_dtype must be '' (the stored dtype), 'float16' or 'bfloat16', "
                f"got {self.feature_wire_dtype!r}"
            )

    def _check_fanouts(self) -> None:
        # The upper bound of each fanout is the sampler's (a setting of the sampler service,
        # unknown here); the sampler answers INVALID_ARGUMENT for one above it.
        if not self.fanouts:
            raise InvalidArgument("fanouts must not be empty (one entry per layer)")
        if len(self.fanouts) > MAX_LAYERS:
            raise InvalidArgument(f"fanouts has {len(self.fanouts)} layers, more than the limit of {MAX_LAYERS}")
        bad = [f for f in self.fanouts if f < -1]
        if bad:
            raise InvalidArgument(f"each fanout must be -1 (all neighbors) or >= 0, got {list(self.fanouts)}")


def _check_range(field: str, value: int, low: int, high: int) -> None:
    """:class:`InvalidArgument` naming ``field`` unless ``low <= value <= high``."""
    if value < low:
        raise InvalidArgument(f"{field} must be >= {low}, got {value}")
    if value > high:
        raise InvalidArgument(f"{field} must be <= {high}, got {value}")


@dataclass(frozen=True)
class JobInfo:
    """Static facts about a job for one rank (DescribeJobResponse)."""

    steps_per_epoch: int
    seeds_per_epoch: int
    feature_row_shape: tuple[int, ...]
    feature_dtype: np.dtype
    num_classes: int
    num_nodes: int
