"""JobSpec.validate: every size a request carries is bounded, the error naming field, value and limit."""

from __future__ import annotations

from typing import Any

import pytest

from graphfeed.common.errors import InvalidArgument
from graphfeed.common.limits import MAX_BATCH_SIZE, MAX_LAYERS, MAX_WORLD_SIZE
from graphfeed.loader.job import JobSpec


def spec(**changes: Any) -> JobSpec:
    args: dict[str, Any] = dict(job_id="j", job_seed=1, split="train", batch_size=8, fanouts=(3, 2))
    args.update(changes)
    return JobSpec(**args)


@pytest.mark.parametrize(
    "changes",
    [
        dict(batch_size=1),
        dict(batch_size=MAX_BATCH_SIZE),
        dict(world_size=MAX_WORLD_SIZE, rank=MAX_WORLD_SIZE - 1),
        dict(fanouts=(-1,) * MAX_LAYERS),
        dict(fanouts=(0, 10_000)),  # each fanout's upper bound is the sampler's
    ],
)
def test_sizes_at_their_limits_are_valid(changes: dict[str, Any]) -> None:
    spec(**changes).validate()


@pytest.mark.parametrize(
    "changes, match",
    [
        (dict(world_size=2**28), f"world_size must be <= {MAX_WORLD_SIZE}, got {2**28}"),
        (dict(world_size=2**31), f"world_size must be <= {MAX_WORLD_SIZE}, got {2**31}"),
        (dict(world_size=MAX_WORLD_SIZE + 1), f"world_size must be <= {MAX_WORLD_SIZE}, got {MAX_WORLD_SIZE + 1}"),
        (dict(world_size=0), "world_size must be >= 1, got 0"),
        (dict(batch_size=MAX_BATCH_SIZE + 1), f"batch_size must be <= {MAX_BATCH_SIZE}, got {MAX_BATCH_SIZE + 1}"),
        (dict(batch_size=2**32 - 1), f"batch_size must be <= {MAX_BATCH_SIZE}, got {2**32 - 1}"),
        (dict(batch_size=0), "batch_size must be >= 1, got 0"),
        (
            dict(fanouts=(2,) * (MAX_LAYERS + 1)),
            f"fanouts has {MAX_LAYERS + 1} layers, more than the limit of {MAX_LAYERS}",
        ),
        (dict(fanouts=()), "fanouts must not be empty"),
        (dict(fanouts=(2, -3)), r"fanout must be -1 \(all neighbors\) or >= 0, got \[2, -3\]"),
        (dict(rank=4, world_size=4), r"rank must be in \[0, world_size=4\), got 4"),
        (dict(rank=-1), "rank must be in"),
        (dict(job_seed=2**64), "job_seed must be a uint64"),
    ],
)
def test_out_of_range_sizes_are_invalid_arguments(changes: dict[str, Any], match: str) -> None:
    with pytest.raises(InvalidArgument, match=match):
        spec(**changes).validate()
