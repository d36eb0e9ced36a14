"""Multi-hop neighbor sampling across graph-store partitions into DGL blocks.

Each hop fans out over the owners of the frontier
(:func:`graphfeed.graph_store.fanout.fan_out_requests`: one ``sample_neighbors`` call per partition
and chunk, all started before any is waited on) and merges the answers back into frontier
order while compacting them (:func:`graphfeed.sampler.compact.compact_hop`, one compiled
pass). The block's src nodes are the next hop's frontier.

Every random choice is seeded by ``derive_seed(job_seed, epoch, step, hop, partition)``, and
the merge is a pure function of the answers, so the same arguments give byte-identical blocks.

Edges to exclude (DGL's ``exclude_eids``: for link prediction a minibatch's seed edges and their
reverses) are left out at every hop, as DGL does: each partition is sent the pairs whose dst it
owns, and its graph-store drops them before selection.
"""

from __future__ import annotations

import operator
from collections.abc import Callable, Sequence
from concurrent.futures import Future

import numpy as np

from graphfeed.common.blocks import Block, SampledBlocks
from graphfeed.common.errors import GraphfeedError, InvalidArgument, NotFound, ResourceExhausted
from graphfeed.common.limits import MAX_FANOUT, SAMPLE_SEEDS_PER_CALL, SAMPLER_MAX_SEEDS_PER_REQUEST
from graphfeed.common.schema import etype_name
from graphfeed.common.seeds import derive_seed
from graphfeed.graph_store.fanout import Chunk, fan_out_requests
from graphfeed.graph_store.requests import check_exclusion
from graphfeed.graph_store.types import Exclusion, Fanout, PartitionSet, SampledNeighbors
from graphfeed.sampler.compact import SlotTables, compact_hop

_SHOW_IDS = 5  # offending ids quoted in an error message


