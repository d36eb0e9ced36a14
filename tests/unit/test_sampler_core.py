"""MultiHopSampler over two in-process graph-stores of the arithmetic graph (answers by formula)."""

from __future__ import annotations

from collections.abc import Iterator
from concurrent.futures import Future
from pathlib import Path
from typing import cast

import numpy as np
import pytest

from graphfeed.common import blocks as blocks_codec
from graphfeed.common.blocks import SampledBlocks
from graphfeed.common.errors import InvalidArgument, NotFound, ResourceExhausted, Unavailable
from graphfeed.graph_store.partitions import LocalPartitionSet
from graphfeed.graph_store.store import GraphStore
from graphfeed.graph_store.types import Exclusion, PartitionSet
from graphfeed.sampler.core import MultiHopSampler
from tests.graphs import arithmetic_degree, arithmetic_graph, expected_in_neighbors

N, MAX_DEG = 100, 7
SEEDS_IN = [3, 0, 42, 8, 99, 5, 61]  # input ids; owners interleave across the two partitions


@pytest.fixture(scope="module")
def partitions(arith_root: Path) -> Iterator[LocalPartitionSet]:
    stores = [GraphStore.open(arith_root / f"part-0000{p}") for p in (0, 1)]
    yield LocalPartitionSet(stores)
    for s in stores:
        s.close()


@pytest.fixture(scope="module")
def gid_of(orig: np.ndarray) -> np.ndarray:
    """input id -> gid."""
    inv = np.empty_like(orig)
    inv[orig] = np.arange(len(orig))
    return inv


@pytest.fixture(scope="module")
def sampler(partitions: LocalPartitionSet) -> MultiHopSampler:
    return MultiHopSampler(partitions)


def seeds_gid(gid_of: np.ndarray, ids: list[int] = SEEDS_IN) -> np.ndarray:
    return gid_of[np.array(ids)].astype(np.int64)


def layer_edges(sb: SampledBlocks, layer: int, orig: np.ndarray) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """(src, dst) input ids and edge ids of one block's edges."""
    b = sb.blocks[layer]
    nodes = sb.input_nodes
    return orig[nodes[: b.num_src][b.edge_src]], orig[nodes[: b.num_dst][b.edge_dst]], b.edge_ids


def expected_edge_id(u: np.ndarray, v: np.ndarray) -> np.ndarray:
    """Input edge id of edge u -> v: edges are listed by v, then k = (u - v) % N."""
    deg = arithmetic_degree(np.arange(N), MAX_DEG)
    start = np.cumsum(deg) - deg
    return start[v] + (u - v) % N - 1


def check_layout(sb: SampledBlocks, seeds: np.ndarray) -> None:
    """DGL's layout: seeds are the output nodes and a prefix of every layer's nodes."""
    np.testing.assert_array_equal(sb.output_nodes, seeds)
    np.testing.assert_array_equal(sb.input_nodes[: len(seeds)], seeds)
    assert len(np.unique(sb.input_nodes)) == len(sb.input_nodes)
    assert sb.blocks[0].num_src == len(sb.input_nodes)
    assert sb.blocks[-1].num_dst == len(seeds)
    for lower, upper in zip(sb.blocks, sb.blocks[1:]):
        assert upper.num_src == lower.num_dst
    for b in sb.blocks:
        assert b.num_dst <= b.num_src
        assert ((b.edge_src >= 0) & (b.edge_src < b.num_src)).all()
        assert ((b.edge_dst >= 0) & (b.edge_dst < b.num_dst)).all()


def test_full_fanout_gives_exact_in_edges_and_closure(
    sampler: MultiHopSampler, orig: np.ndarray, gid_of: np.ndarray
) -> None:
    seeds = seeds_gid(gid_of)
    sb = sampler.sample(seeds, [-1, -1], False, job_seed=1, epoch=0, step=0)

    assert len(sb.blocks) == 2
    check_layout(sb, seeds)
    for layer, b in enumerate(sb.blocks):
        src, dst, eids = layer_edges(sb, layer, orig)
        dst_nodes = orig[sb.input_nodes[: b.num_dst]]
        expected = sorted((u, int(v)) for v in dst_nodes for u in expected_in_neighbors(int(v), N, MAX_DEG))
        assert sorted(zip(src.tolist(), dst.tolist())) == expected
        np.testing.assert_array_equal(eids, expected_edge_id(src, dst))

    hop1 = set(SEEDS_IN).union(*(expected_in_neighbors(v, N, MAX_DEG) for v in SEEDS_IN))
    hop2 = hop1.union(*(expected_in_neighbors(v, N, MAX_DEG) for v in hop1))
    assert set(orig[sb.input_nodes].tolist()) == hop2
    assert set(orig[sb.input_nodes[: sb.blocks[1].num_src]].tolist()) == hop1


