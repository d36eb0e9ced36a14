"""Edge minibatches for link prediction: DGL's ``as_edge_prediction_sampler`` in the loader.

A job with ``seed_edges`` trains on the rows of edge split ``split`` (:mod:`graphfeed.ingest.edge_split`:
``(src, dst, etype, eid, rev_eid)``, fetched from every graph-store as split ``edges/<split>``).
The epoch plan is the node plan over row numbers (:class:`~graphfeed.loader.plan.EpochPlan`:
the same shuffle, padding and rank striding). Each step then:

1. takes its rows (the positive edges) and draws ``num_negatives`` negative pairs per positive
   from ``rng(job_seed, "negatives", epoch, step)`` (so a replayed step is the same bytes, and
   look-ahead caching and packing see the step as it will be);
2. makes the seed nodes every endpoint of both, unique and ascending (DGL compacts the pair
   graphs the same way: one node set for the positive and negative pair graphs);
3. says which edges every hop leaves out (``exclude``: the seed edges, and with ``reverse_id``
   their reverse twins), as (dst node, edge id) pairs, the form the graph-stores take: an
   edge ``u -> v`` is an in-edge of ``v``, so its twin ``v -> u`` is one of ``u``.
"""

from __future__ import annotations

import contextlib
from collections.abc import Callable, Sequence
from dataclasses import dataclass

import numpy as np

from graphfeed.common.blocks import SampledBlocks
from graphfeed.common.errors import InvalidArgument, NotFound
from graphfeed.common.partition import EDGE_SPLIT_PREFIX, EDGE_SPLITS
from graphfeed.common.schema import GraphSchema, etype_name
from graphfeed.common.seeds import rng
from graphfeed.graph_store.types import PartitionSet
from graphfeed.loader.job import JobSpec
from graphfeed.loader.plan import EpochPlan
from graphfeed.sampler.types import BlockSampler

__all__ = ["EdgePairs", "EdgeSeeds", "EdgeStep", "edge_seeds", "edge_split_rows", "positive_keys", "sample_step"]

_REDRAWS = 16  # rounds of redrawing negatives that hit a known positive (each round redraws only those)


def edge_split_rows(partitions: PartitionSet, name: str) -> np.ndarray:
    """Edge split ``name``'s rows over all partitions (int64 [n, 5], partition by partition).

    Raises:
        NotFound: the graph has no edge split ``name`` (ingest it with ``--edge-split``).
    """
    parts = []
    for p in range(partitions.num_partitions):
        try:
            parts.append(np.asarray(partitions.get_split(p, EDGE_SPLIT_PREFIX + name), dtype=np.int64).reshape(-1, 5))
        except NotFound:
            raise NotFound(
                f"edge split {name!r} does not exist: ingest the graph with --edge-split RELATION for edge minibatches"
            ) from None
    return np.concatenate(parts)


@dataclass(frozen=True)
class EdgePairs:
    """A minibatch's positive and negative pairs as positions in its seed nodes (DGL's pair
    graph and negative pair graph), and the positives' global edge ids (-1: held out)."""

    etype: int
    src: np.ndarray
    dst: np.ndarray
    eids: np.ndarray
    neg_src: np.ndarray
    neg_dst: np.ndarray
    excluded_edges: int = 0


@dataclass(frozen=True)
class EdgeStep:
    """What the loader samples for one edge minibatch."""

    seeds: np.ndarray  # int64, unique ascending: every endpoint of the pairs
    pairs: EdgePairs
    exclude: tuple[np.ndarray, np.ndarray] | None  # (dst gids, edge ids) left out of every hop


