"""Feature cache: HostTier on hand traces, LRU order, static-degree contents, no-cache, budgets,
prefetch accounting (the adaptive policies are in test_cache_policies.py)."""

from __future__ import annotations

from pathlib import Path

import numpy as np
import pytest

from graphfeed.common.errors import InvalidArgument
from graphfeed.common.partition import part_dir_name
from graphfeed.graph_store.partitions import LocalPartitionSet
from graphfeed.graph_store.store import GraphStore
from graphfeed.loader.cache.base import CachePolicy, HostTier, LruCache, NoCache, StaticDegreeCache, TierStats
from graphfeed.loader.cache.lookahead import LookaheadCache
from graphfeed.loader.cache.massivegnn import MassiveGnnCache
from graphfeed.loader.cache.policies import make_cache

ROW_BYTES = 8  # two float32


def rows(ids: list[int] | np.ndarray) -> np.ndarray:
    ids = np.asarray(ids, dtype=np.int64)
    return (ids[:, None] * 10 + np.arange(2)[None, :]).astype(np.float32)


def tier(capacity_rows: int, num_nodes: int = 10) -> HostTier:
    return HostTier(capacity_rows * ROW_BYTES, (2,), np.float32, num_nodes)


def test_host_tier_hand_trace() -> None:
    t = tier(3)
    assert t.capacity_rows == 3 and t.nbytes == 0
    t.insert(np.array([3, 7]), rows([3, 7]))
    hit, got = t.lookup(np.array([7, 1, 3]))
    assert hit.tolist() == [True, False, True]
    assert np.array_equal(got, rows([7, 3]))
    assert (t.hits, t.misses, t.inserts, t.evictions) == (2, 1, 2, 0)
    assert t.nbytes == 2 * ROW_BYTES
    assert t.evict(np.array([3, 9])) == 1  # 9 is not cached
    hit, got = t.lookup(np.array([3, 7]))
    assert hit.tolist() == [False, True] and np.array_equal(got, rows([7]))
    assert (t.hits, t.misses, t.evictions) == (3, 2, 1)
    t.insert(np.array([0, 9]), rows([0, 9]))  # reuses the freed slot
    hit, got = t.lookup(np.array([0, 9, 7]))
    assert hit.all() and np.array_equal(got, rows([0, 9, 7]))
    assert t.nbytes == t.capacity_bytes == 3 * ROW_BYTES


def test_host_tier_rejects_overflow_duplicates_and_bad_ids() -> None:
    t = tier(2)
    t.insert(np.array([1]), rows([1]))
    with pytest.raises(ValueError):
        t.insert(np.array([2, 3]), rows([2, 3]))  # one free slot
    with pytest.raises(ValueError):
        t.insert(np.array([1]), rows([1]))  # already cached
    with pytest.raises(InvalidArgument):
        t.lookup(np.array([10]))
    with pytest.raises(InvalidArgument):
        t.lookup(np.array([-1]))


def test_capacity_is_in_bytes_and_rounds_down_to_whole_rows() -> None:
    t = HostTier(30, (2,), np.float32, 100)  # 3 rows of 8 bytes fit in 30
    assert t.capacity_rows == 3 and t.capacity_bytes == 24
    assert HostTier(7, (2,), np.float32, 100).capacity_rows == 0
    assert HostTier(1 << 20, (2,), np.float32, 5).capacity_rows == 5  # never more than the graph


def access(cache: CachePolicy, ids: list[int]) -> list[bool]:
    """One minibatch through the cache as the loader drives it."""
    ids_a = np.asarray(ids, dtype=np.int64)
    hit, got = cache.lookup(ids_a)
    assert np.array_equal(got, rows(ids_a[hit]))
    cache.on_access(ids_a, hit)
    cache.admit(ids_a[~hit], rows(ids_a[~hit]))
    return hit.tolist()


def cached(cache: CachePolicy) -> list[int]:
    return cache.tier.cached_ids().tolist()


def test_lru_evicts_exactly_the_least_recently_used() -> None:
    c = LruCache(tier(3))
    assert access(c, [1, 2]) == [False, False]
    assert access(c, [3]) == [False]
    assert access(c, [1]) == [True]  # 1 is now more recent than 2 (both inserted first)
    assert access(c, [4]) == [False]
    assert cached(c) == [1, 3, 4]  # 2 was least recently used (FIFO would have dropped 1 or 2 at random)
    assert access(c, [5, 6]) == [False, False]
    assert cached(c) == [4, 5, 6]  # 3 (step 2) and 1 (step 3) were the two oldest
    assert access(c, [4, 5, 6]) == [True, True, True]
    assert c.tier.evictions == 3 and c.tier.nbytes <= c.tier.capacity_bytes