@pytest.mark.parametrize("replace", [False, True])
def test_sampled_fanouts_respect_counts_and_formula(
    sampler: MultiHopSampler, orig: np.ndarray, gid_of: np.ndarray, replace: bool
) -> None:
    fanouts = [3, 2]
    seeds = seeds_gid(gid_of)
    sb = sampler.sample(seeds, fanouts, replace, job_seed=7, epoch=1, step=2)

    check_layout(sb, seeds)
    for layer, (b, fanout) in enumerate(zip(sb.blocks, fanouts)):
        src, dst, eids = layer_edges(sb, layer, orig)
        dst_nodes = orig[sb.input_nodes[: b.num_dst]]
        counts = np.bincount(b.edge_dst, minlength=b.num_dst)
        deg = arithmetic_degree(dst_nodes, MAX_DEG)
        np.testing.assert_array_equal(counts, np.full_like(deg, fanout) if replace else np.minimum(deg, fanout))
        assert all(u in expected_in_neighbors(int(v), N, MAX_DEG) for u, v in zip(src, dst))
        np.testing.assert_array_equal(eids, expected_edge_id(src, dst))
        if not replace:
            assert len(set(zip(src.tolist(), dst.tolist()))) == len(src)
    # Every sampled source is an input node, and nothing else is.
    sources = np.concatenate([sb.input_nodes[: b.num_src][b.edge_src] for b in sb.blocks])
    assert set(sb.input_nodes.tolist()) == set(seeds.tolist()) | set(sources.tolist())


def as_bytes(sb: SampledBlocks) -> bytes:
    return blocks_codec.to_proto(sb).SerializeToString()


def test_deterministic_and_step_dependent(partitions: LocalPartitionSet, gid_of: np.ndarray) -> None:
    seeds = seeds_gid(gid_of)
    a = MultiHopSampler(partitions).sample(seeds, [3, 2], False, 11, 2, 5)
    b = MultiHopSampler(partitions).sample(seeds.copy(), (3, 2), False, 11, 2, 5)
    for x, y in [(a.input_nodes, b.input_nodes), (a.output_nodes, b.output_nodes)] + [
        (getattr(p, f), getattr(q, f)) for p, q in zip(a.blocks, b.blocks) for f in ("edge_src", "edge_dst", "edge_ids")
    ]:
        assert x.dtype == y.dtype == np.int64
        assert x.tobytes() == y.tobytes()
    assert as_bytes(a) == as_bytes(b)

    other_step = MultiHopSampler(partitions).sample(seeds, [3, 2], False, 11, 2, 6)
    assert as_bytes(other_step) != as_bytes(a)
    other_job = MultiHopSampler(partitions).sample(seeds, [3, 2], False, 12, 2, 5)
    assert as_bytes(other_job) != as_bytes(a)


def test_full_fanout_matches_dgl(sampler: MultiHopSampler, orig: np.ndarray, gid_of: np.ndarray) -> None:
    import dgl
    import torch

    g_in = arithmetic_graph(N, MAX_DEG)
    g = dgl.graph((torch.from_numpy(g_in.src), torch.from_numpy(g_in.dst)), num_nodes=N)
    sb = sampler.sample(seeds_gid(gid_of), [-1, -1], False, 3, 0, 0)

    cur = torch.tensor(SEEDS_IN, dtype=torch.int64)
    for layer in reversed(range(len(sb.blocks))):
        frontier = dgl.sampling.sample_neighbors(g, cur, -1)
        block = dgl.to_block(frontier, dst_nodes=cur)
        src_ids = block.srcdata[dgl.NID].numpy()
        u, v = block.edges()
        # block.edata[EID] indexes the frontier's edges; the frontier's EID the graph's.
        eids_g = frontier.edata[dgl.EID][block.edata[dgl.EID]]
        dgl_edges = set(zip(src_ids[u.numpy()].tolist(), cur.numpy()[v.numpy()].tolist(), eids_g.tolist()))

        src, dst, eids = layer_edges(sb, layer, orig)
        assert set(zip(src.tolist(), dst.tolist(), eids.tolist())) == dgl_edges
        assert len(src) == block.num_edges()
        ours = orig[sb.input_nodes[: sb.blocks[layer].num_src]]
        assert set(ours.tolist()) == set(src_ids.tolist())
        assert len(ours) == block.num_src_nodes()
        cur = block.srcdata[dgl.NID]


