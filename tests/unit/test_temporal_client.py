"""The routing client's pure parts: ownership by the one rule, grouping, and merging the
partitions' answers back into root order (exact on the arithmetic temporal graph)."""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path

import numpy as np
import pytest

from graphfeed.common.owners import group_by_owner, owners
from graphfeed.graph_store.temporal.client import merge
from graphfeed.graph_store.temporal.store import TemporalSample, TemporalStore
from tests.unit.temporal_graphs import N, expected_count, write_temporal


def test_owners_by_range_then_modulo() -> None:
    offsets = np.array([0, 20, 40])
    gids = np.array([0, 19, 20, 39, 40, 41, 42, 43, 1001])
    assert owners(gids, offsets).tolist() == [0, 0, 1, 1, 0, 1, 0, 1, 1]


def test_grouping_follows_the_same_rule_and_keeps_order_within_a_partition() -> None:
    offsets = np.array([0, 20, 40, 60])
    gids = np.array([25, 3, 21, 61, 7, 45, 60, 1002])  # 61 % 3 == 1, 60 % 3 == 0, 1002 % 3 == 0
    order, bounds = group_by_owner(gids, offsets)
    shares = [order[bounds[p] : bounds[p + 1]].tolist() for p in range(3)]
    assert shares == [[1, 4, 6, 7], [0, 2, 3], [5]]
    assert [owners(gids[s], offsets).tolist() for s in shares] == [[0] * 4, [1] * 3, [2]]
    order, bounds = group_by_owner(np.array([], dtype=np.int64), offsets)
    assert len(order) == 0 and bounds.tolist() == [0, 0, 0, 0]


@pytest.fixture(scope="module")
def stores(tmp_path_factory: pytest.TempPathFactory) -> Iterator[list[TemporalStore]]:
    root, _ = write_temporal(Path(tmp_path_factory.mktemp("t2")), num_partitions=2)
    out = [TemporalStore.open(root / f"part-{p:05d}", None) for p in range(2)]
    yield out
    for s in out:
        s.close()


def test_merge_puts_every_root_back_in_place(stores: list[TemporalStore]) -> None:
    rng = np.random.default_rng(3)
    nodes = rng.integers(0, N, 200)
    times = rng.integers(-5, 100, 200)
    offsets = np.array([0, N // 2, N])
    parts = []
    order, bounds = group_by_owner(nodes, offsets)
    for p, pos in enumerate(order[bounds[p] : bounds[p + 1]] for p in range(2)):
        parts.append((pos, stores[p].sample(nodes[pos], times[pos], 3, "recent")))
    s = merge(len(nodes), parts)
    counts = np.minimum(expected_count(times), 3)
    assert np.diff(s.offsets).tolist() == counts.tolist()
    for i, (v, c) in enumerate(zip(nodes, counts)):
        n = int(expected_count(times[i]))
        j = np.arange(n - c, n)
        got = slice(s.offsets[i], s.offsets[i + 1])
        assert s.ts[got].tolist() == (10 * j).tolist()
        assert s.nbr[got].tolist() == ((v * 7 + j) % N).tolist()


def test_merge_empty_and_with_features() -> None:
    s = merge(3, [])
    assert s.offsets.tolist() == [0, 0, 0, 0] and len(s.nbr) == len(s.ts) == len(s.eid) == 0
    one = TemporalSample(
        np.array([0, 2]), np.array([5, 6]), np.array([1, 2]), np.array([7, 8]), np.ones((2, 3), np.float32)
    )
    two = TemporalSample(
        np.array([0, 0, 1]), np.array([9]), np.array([3]), np.array([4]), 2 * np.ones((1, 3), np.float32)
    )
    m = merge(3, [(np.array([2]), one), (np.array([0, 1]), two)])
    assert m.offsets.tolist() == [0, 0, 1, 3] and m.nbr.tolist() == [9, 5, 6] and m.eid.tolist() == [4, 7, 8]
    assert m.efeat is not None and m.efeat[:, 0].tolist() == [2, 1, 1]


def test_appends_are_opt_in(tmp_path: Path) -> None:
    from graphfeed.graph_store.config import GraphStoreSettings

    part = tmp_path / "part-00000"
    assert GraphStoreSettings(part_dir=part).append_path() is None  # a lock per log: two stores cannot share one
    assert GraphStoreSettings(part_dir=part, append_dir="").append_path() is None
    assert GraphStoreSettings(part_dir=part, append_dir=str(tmp_path / "log")).append_path() == tmp_path / "log"