class EdgeSeeds:
    """The rows of a job's edge split, and the per-step draw of negatives and exclusions.

    Args:
        rows: the split's rows (:func:`edge_split_rows`).
        schema: the graph's types (negatives are drawn from the endpoint's node type).
        job: the job (``num_negatives``, ``negative_sampler``, ``exclude``, ``job_seed``).
        positives: int64 sorted keys ``src * num_nodes + dst`` of every known positive, used
            when ``job.negatives_avoid_positives``; None otherwise.

    Raises:
        InvalidArgument: an empty split, or one mixing edge types (one relation per job).
    """

    def __init__(self, rows: np.ndarray, schema: GraphSchema, job: JobSpec, positives: np.ndarray | None) -> None:
        if len(rows) == 0:
            raise InvalidArgument(f"edge split {job.split!r} has no edges: nothing to train on")
        column = rows[:, 2]
        if column.min() != column.max():  # a sort of 17M rows (np.unique) took 1 s of every stream's start
            mixed = np.unique(column).tolist()
            raise InvalidArgument(f"edge split {job.split!r} mixes edge types {mixed}; one per job")
        self.rows = rows
        self.etype = int(column[0])
        src_type, _, dst_type = schema.etypes[self.etype]
        self.src_type, self.dst_type = src_type, dst_type
        self.schema = schema
        self.job = job
        self.positives = positives
        self.num_nodes = sum(schema.num_nodes(t) for t in schema.ntypes)

    @property
    def relation(self) -> str:
        return etype_name(self.schema.etypes[self.etype])

    def plan(self, epoch: int) -> EpochPlan:
        """The epoch plan over the split's row numbers (the node plan's shuffle, padding and striding)."""
        return EpochPlan.for_job(len(self.rows), self.job, epoch)

    def step(self, row_ids: np.ndarray, epoch: int, step: int) -> EdgeStep:
        """Step ``step``'s seeds, pairs and exclusions from its plan entries ``row_ids``."""
        job = self.job
        rows = self.rows[row_ids]
        u, v = rows[:, 0], rows[:, 1]
        neg_u, neg_v = self._negatives(u, rng(job.job_seed, "negatives", epoch, step))
        seeds = np.unique(np.concatenate([u, v, neg_u, neg_v]))

        def at(x: np.ndarray) -> np.ndarray:  # every endpoint is a seed
            return np.searchsorted(seeds, x).astype(np.int64)

        exclude = self._exclusion(rows)
        pairs = EdgePairs(
            etype=self.etype,
            src=at(u),
            dst=at(v),
            eids=rows[:, 3].copy(),
            neg_src=at(neg_u),
            neg_dst=at(neg_v),
            excluded_edges=0 if exclude is None else len(exclude[1]),
        )
        return EdgeStep(seeds=seeds, pairs=pairs, exclude=exclude)

    def _negatives(self, u: np.ndarray, gen: np.random.Generator) -> tuple[np.ndarray, np.ndarray]:
        """``num_negatives`` pairs per positive: ``(u, random dst)`` (uniform) or two random ends."""
        k = self.job.num_negatives
        neg_u = np.repeat(u, k)
        if self.job.negative_sampler == "global_uniform":
            neg_u = self._draw(self.src_type, len(neg_u), gen)
        neg_v = self._draw(self.dst_type, len(neg_u), gen)
        if self.positives is not None:
            for _ in range(_REDRAWS):  # a handful of rounds: positives are sparse among all pairs
                hit = np.flatnonzero(_contains(self.positives, neg_u * self.num_nodes + neg_v))
                if not len(hit):
                    break
                neg_v[hit] = self._draw(self.dst_type, len(hit), gen)
        return neg_u, neg_v

    def _draw(self, ntype: str, n: int, gen: np.random.Generator) -> np.ndarray:
        """``n`` gids of ``ntype`` drawn uniformly (type-wise ids mapped to gids)."""
        return self.schema.to_gids(ntype, gen.integers(0, self.schema.num_nodes(ntype), n, dtype=np.int64))

    def _exclusion(self, rows: np.ndarray) -> tuple[np.ndarray, np.ndarray] | None:
        mode = self.job.exclude
        if mode == "none":
            return None
        own = rows[:, 3] >= 0
        dst, eids = [rows[own, 1]], [rows[own, 3]]
        if mode == "reverse_id":
            twin = rows[:, 4] >= 0
            dst.append(rows[twin, 0])  # u -> v's twin v -> u is an in-edge of u
            eids.append(rows[twin, 4])
        out = np.concatenate(dst), np.concatenate(eids)
        return out if len(out[1]) else None


def sample_step(
    sampler: BlockSampler,
    job: JobSpec,
    fanouts: Sequence[int | Sequence[int]],
    plan: EpochPlan,
    edges: EdgeSeeds | None,
    step: int,
) -> tuple[SampledBlocks, EdgePairs | None]:
    """The blocks of ``step`` of ``plan`` (and, for an edge job, its pairs): what the loader
    streams and ``graphfeed pack`` packs, so both sample alike."""
    if edges is None:
        return sampler.sample(plan.seeds(step), fanouts, job.replace, job.job_seed, plan.epoch, step), None
    es = edges.step(plan.seeds(step), plan.epoch, step)
    sb = sampler.sample(es.seeds, fanouts, job.replace, job.job_seed, plan.epoch, step, exclude=es.exclude)
    return sb, es.pairs


def edge_seeds(
    partitions: PartitionSet,
    job: JobSpec,
    rows_of: Callable[[str], np.ndarray] | None = None,
    positives: np.ndarray | None = None,
) -> EdgeSeeds:
    """The :class:`EdgeSeeds` of edge job ``job``: what the loader's stream and ``graphfeed pack``
    both draw from. ``rows_of(name)`` gives an edge split's rows (default
    :func:`edge_split_rows`; a loader passes its cache); ``positives``, when the job avoids
    known positives, the keys already computed (default: from every split's rows).

    Raises:
        NotFound: the job's edge split does not exist. InvalidArgument: see :class:`EdgeSeeds`.
    """
    rows_of = rows_of or (lambda name: edge_split_rows(partitions, name))
    rows = rows_of(job.split)
    if job.negatives_avoid_positives and positives is None:
        known = []
        for name in EDGE_SPLITS:
            with contextlib.suppress(NotFound):
                known.append(rows if name == job.split else rows_of(name))
        positives = positive_keys(np.concatenate(known), partitions.info.num_nodes)
    return EdgeSeeds(rows, partitions.info.types, job, positives if job.negatives_avoid_positives else None)


def positive_keys(rows: np.ndarray, num_nodes: int) -> np.ndarray:
    """Sorted unique keys ``src * num_nodes + dst`` of ``rows`` (every split's, for
    ``negatives_avoid_positives``)."""
    return np.unique(rows[:, 0] * np.int64(num_nodes) + rows[:, 1])


def _contains(sorted_keys: np.ndarray, keys: np.ndarray) -> np.ndarray:
    at = np.minimum(np.searchsorted(sorted_keys, keys), max(0, len(sorted_keys) - 1))
    return sorted_keys[at] == keys if len(sorted_keys) else np.zeros(len(keys), bool)