class _RecordingPartitions:
    """Wraps a partition set: logs when requests start and when their results are awaited.

    It has just what a sampler reads of a partition set, so a test casts it to ``PartitionSet``."""

    def __init__(self, inner: LocalPartitionSet, fail: dict[int, Exception] | None = None) -> None:
        self.log: list[tuple[str, int]] = []
        self.inner, self.info, self.fail = inner, inner.info, fail or {}
        self.num_partitions = inner.num_partitions

    def sample_neighbors(
        self,
        p: int,
        seeds: np.ndarray,
        fanout: int,
        replace: bool,
        rng_seed: int,
        first_position: int = 0,
        exclude: Exclusion | None = None,
    ) -> Future:
        self.log.append(("start", p))
        inner = self.inner.sample_neighbors(p, seeds, fanout, replace, rng_seed, first_position, exclude)
        log, fail = self.log, self.fail

        class Logged(Future):
            def result(self, timeout: float | None = None):  # noqa: ANN202
                log.append(("wait", p))
                if p in fail:
                    raise fail[p]
                return inner.result(timeout)

        return Logged()


def test_partitions_requested_in_parallel_each_hop(partitions: LocalPartitionSet, gid_of: np.ndarray) -> None:
    rec = _RecordingPartitions(partitions)
    MultiHopSampler(cast(PartitionSet, rec)).sample(seeds_gid(gid_of), [2, 2], False, 0, 0, 0)
    assert rec.log == [("start", 0), ("start", 1), ("wait", 0), ("wait", 1)] * 2


def test_large_shares_go_out_in_chunks_with_the_same_sample(partitions: LocalPartitionSet, gid_of: np.ndarray) -> None:
    """max_ids_per_request splits each partition's share of a hop into concurrent calls whose
    first_position keeps every draw where it was: the blocks are byte-identical."""
    seeds = seeds_gid(gid_of)
    whole = MultiHopSampler(partitions).sample(seeds, [3, 2], False, 11, 2, 5)
    rec = _RecordingPartitions(partitions)
    chunked = MultiHopSampler(cast(PartitionSet, rec), max_ids_per_request=2).sample(seeds, [3, 2], False, 11, 2, 5)
    assert as_bytes(chunked) == as_bytes(whole)
    first_wait = next(i for i, e in enumerate(rec.log) if e[0] == "wait")
    assert first_wait > 2 and all(e[0] == "start" for e in rec.log[:first_wait]), (
        "a hop's chunks all start before any is awaited"
    )
    assert sum(e[0] == "start" for e in rec.log) > 4
    with pytest.raises(InvalidArgument, match="max_ids_per_request"):
        MultiHopSampler(partitions, max_ids_per_request=0)


def test_partition_errors_propagate_unchanged(partitions: LocalPartitionSet, gid_of: np.ndarray) -> None:
    err = Unavailable("graph-store 1 is down")
    with pytest.raises(Unavailable) as info:
        MultiHopSampler(cast(PartitionSet, _RecordingPartitions(partitions, fail={1: err}))).sample(
            seeds_gid(gid_of), [2], False, 0, 0, 0
        )
    assert info.value is err


@pytest.mark.parametrize(
    ("seeds", "fanouts", "cls", "match"),
    [
        (np.array([1.0, 2.0]), [2], InvalidArgument, "int64"),
        (np.array([1, 2], dtype=np.int32), [2], InvalidArgument, "int64"),
        (np.array([[1, 2]], dtype=np.int64), [2], InvalidArgument, "1-D"),
        (np.array([], dtype=np.int64), [2], InvalidArgument, "empty"),
        (np.array([4, 9, 4], dtype=np.int64), [2], InvalidArgument, r"duplicate seeds: \[4\]"),
        (np.array([1, 100, 2, -1], dtype=np.int64), [2], NotFound, r"2 seed ids outside the graph \[0, 100\).*100"),
        (np.arange(5, dtype=np.int64), [2], ResourceExhausted, "5 seeds exceed the limit of 4"),
        (np.array([1], dtype=np.int64), [], InvalidArgument, "at least one layer"),
        (np.array([1], dtype=np.int64), [2, -7], InvalidArgument, r"\[-7\].*-1 \(all\) or in \[0, 10\]"),
        (np.array([1], dtype=np.int64), [11], InvalidArgument, r"\[0, 10\]"),
        (np.array([1], dtype=np.int64), [2.5], InvalidArgument, "integers"),
    ],
)
def test_validation_errors(
    partitions: LocalPartitionSet, seeds: np.ndarray, fanouts: list, cls: type, match: str
) -> None:
    sampler = MultiHopSampler(partitions, max_seeds=4, max_fanout=10)
    with pytest.raises(cls, match=match) as info:
        sampler.sample(seeds, fanouts, False, 0, 0, 0)
    assert type(info.value) is cls


def test_limits_are_inclusive(partitions: LocalPartitionSet) -> None:
    sb = MultiHopSampler(partitions, max_seeds=4, max_fanout=10).sample(
        np.array([0, 1, 98, 99], dtype=np.int64), [10, 0], False, 0, 0, 0
    )
    assert sb.blocks[1].num_edges == 0 and sb.blocks[0].num_dst == 4
