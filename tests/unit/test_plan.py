"""EpochPlan: deterministic shuffling, rank split with DistributedSampler padding, batching."""

from __future__ import annotations

from typing import Any

import numpy as np
import pytest

from graphfeed.common.errors import InvalidArgument, OutOfRange
from graphfeed.common.seeds import IndexShuffle
from graphfeed.loader.plan import EpochPlan

IDS = np.arange(10, 110, dtype=np.int64)  # 100 sorted gids


def plan(ids: np.ndarray | int = IDS, **kw: Any) -> EpochPlan:
    args: dict[str, Any] = dict(job_seed=7, epoch=0, rank=0, world_size=1, batch_size=8, shuffle=True, drop_last=False)
    args.update(kw)
    return EpochPlan.build(ids, **args)


def all_seeds(p: EpochPlan) -> np.ndarray:
    return np.concatenate([p.seeds(s) for s in range(p.num_steps)])


def test_same_seed_and_epoch_give_the_same_order() -> None:
    assert np.array_equal(all_seeds(plan()), all_seeds(plan()))


def test_order_differs_across_epochs_and_seeds_but_not_without_shuffle() -> None:
    e0, e1 = all_seeds(plan(epoch=0)), all_seeds(plan(epoch=1))
    assert not np.array_equal(e0, e1)
    assert not np.array_equal(e0, all_seeds(plan(job_seed=8)))
    assert np.array_equal(np.sort(e0), IDS) and np.array_equal(np.sort(e1), IDS)
    assert np.array_equal(all_seeds(plan(shuffle=False)), IDS)
    assert np.array_equal(all_seeds(plan(shuffle=False, epoch=3)), IDS)


def test_ranks_partition_the_split_exactly_when_divisible() -> None:
    plans = [plan(rank=r, world_size=4, batch_size=7) for r in range(4)]
    assert {p.num_steps for p in plans} == {4}  # 25 seeds per rank -> 7+7+7+4
    seeds = np.concatenate([all_seeds(p) for p in plans])
    assert len(seeds) == len(IDS)
    assert np.array_equal(np.sort(seeds), IDS)
    assert all(p.num_seeds == 25 for p in plans)


def test_ranks_pad_by_wrapping_when_not_divisible() -> None:
    ids = np.arange(10, dtype=np.int64)
    plans = [plan(ids, rank=r, world_size=4, batch_size=2) for r in range(4)]
    per_rank = [all_seeds(p) for p in plans]
    assert [len(s) for s in per_rank] == [3, 3, 3, 3]  # 10 padded to 12
    assert {p.num_steps for p in plans} == {2}
    seeds = np.concatenate(per_rank)
    assert set(seeds.tolist()) == set(range(10))
    counts = np.bincount(seeds, minlength=10)
    assert counts.sum() == 12 and counts.max() == 2
    for s in per_rank:  # the sampler needs unique seeds within a rank
        assert len(np.unique(s)) == len(s)


def test_fewer_ids_than_ranks_gives_every_rank_one_seed() -> None:
    ids = np.array([3, 5], dtype=np.int64)
    plans = [plan(ids, rank=r, world_size=5) for r in range(5)]
    assert [p.num_steps for p in plans] == [1] * 5
    assert set(np.concatenate([all_seeds(p) for p in plans]).tolist()) == {3, 5}


def test_memory_does_not_grow_with_world_size() -> None:
    # Padding every rank's share would hold 2**31 ids (16 GiB); one rank's share is one id,
    # position rank % 100 of the order (2_147_483_600 is a multiple of 100).
    plans = [plan(rank=r, world_size=2**31) for r in (0, 99, 100, 2_147_483_600)]
    assert [len(p.rank_seeds) for p in plans] == [1, 1, 1, 1]
    assert plans[0].rank_seeds[0] == plans[2].rank_seeds[0] == plans[3].rank_seeds[0] != plans[1].rank_seeds[0]


def test_batches_are_full_except_the_last() -> None:
    p = plan(batch_size=30)
    assert p.num_steps == 4
    assert [len(p.seeds(s)) for s in range(4)] == [30, 30, 30, 10]
    assert p.num_seeds == 100


def test_drop_last_drops_the_partial_batch() -> None:
    p = plan(batch_size=30, drop_last=True)
    assert p.num_steps == 3
    assert [len(p.seeds(s)) for s in range(3)] == [30, 30, 30]
    assert p.num_seeds == 90
    assert plan(batch_size=200, drop_last=True).num_steps == 0


@pytest.mark.parametrize(
    "kw, match",
    [
        (dict(batch_size=0), "batch_size"),
        (dict(world_size=0), "world_size"),
        (dict(rank=2, world_size=2), "rank"),
        (dict(rank=-1), "rank"),
        (dict(ids=np.array([], dtype=np.int64)), "no nodes"),
    ],
)
def test_bad_arguments_are_invalid(kw: dict, match: str) -> None:
    ids = kw.pop("ids", IDS)
    with pytest.raises(InvalidArgument, match=match):
        plan(ids, **kw)


def test_step_outside_the_epoch_is_out_of_range() -> None:
    p = plan(batch_size=30)
    with pytest.raises(OutOfRange):
        p.seeds(4)
    with pytest.raises(OutOfRange):
        p.seeds(-1)


@pytest.mark.parametrize("n", [1, 2, 3, 5, 16, 17, 100, 1023, 1024, 1025, 65_537])
def test_index_shuffle_is_a_seeded_bijection(n: int) -> None:
    perms = [IndexShuffle(n, seed)(np.arange(n)) for seed in (0, 1)]
    for p in perms:
        assert p.dtype == np.int64 and np.array_equal(np.sort(p), np.arange(n))
    assert np.array_equal(perms[0], IndexShuffle(n, 0)(np.arange(n)))
    if n > 5:
        assert not np.array_equal(perms[0], perms[1]) and not np.array_equal(perms[0], np.arange(n))
    some = np.array([n - 1, 0, n // 2], dtype=np.int64)  # any positions, in any order, alone
    assert np.array_equal(IndexShuffle(n, 0)(some), perms[0][some])


def test_index_shuffle_sends_each_position_anywhere_alike() -> None:
    # Over 4000 seeds each of 8 positions lands on each of 8 indices 500 times in expectation;
    # a fixed set of seeds, so this is one deterministic draw (binomial sd ~21, bounds at ~6 sd).
    n, counts = 8, np.zeros((8, 8), dtype=np.int64)
    for seed in range(4000):
        counts[np.arange(n), IndexShuffle(n, seed)(np.arange(n))] += 1
    assert counts.min() > 375 and counts.max() < 625


def test_a_plan_over_a_billion_rows_is_built_at_once_and_read_step_by_step() -> None:
    p = plan(10**12, batch_size=1024, rank=3, world_size=8)
    assert p.num_steps == -(-(10**12 // 8) // 1024)
    first, last = p.seeds(0), p.seeds(p.num_steps - 1)
    assert len(first) == 1024 and len(np.unique(first)) == 1024 and ((first >= 0) & (first < 10**12)).all()
    assert np.array_equal(first, plan(10**12, batch_size=1024, rank=3, world_size=8).seeds(0))
    assert len(last) == 10**12 // 8 - (p.num_steps - 1) * 1024