def test_lru_keeps_within_capacity_when_a_minibatch_misses_more_than_fits() -> None:
    c = LruCache(tier(3))
    access(c, [0, 1, 2, 3, 4, 5])
    assert len(cached(c)) == 3 and c.tier.nbytes == 3 * ROW_BYTES
    hit = access(c, [0, 1, 2, 3, 4, 5])
    assert sum(hit) == 3


def test_none_never_hits_and_ignores_capacity() -> None:
    c = make_cache("none", 1 << 20, row_shape=(2,), dtype=np.float32, num_nodes=10)
    assert isinstance(c, NoCache) and c.tier.capacity_bytes == 0
    for _ in range(3):
        hit = access(c, [1, 2, 3])
        assert not any(hit)
    assert c.tier.misses == 9 and c.tier.hits == 0


def test_unknown_policy_is_invalid() -> None:
    with pytest.raises(InvalidArgument, match="cache policy"):
        make_cache("fifo", 100, row_shape=(2,), dtype=np.float32, num_nodes=10)


@pytest.fixture(scope="module")
def arith_parts(arith_root: Path) -> LocalPartitionSet:
    return LocalPartitionSet([GraphStore.open(arith_root / part_dir_name(p)) for p in range(2)])


def test_static_degree_holds_the_highest_degree_nodes(arith_root: Path, arith_parts: LocalPartitionSet) -> None:
    spec = arith_parts.info.node_data["feat"]
    capacity = 20
    c = make_cache("static_degree", capacity * 16, row_shape=spec.row_shape, dtype=spec.dtype, num_nodes=100)
    assert isinstance(c, StaticDegreeCache)
    c.warm_up(arith_parts, "feat")
    orig = np.load(arith_root / "orig_ids.npy")  # gid -> input id
    degree = 1 + orig % 7  # arithmetic graph: deg(v) = 1 + v % max_deg
    held = c.tier.cached_ids()
    assert len(held) == capacity
    others = np.setdiff1d(np.arange(100), held)
    assert degree[held].min() >= degree[others].max()
    assert (degree[held] == 7).sum() == 14  # all 14 nodes of degree 7, then 6 of degree 6
    hit, got = c.lookup(held)
    assert hit.all()
    assert np.array_equal(got, (orig[held][:, None] * 4 + np.arange(4)).astype(np.float32))
    c.admit(others[:5], np.zeros((5, 4), np.float32))  # static: misses never enter
    assert np.array_equal(c.tier.cached_ids(), held) and c.tier.evictions == 0


def test_lookup_into_puts_the_hits_in_place_and_leaves_the_misses_alone() -> None:
    t = tier(3)
    t.insert(np.array([3, 7]), rows([3, 7]), prefetched=True)
    out = np.full((4, 2), -1, dtype=np.float32)
    hit = t.lookup_into(np.array([7, 1, 3, 7]), out)
    assert hit.tolist() == [True, False, True, True]
    assert np.array_equal(out[hit], rows([7, 3, 7])) and (out[1] == -1).all()
    assert (t.hits, t.misses, t.prefetch_used) == (3, 1, 2)  # counted as lookup() counts
    empty = tier(0)
    out = np.zeros((2, 2), dtype=np.float32)
    assert not empty.lookup_into(np.array([1, 2]), out).any() and empty.misses == 2


def test_prefetched_rows_count_as_used_once_on_their_first_hit() -> None:
    t = tier(4)
    t.insert(np.array([1, 2, 3]), rows([1, 2, 3]), prefetched=True)
    t.insert(np.array([4]), rows([4]))  # a demand insert is not a prefetch
    t.lookup(np.array([1, 4, 5]))
    t.lookup(np.array([1, 2]))
    assert t.prefetch_used == 2  # 1 once (not twice), 2; 3 never hit; 4 was not prefetched
    t.evict(np.array([3]))
    t.insert(np.array([3]), rows([3]))  # re-inserted on demand: its slot no longer counts as prefetched
    t.lookup(np.array([3]))
    assert t.prefetch_used == 2


def test_tier_stats_add_field_by_field() -> None:
    a = TierStats("host", 1, 2, 3, 4, 5, 6, prefetch_issued=7, prefetch_used=8, prefetch_failed=9, prefetch_bytes=10)
    assert a + a == TierStats("host", 2, 4, 6, 8, 10, 12, 14, 16, 18, 20)


@pytest.mark.parametrize("name, cls", [("massivegnn", MassiveGnnCache), ("lookahead", LookaheadCache)])
def test_make_cache_builds_the_adaptive_policies(name: str, cls: type) -> None:
    c = make_cache(name, 3 * ROW_BYTES, row_shape=(2,), dtype=np.float32, num_nodes=10)
    assert isinstance(c, cls) and c.name == name and c.tier.capacity_rows == 3
