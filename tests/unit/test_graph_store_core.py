"""GraphStore core on the arithmetic graph: node data, degrees, splits, chunking, errors."""

from __future__ import annotations

from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import numpy as np
import pytest

from graphfeed.common.errors import FailedPrecondition, InvalidArgument, NotFound, ResourceExhausted
from graphfeed.graph_store.store import GraphStore
from tests.graphs import arithmetic_features

N, MAX_DEG, F, C = 100, 7, 4, 3  # the arith_root fixture (feat_dim 4, 3 classes)

OpenStore = Callable[..., GraphStore]


@pytest.fixture
def open_store(arith_root: Path) -> Iterator[OpenStore]:
    """``open_store(p, **limits)`` opens partition p; every store is closed at teardown."""
    opened: list[GraphStore] = []

    def _open(p: int = 0, **limits: Any) -> GraphStore:
        opened.append(GraphStore.open(arith_root / f"part-{p:05d}", **limits))
        return opened[-1]

    yield _open
    for s in opened:
        s.close()


def test_info_describes_partition_and_graph(open_store: OpenStore) -> None:
    s0, s1 = open_store(0), open_store(1)
    info = s1.info()
    assert (info.partition_id, info.num_partitions, info.num_nodes) == (1, 2, N)
    assert info.num_edges == sum(1 + v % MAX_DEG for v in range(N))
    assert info.node_offsets.tolist() == [0, 50, 100]
    assert (s1.start, s1.stop, s1.partition_id) == (50, 100, 1)
    assert info.node_data["feat"].dtype == np.float32 and info.node_data["feat"].row_shape == (F,)
    assert info.node_data["label"].dtype == np.int64 and info.node_data["label"].row_shape == ()
    assert info.num_classes == C and info.dataset == "arithmetic-100" and info.schema_version == 2
    assert s0.info().num_local_edges + info.num_local_edges == info.num_edges
    assert 0 < info.num_halo_nodes <= 50  # partitioned by v % 2: every odd node has even neighbors


def test_node_data_matches_formula_in_request_order(open_store: OpenStore, orig: np.ndarray) -> None:
    for p in (0, 1):
        s = open_store(p)
        ids = np.random.default_rng(p).permutation(np.arange(s.start, s.stop))
        ids = np.concatenate([ids, ids[:7]])  # duplicates too
        feat = s.get_node_data("feat", ids)
        v = orig[ids]
        assert feat.dtype == np.float32 and feat.shape == (len(ids), F)
        assert np.array_equal(feat, arithmetic_features(v))
        assert np.array_equal(s.get_node_data("label", ids), v % C)


def test_empty_ids_give_zero_rows_of_the_right_shape(open_store: OpenStore) -> None:
    s = open_store(0)
    empty = np.empty(0, dtype=np.int64)
    assert s.get_node_data("feat", empty).shape == (0, F)
    assert s.get_node_data("feat", empty).dtype == np.float32
    chunks = list(s.iter_node_data("feat", empty))
    assert len(chunks) == 1 and chunks[0][0] == 0 and chunks[0][1].shape == (0, F)
    assert s.get_degrees(empty).shape == (0,)


def test_degrees_match_formula(open_store: OpenStore, orig: np.ndarray) -> None:
    for p in (0, 1):
        s = open_store(p)
        ids = np.arange(s.start, s.stop)[::-1].copy()
        deg = s.get_degrees(ids)
        assert deg.dtype == np.int64
        assert np.array_equal(deg, 1 + orig[ids] % MAX_DEG)


def test_splits_hold_the_owned_nodes_of_each_split(open_store: OpenStore, orig: np.ndarray) -> None:
    rule = {"train": lambda r: r <= 2, "val": lambda r: r == 3, "test": lambda r: r == 4}
    seen = []
    for p in (0, 1):
        s = open_store(p)
        owned = np.arange(s.start, s.stop)
        for name, pick in rule.items():
            got = s.get_split(name)
            assert got.dtype == np.int64 and np.all(np.diff(got) > 0)
            assert np.array_equal(got, owned[pick(orig[owned] % 5)])
            seen.append(got)
    assert np.array_equal(np.sort(np.concatenate(seen)), np.arange(N)), "splits partition every node"


def test_chunks_respect_chunk_bytes_and_reassemble(open_store: OpenStore) -> None:
    s = open_store(1, chunk_bytes=40)  # feat rows are 16 bytes: 2 rows per chunk
    ids = np.arange(s.start, s.stop)[::-1].copy()
    chunks = list(s.iter_node_data("feat", ids))
    assert len(chunks) == 25
    assert [start for start, _ in chunks] == list(range(0, 50, 2))
    assert all(0 < rows.nbytes <= 40 for _, rows in chunks)
    assert np.array_equal(np.concatenate([r for _, r in chunks]), s.get_node_data("feat", ids))


def test_chunk_smaller_than_a_row_still_sends_one_row(open_store: OpenStore) -> None:
    s = open_store(0, chunk_bytes=1)
    ids = np.arange(s.start, s.start + 5)
    chunks = list(s.iter_node_data("label", ids))
    assert [len(r) for _, r in chunks] == [1] * 5
    assert np.array_equal(np.concatenate([r for _, r in chunks]), s.get_node_data("label", ids))


# -- errors -------------------------------------------------------------------------------


