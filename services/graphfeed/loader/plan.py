"""The epoch plan: which seeds each rank trains on, in which order, in which minibatch.

Follows ``torch.utils.data.DistributedSampler``: one permutation per (job seed, epoch), the
same on every rank, padded by wrapping around to a multiple of ``world_size`` so that every
rank gets the same number of seeds (hence of steps: DDP ranks stay in lock-step), then rank
``r`` takes every ``world_size``-th seed starting at ``r``. Its seeds are then cut into
minibatches of ``batch_size`` (the last one partial unless ``drop_last``). The permutation is
computed step by step, never materialized (:class:`~graphfeed.common.seeds.IndexShuffle`).
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import TYPE_CHECKING

import numpy as np

from graphfeed.common.errors import InvalidArgument, NotFound, OutOfRange
from graphfeed.common.seeds import IndexShuffle, derive_seed

if TYPE_CHECKING:
    from graphfeed.graph_store.types import PartitionSet
    from graphfeed.loader.job import JobSpec


ALL_NODES = "*"
"""The split of every node of the graph (all-node inference: DGL's layer-wise ``inference``)."""


def split_ids(partitions: PartitionSet, name: str) -> np.ndarray:
    """The split's gids over all partitions, ascending (partitions own ascending ranges);
    :data:`ALL_NODES` is every node.

    Raises:
        NotFound: no partition has a split ``name``.
    """
    if name == ALL_NODES:
        ids = np.arange(partitions.info.num_nodes, dtype=np.int64)
        ids.setflags(write=False)
        return ids
    parts = [partitions.get_split(p, name) for p in range(partitions.num_partitions)]
    if any(x is None for x in parts):
        raise NotFound(f"split {name!r} does not exist")
    ids = np.concatenate([np.asarray(x, dtype=np.int64) for x in parts])
    ids.setflags(write=False)
    return ids


@dataclass(frozen=True)
class EpochPlan:
    """One rank's seeds for one epoch, cut into minibatches. Nothing is materialized: the
    seeds of a step are computed when asked for (:class:`~graphfeed.common.seeds.IndexShuffle`),
    so a plan over any number of seeds is built at once and holds only the split.

    Attributes:
        epoch: zero-based epoch.
        rank: this rank, in ``[0, world_size)``.
        world_size: number of ranks of the job.
        batch_size: seeds per minibatch.
        drop_last: whether the last partial minibatch is dropped.
        split: the split's gids, or an int ``n`` for the row numbers ``[0, n)`` (an edge split).
        order: the epoch's permutation of the split's positions; None keeps the split's order.
    """

    epoch: int
    rank: int
    world_size: int
    batch_size: int
    drop_last: bool
    split: np.ndarray | int
    order: IndexShuffle | None

    @classmethod
    def build(
        cls,
        split_ids: np.ndarray | int,
        *,
        job_seed: int,
        epoch: int,
        rank: int,
        world_size: int,
        batch_size: int,
        shuffle: bool,
        drop_last: bool,
    ) -> EpochPlan:
        """Plans one epoch for one rank.

        Args:
            split_ids: the split's gids (int64, sorted ascending, unique), or ``n`` for ``[0, n)``.
            job_seed: seed of the job; with ``epoch`` it fixes the permutation.
            epoch: zero-based epoch.
            rank: this trainer's rank in ``[0, world_size)``.
            world_size: number of trainers (>= 1).
            batch_size: seeds per minibatch (>= 1).
            shuffle: permute the split (the same permutation on every rank); else keep its order.
            drop_last: drop the last partial minibatch of this rank.

        Raises:
            InvalidArgument: bad batch size, world size or rank, or an empty split.
        """
        if batch_size < 1:
            raise InvalidArgument(f"batch_size must be >= 1, got {batch_size}")
        if world_size < 1:
            raise InvalidArgument(f"world_size must be >= 1, got {world_size}")
        if not 0 <= rank < world_size:
            raise InvalidArgument(f"rank must be in [0, world_size={world_size}), got {rank}")
        split = split_ids if isinstance(split_ids, int) else np.asarray(split_ids, dtype=np.int64)
        n = split if isinstance(split, int) else split.size
        if n == 0:
            raise InvalidArgument("the split has no nodes: nothing to train on")
        order = IndexShuffle(n, derive_seed(job_seed, "plan", epoch)) if shuffle else None
        return cls(epoch, rank, world_size, batch_size, drop_last, split, order)

    @property
    def split_size(self) -> int:
        return self.split if isinstance(self.split, int) else self.split.size

    @property
    def num_rank_seeds(self) -> int:
        """Seeds of this rank before batching: the split padded to a multiple of world_size, split evenly."""
        return -(-self.split_size // self.world_size)

    @property
    def rank_seeds(self) -> np.ndarray:
        """This rank's seeds (gids, int64) in training order, before batching (materialized)."""
        return self._seeds_at(0, self.num_rank_seeds)

    def _seeds_at(self, begin: int, end: int) -> np.ndarray:
        """This rank's seeds ``[begin, end)``. Its k-th is position ``rank + k * world_size`` of
        the padded order, which holds ``order[p % n]``: the wrap-around padding of
        DistributedSampler. No id repeats within one rank (the sampler needs unique seeds): two
        copies sit a multiple of n apart, which is a multiple of world_size only if there is no
        padding at all, or when n < world_size and every rank holds one seed."""
        n = self.split_size
        positions = self.rank + np.arange(begin, end, dtype=np.int64) * self.world_size
        if self.num_rank_seeds * self.world_size > n:  # only padded positions wrap
            positions %= n
        at = positions if self.order is None else self.order(positions)
        return at if isinstance(self.split, int) else self.split[at]

    @classmethod
    def for_job(cls, split: np.ndarray | int, job: JobSpec, epoch: int) -> EpochPlan:
        """The plan of ``job``'s rank for ``epoch`` over the split's gids ``split`` (an int n:
        ``[0, n)``): what the loader streams and ``graphfeed pack`` packs (one place, so both
        plan alike)."""
        return cls.build(
            split,
            job_seed=job.job_seed,
            epoch=epoch,
            rank=job.rank,
            world_size=job.world_size,
            batch_size=job.batch_size,
            shuffle=job.shuffle,
            drop_last=job.drop_last,
        )

    @property
    def num_steps(self) -> int:
        """Minibatches in this epoch for this rank (the same on every rank)."""
        n = self.num_rank_seeds
        return n // self.batch_size if self.drop_last else -(-n // self.batch_size)

    @property
    def num_seeds(self) -> int:
        """Seeds this rank trains on this epoch: padding included, dropped tail excluded."""
        return min(self.num_rank_seeds, self.num_steps * self.batch_size)

    def seeds(self, step: int) -> np.ndarray:
        """The seeds (unique gids, int64) of minibatch ``step``.

        Raises:
            OutOfRange: ``step`` is not in ``[0, num_steps)``.
        """
        if not 0 <= step < self.num_steps:
            raise OutOfRange(f"step {step} is outside epoch {self.epoch} of {self.num_steps} steps")
        return self._seeds_at(step * self.batch_size, min((step + 1) * self.batch_size, self.num_rank_seeds))