class MultiHopSampler:
    """In-process :class:`~graphfeed.sampler.types.BlockSampler` over a partition set.

    Stateless apart from its configuration, hence safe to call from many threads at once.

    Args:
        partitions: every partition of the graph (remote or in-process).
        max_seeds: most seeds one call may ask for (ResourceExhausted above).
        max_fanout: largest allowed fanout; -1 (all neighbors) is always allowed.
        max_ids_per_request: most seeds sent to a graph-store in one call; a larger share of a
            hop's frontier goes out in several calls at once (each saying where its seeds start,
            so the sample is the same as one call's).
    """

    def __init__(
        self,
        partitions: PartitionSet,
        *,
        max_seeds: int = SAMPLER_MAX_SEEDS_PER_REQUEST,
        max_fanout: int = MAX_FANOUT,
        max_ids_per_request: int = SAMPLE_SEEDS_PER_CALL,
    ) -> None:
        if max_ids_per_request < 1:
            raise InvalidArgument(f"max_ids_per_request must be >= 1, got {max_ids_per_request}")
        self.partitions = partitions
        self.max_seeds = max_seeds
        self.max_fanout = max_fanout
        self.max_ids_per_request = max_ids_per_request
        self.num_nodes = int(partitions.info.num_nodes)
        self.etypes = partitions.info.types.etypes
        self._slots = SlotTables(self.num_nodes)

    def sample(
        self,
        seeds: np.ndarray,
        fanouts: Sequence[Fanout],
        replace: bool,
        job_seed: int,
        epoch: int,
        step: int,
        alloc: Callable[[int, int], tuple[np.ndarray, np.ndarray, np.ndarray, np.ndarray]] | None = None,
        exclude: Exclusion | None = None,
        narrow: bool = False,
    ) -> SampledBlocks:
        """Samples the ``len(fanouts)``-hop neighborhood of ``seeds``.

        Args:
            seeds: unique global ids, int64 [N], N >= 1.
            fanouts: neighbors per layer in DGL order: ``fanouts[0]`` is the input layer, the
                last entry is sampled first, around the seeds. A layer is an int for every edge
                type, or a sequence of one per edge type (``partitions.info.types.etypes`` order,
                DGL's ``{etype: k}``); -1 takes all neighbors (of that edge type).
            replace: sample with replacement.
            job_seed: seed of the job; with ``epoch`` and ``step`` it seeds every choice.
            epoch: zero-based epoch.
            step: zero-based minibatch index within the epoch.
            alloc: where the last hop (the input layer: the largest block, and ``input_nodes``)
                is written; see :func:`~graphfeed.sampler.compact.compact_hop`. A server passes
                one that reserves the arrays in its response's shared-memory segment.
            exclude: edges no hop samples (DGL's ``exclude_eids``, left out before selection, so
                a node still gets up to its fanout of its other edges): int64 ``(dst, eids)``
                pairs of equal length, edge ``eids[i]`` an in-edge of node ``dst[i]``.
            narrow: the blocks' edge arrays int32 where their values fit (for a wire; see
                :func:`~graphfeed.sampler.compact.compact_hop`); the input layer's too unless
                ``alloc`` places it.

        Returns:
            Blocks ordered input layer first; ``output_nodes`` equals ``seeds``.

        Raises:
            InvalidArgument: bad seeds (dtype, rank, empty, duplicates), fanouts (a value not
                -1 or in ``[0, max_fanout]``, a layer with another count than the edge types) or
                ``exclude`` (not int64 pairs of equal length, a dst outside the graph).
            NotFound: a seed outside ``[0, num_nodes)``.
            ResourceExhausted: more than ``max_seeds`` seeds.
            GraphfeedError: whatever a partition raised, unchanged.
        """
        seeds = self._check_seeds(seeds)
        fanouts = self._check_fanouts(fanouts)
        excluded = self._exclusion_by_partition(exclude)
        frontier = seeds
        blocks: list[Block] = []
        for hop, fanout in enumerate(reversed(fanouts)):
            key = (job_seed, epoch, step, hop)
            order, bounds, answers = self._sample_hop(frontier, fanout, bool(replace), key, excluded)
            last = hop == len(fanouts) - 1
            with self._slots.lease() as slot_of:
                frontier, block = compact_hop(
                    frontier, order, bounds, answers, slot_of, alloc if last else None, narrow
                )
            blocks.append(block)
        blocks.reverse()
        return SampledBlocks(input_nodes=frontier, output_nodes=seeds, blocks=blocks)

    def _check_seeds(self, seeds: np.ndarray) -> np.ndarray:
        seeds = np.asarray(seeds)
        if seeds.dtype != np.int64:
            raise InvalidArgument(f"seeds must be int64, got {seeds.dtype}")
        if seeds.ndim != 1:
            raise InvalidArgument(f"seeds must be 1-D, got shape {seeds.shape}")
        if seeds.size == 0:
            raise InvalidArgument("seeds must not be empty")
        if seeds.size > self.max_seeds:
            raise ResourceExhausted(f"{seeds.size} seeds exceed the limit of {self.max_seeds} per request")
        bad = seeds[(seeds < 0) | (seeds >= self.num_nodes)]
        if bad.size:
            raise NotFound(
                f"{bad.size} seed ids outside the graph [0, {self.num_nodes}), e.g. {bad[:_SHOW_IDS].tolist()}"
            )
        ordered = np.sort(seeds)
        dup = ordered[1:][ordered[1:] == ordered[:-1]]
        if dup.size:
            raise InvalidArgument(f"duplicate seeds: {np.unique(dup)[:_SHOW_IDS].tolist()} appear more than once")
        # Our own copy: the caller may reuse its buffer, and output_nodes must not change.
        return seeds.copy()

    def _check_fanouts(self, fanouts: Sequence[Fanout]) -> list[int | tuple[int, ...]]:
        """Each layer as an int (every edge type) or a tuple of one int per edge type."""
        try:
            layers = list(fanouts)
        except TypeError:
            raise InvalidArgument(f"fanouts must be a sequence of layers, got {fanouts!r}") from None
        if not layers:
            raise InvalidArgument("fanouts must name at least one layer")
        values = [self._check_layer(layer) for layer in layers]
        flat = [f for v in values for f in (v if isinstance(v, tuple) else (v,))]
        bad = [f for f in flat if f != -1 and not 0 <= f <= self.max_fanout]
        if bad:
            raise InvalidArgument(f"fanouts {bad} out of range: each must be -1 (all) or in [0, {self.max_fanout}]")
        return values

    def _check_layer(self, layer: object) -> int | tuple[int, ...]:
        try:
            return operator.index(layer)  # type: ignore[arg-type]
        except TypeError:
            pass
        try:
            if isinstance(layer, (str, bytes)):
                raise TypeError
            values = tuple(operator.index(f) for f in layer)  # type: ignore[attr-defined]
        except TypeError:
            raise InvalidArgument(
                f"each layer of fanouts must be an integer or a sequence of integers (one per edge type), got {layer!r}"
            ) from None
        if len(values) != len(self.etypes):
            names = [etype_name(e) for e in self.etypes]
            raise InvalidArgument(
                f"a layer of fanouts has {len(values)} edge-type fanouts {list(values)}; the graph has "
                f"{len(names)} edge types {names} (give one per edge type, or one int for all)"
            )
        return values

    def _exclusion_by_partition(self, exclude: Exclusion | None) -> dict[int, Exclusion]:
        """The pairs of ``exclude`` by the partition owning their dst (only partitions that have
        some): a partition samples only its own nodes' in-edges, so it needs only those."""
        pairs = check_exclusion(exclude)
        if pairs is None:
            return {}
        dst, eids = pairs
        bad = dst[(dst < 0) | (dst >= self.num_nodes)]
        if bad.size:
            raise InvalidArgument(
                f"exclude_dst: {bad.size} ids outside the graph [0, {self.num_nodes}), e.g. {bad[:_SHOW_IDS].tolist()}"
            )
        owner = self.partitions.owners(dst)
        return {int(p): (dst[owner == p], eids[owner == p]) for p in np.unique(owner)}

    def _sample_hop(
        self,
        frontier: np.ndarray,
        fanout: Fanout,
        replace: bool,
        key: tuple[int, int, int, int],
        excluded: dict[int, Exclusion],
    ) -> tuple[np.ndarray, np.ndarray, list[tuple[np.ndarray, np.ndarray, np.ndarray]]]:
        """One hop around ``frontier``: ``(order, bounds, answers)`` in grouped order (partition
        by partition; ``order[j]`` is the frontier position of grouped position ``j``, and
        ``answers[q]`` = (offsets, src, edge ids) covers grouped positions ``bounds[q]:bounds[q+1]``).
        ``excluded``: the pairs to exclude by owner partition (:meth:`_exclusion_by_partition`)."""
        parts = self.partitions

        def sample(c: Chunk) -> Future[SampledNeighbors]:
            seed = derive_seed(*key, c.partition)
            x = excluded.get(c.partition)
            if x is None:  # no ``exclude`` at all: a partition set written before it (bench) still works
                return parts.sample_neighbors(c.partition, c.ids, fanout, replace, seed, c.first_position)
            return parts.sample_neighbors(c.partition, c.ids, fanout, replace, seed, c.first_position, exclude=x)

        pending = fan_out_requests(parts, frontier, sample, self.max_ids_per_request)
        results = pending.results()
        for (p, pos, _), r in zip(pending.parts, results):
            _check_answer(p, r, len(pos))
        return pending.order, pending.bounds, [(r.offsets, r.src, r.edge_ids) for r in results]


def _check_answer(p: int, r: SampledNeighbors, num_seeds: int) -> None:
    """A partition's answer must be a CSR over the seeds it was sent; anything else is a bug."""
    if len(r.offsets) != num_seeds + 1 or int(r.offsets[-1]) != len(r.src) or len(r.edge_ids) != len(r.src):
        raise GraphfeedError(
            f"partition {p} answered {len(r.offsets)} offsets / {len(r.src)} src / {len(r.edge_ids)} edge ids "
            f"for {num_seeds} seeds"
        )