def test_bad_seeds_are_invalid_arguments(open_store: OpenStore) -> None:
    s = open_store(0)
    with pytest.raises(InvalidArgument, match="seeds must not be empty"):
        s.sample_neighbors(np.empty(0, dtype=np.int64), 3, False, 0)
    with pytest.raises(InvalidArgument, match=r"seeds must be 1-D, got shape \(2, 2\)"):
        s.sample_neighbors(np.zeros((2, 2), dtype=np.int64), 3, False, 0)
    with pytest.raises(InvalidArgument, match=r"seeds must be integer.*float32"):
        s.sample_neighbors(np.zeros(3, dtype=np.float32), 3, False, 0)
    with pytest.raises(InvalidArgument, match="rng_seed"):
        s.sample_neighbors(np.zeros(3, dtype=np.int64), 3, False, -1)


@pytest.mark.parametrize("fanout", [-2, -5, 11])
def test_fanout_out_of_range_states_the_allowed_range(open_store: OpenStore, fanout: int) -> None:
    s = open_store(0, max_fanout=10)
    with pytest.raises(InvalidArgument, match=rf"-1 \(all neighbors\) or in \[0, 10\], got {fanout}"):
        s.sample_neighbors(np.zeros(3, dtype=np.int64), fanout, False, 0)
    assert len(s.sample_neighbors(np.zeros(3, dtype=np.int64), 10, False, 0).offsets) == 4  # the limit itself is fine


def test_unowned_ids_are_not_found_with_the_owned_range(open_store: OpenStore) -> None:
    s = open_store(1)
    with pytest.raises(NotFound, match=r"seeds 3 are not owned by partition 1, which owns \[50, 100\)"):
        s.sample_neighbors(np.array([50, 3, 60]), -1, False, 0)
    with pytest.raises(NotFound, match=r"ids -1, 0, 1, 2, 3 and 46 more are not owned"):
        s.get_node_data("feat", np.arange(-1, 70))
    with pytest.raises(NotFound, match=r"ids 100 are not owned"):
        s.get_degrees(np.array([99, 100]))
    with pytest.raises(NotFound, match=r"ids 100 are not owned"):
        s.iter_node_data("label", np.array([100]))  # raised by the call, before iterating


def test_too_many_ids_are_resource_exhausted(open_store: OpenStore) -> None:
    s = open_store(0, max_ids_per_request=10)
    many = np.zeros(11, dtype=np.int64)
    with pytest.raises(ResourceExhausted, match="seeds: 11 ids in one request exceed the limit of 10"):
        s.sample_neighbors(many, 2, False, 0)
    with pytest.raises(ResourceExhausted, match=r"11 ids .* limit of 10"):
        s.get_node_data("feat", many)
    with pytest.raises(ResourceExhausted, match=r"11 ids .* limit of 10"):
        s.get_degrees(many)
    assert len(s.get_degrees(many[:10])) == 10


def test_unknown_names_are_not_found_listing_what_exists(open_store: OpenStore) -> None:
    s = open_store(0)
    with pytest.raises(NotFound, match=r"node data 'embedding' does not exist; available: \['feat', 'label'\]"):
        s.get_node_data("embedding", np.array([0]))
    with pytest.raises(NotFound, match="node data 'embedding'"):
        s.iter_node_data("embedding", np.array([0]))
    with pytest.raises(NotFound, match=r"split 'holdout' does not exist; available: \['test', 'train', 'val'\]"):
        s.get_split("holdout")


def test_bad_limits_are_rejected(arith_root: Path) -> None:
    with pytest.raises(ValueError, match="chunk_bytes=0"):
        GraphStore.open(arith_root / "part-00000", chunk_bytes=0)
    GraphStore.open(arith_root / "part-00000").close()  # the failed open released the partition


def test_closed_store_says_so_and_partition_can_be_reopened(open_store: OpenStore) -> None:
    s = open_store(0)
    s.close()
    with pytest.raises(FailedPrecondition, match="closed"):
        s.get_degrees(np.array([0]))
    with pytest.raises(FailedPrecondition, match="closed"):
        s.get_split("train")
    again = open_store(0)  # RocksDB's lock was released at open
    assert again.get_degrees(np.array([0])).tolist() == [1]  # gid 0 is input node 0
    s.close()  # idempotent


def test_an_answer_over_the_byte_limit_is_refused_before_sampling(open_store: OpenStore) -> None:
    """Ids per request do not bound an answer (fanout -1 on a hub): its bytes do (issue 28)."""
    s = open_store(0, max_answer_bytes=16 * 40)  # room for 40 sampled edges
    seeds = np.arange(s.start, s.start + 20, dtype=np.int64)
    degrees = s.get_degrees(seeds)
    assert degrees.sum() > 40  # the arithmetic graph: more in-edges than fit
    with pytest.raises(ResourceExhausted, match=rf"20 seeds would sample {degrees.sum()} edges .* limit of 640 bytes"):
        s.sample_neighbors(seeds, -1, False, 0)
    with pytest.raises(ResourceExhausted, match="would sample"):
        s.sample_neighbors(seeds, MAX_DEG, True, 0)  # with replacement every seed of degree > 0 takes all 7
    fits = seeds[np.cumsum(degrees) <= 40]
    assert len(s.sample_neighbors(fits, -1, False, 0).src) == degrees[: len(fits)].sum()  # the store keeps serving
    assert len(s.sample_neighbors(seeds, 2, False, 0).src) <= 40  # the fanout's bound fits: no count needed
