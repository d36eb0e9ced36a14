"""Cache policies on hand-built traces with known answers: Belady (also against brute force),
MassiveGNN's decay/evict/prefetch rounds, look-ahead (equal to Belady with the whole future
in the window; prefetch that never evicts a nearer use), determinism, prefetch failure.
(Options, metrics and the policies inside a running loader: test_cache_loader.py.)"""

from __future__ import annotations

import itertools
from concurrent.futures import Future
from dataclasses import dataclass
from typing import Any, cast

import numpy as np
import pytest

from graphfeed.common.errors import Unavailable
from graphfeed.graph_store.types import NodeDataInfo, PartitionSet, RowsInto
from graphfeed.loader.cache.base import CacheOptions, CachePolicy
from graphfeed.loader.cache.belady import NEVER, belady, next_use
from graphfeed.loader.cache.lookahead import LookaheadCache
from graphfeed.loader.cache.massivegnn import MassiveGnnCache
from graphfeed.loader.cache.policies import make_cache
from graphfeed.loader.cache.prefetch import Prefetcher, RowsFetcher

N = 10  # nodes of the hand-built graphs
ROW = 2  # float32 values per row


def rows(ids: np.ndarray | list[int]) -> np.ndarray:
    ids = np.asarray(ids, dtype=np.int64)
    return (ids[:, None] * 10 + np.arange(ROW)[None, :]).astype(np.float32)


def done(value: object) -> Future:
    fut: Future = Future()
    fut.set_result(value)
    return fut


@dataclass
class _Info:
    num_nodes: int
    node_data: dict

    @property
    def node_offsets(self) -> np.ndarray:
        return np.array([0, self.num_nodes], dtype=np.int64)


class TinyPartitions:
    """One partition of N nodes with given in-degrees and ``rows()`` as the "feat" rows."""

    num_partitions = 1

    def __init__(self, degrees: list[int]) -> None:
        self.degrees = np.asarray(degrees, dtype=np.int64)
        self.info = _Info(len(degrees), {"feat": NodeDataInfo("feat", np.dtype(np.float32), (ROW,))})

    def get_degrees(self, p: int, ids: np.ndarray) -> Future:
        return done(self.degrees[ids])

    def read_node_data(self, p: int, name: str, ids: np.ndarray, into: RowsInto) -> Future:
        return done(into.place(rows(ids)))


def tiny_partitions(degrees: list[int]) -> PartitionSet:
    """A :class:`TinyPartitions` where a policy's ``warm_up`` wants a partition set: it has just
    what warm-up reads (ownership, degrees, rows), not the whole protocol."""
    return cast(PartitionSet, TinyPartitions(degrees))


def policy(name: str, capacity_rows: int, fetch: RowsFetcher = rows, **options: Any) -> tuple[CachePolicy, Prefetcher]:
    cache = make_cache(
        name, capacity_rows * ROW * 4, row_shape=(ROW,), dtype=np.float32, num_nodes=N, options=CacheOptions(**options)
    )
    prefetcher = Prefetcher(fetch, manual=True, max_pending=100)
    cache.attach(prefetcher)
    return cache, prefetcher


def access(cache: CachePolicy, ids: list[int], key: tuple[int, int] | None = None) -> list[bool]:
    """One minibatch as the pipeline drives it; checks the cached rows are exact."""
    a = np.asarray(ids, dtype=np.int64)
    hit, got = cache.lookup(a)
    assert np.array_equal(got, rows(a[hit]))
    cache.on_access(a, hit, key)
    cache.admit(a[~hit], rows(a[~hit]))
    return hit.tolist()


def cached(cache: CachePolicy) -> list[int]:
    return cache.tier.cached_ids().tolist()


# -- Belady ---------------------------------------------------------------------------------


def test_next_use_is_the_next_step_accessing_each_id() -> None:
    nxt = next_use([np.array([1, 2]), np.array([2]), np.array([1, 3]), np.array([2])], 5)
    assert [x.tolist() for x in nxt] == [[2, 1], [3], [NEVER, NEVER], [NEVER]]


def test_belady_on_the_textbook_trace() -> None:
    # capacity 2: 1 2 3 1 2 4 1 -> 3 is bypassed (never reused), 1 and 2 stay: hits at 1, 2, 1
    trace = [np.array([v]) for v in (1, 2, 3, 1, 2, 4, 1)]
    r = belady(trace, 2, N)
    assert (r.hits, r.misses) == (3, 4)
    assert belady(trace, 0, N).hits == 0
    assert belady(trace, 5, N).hits == 3  # every reuse hits once it fits


def test_belady_keeps_the_soonest_needed_rows_of_a_batch() -> None:
    # step 0 fetches 1, 2, 3 (next used at steps 1, 2, 3): capacity 2 keeps 1 and 2
    trace = [np.array([1, 2, 3]), np.array([1, 4]), np.array([2]), np.array([3])]
    r = belady(trace, 2, N)
    assert (r.hits, r.misses) == (2, 5)


def brute_force_min_misses(trace: list[np.ndarray], capacity: int) -> int:
    """Exhaustive search over every cache content after every step (tiny traces only)."""
    best: dict[frozenset, int] = {frozenset(): 0}
    for step in trace:
        ids = set(step.tolist())
        nxt: dict[frozenset, int] = {}
        for held, misses in best.items():
            cost = misses + len(ids - held)
            pool = sorted(held | ids)
            for k in range(min(capacity, len(pool)) + 1):
                for keep in itertools.combinations(pool, k):
                    key = frozenset(keep)
                    nxt[key] = min(nxt.get(key, cost), cost)
        best = nxt
    return min(best.values())


@pytest.mark.parametrize("seed", range(6))
def test_belady_matches_brute_force_and_lookahead_with_the_whole_future_matches_belady(seed: int) -> None:
    g = np.random.default_rng(seed)
    trace = [np.sort(g.choice(6, size=g.integers(1, 4), replace=False)) for _ in range(7)]
    for cap in (1, 2, 3):
        r = belady(trace, cap, N)
        assert r.misses == brute_force_min_misses(trace, cap)
        la, _ = policy("lookahead", cap, lookahead_prefetch_steps=0)
        for s, ids in enumerate(trace):
            la.on_sampled((0, s), ids)
        hits = sum(sum(access(la, ids.tolist(), (0, s))) for s, ids in enumerate(trace))
        assert hits == r.hits


# -- MassiveGNN -------------------------------------------------------------------------------


def test_massivegnn_fill_decay_eviction_and_prefetch_rounds() -> None:
    # fraction 0.2 of 10 nodes: the initial fill is the 2 highest in-degree nodes, 5 and 7.
    # decay 0.5, period 2: threshold 0.25; a node is evicted after more than 2 minibatches without a hit.
    cache, pf = policy("massivegnn", 3, prefetch_fraction=0.2, alpha=0.5, period_steps=2)
    assert isinstance(cache, MassiveGnnCache)
    cache.warm_up(tiny_partitions([1, 1, 1, 1, 1, 9, 1, 8, 1, 1]), "feat")
    assert cached(cache) == [] and pf.run_pending() == 1  # the fill runs in the background
    assert cached(cache) == [5, 7]
    assert access(cache, [5, 1]) == [True, False]
    assert cached(cache) == [5, 7]  # demand misses never enter the buffer
    assert access(cache, [5, 1, 2]) == [True, False, False]
    # round at step 2: 7 has score 0.5^2 = 0.25, not below; 1 missed most (twice) and is prefetched
    pf.run_pending()
    assert cached(cache) == [1, 5, 7]
    assert access(cache, [1, 3]) == [True, False]
    assert access(cache, [3, 4]) == [False, False]
    # round at step 4: 7 (score 0.5^4) goes, 5 (two misses of 4: 0.25) and 1 (base 2, 0.5^1) stay; 3 comes in
    gids, scores = cache.scores()
    assert dict(zip(gids.tolist(), scores.tolist())) == {5: 0.25, 1: 1.0}
    pf.run_pending()
    assert cached(cache) == [1, 3, 5]
    t = cache.tier
    assert (t.evictions, t.prefetch_issued, t.prefetch_used) == (1, 4, 2)  # 5 and 1 were hit; 7 never, 3 not yet
    assert t.prefetch_bytes == 4 * ROW * 4


def test_massivegnn_random_fill_is_seeded() -> None:
    def fill(seed: int) -> list[int]:
        cache, pf = policy("massivegnn", 4, prefetch_fraction=0.4, initial_fill="random", seed=seed)
        cache.warm_up(tiny_partitions([1] * N), "feat")
        pf.run_pending()
        return cached(cache)

    assert fill(1) == fill(1) and len(fill(1)) == 4
    assert any(fill(1) != fill(s) for s in range(2, 6))


def failing_fetch(ids: np.ndarray) -> np.ndarray:
    raise Unavailable("graph-store of partition 0 is down")


def test_a_failed_prefetch_leaves_misses_and_is_retried_next_round() -> None:
    cache, pf = policy("massivegnn", 3, fetch=failing_fetch, prefetch_fraction=0.2, period_steps=1)
    cache.warm_up(tiny_partitions([1, 1, 1, 1, 1, 9, 1, 8, 1, 1]), "feat")
    pf.run_pending()
    assert cached(cache) == [] and cache.tier.prefetch_failed == 2
    assert access(cache, [5, 7]) == [False, False]  # served as misses, rows exact (checked in access)
    pf._fetch = rows  # the graph-store is back
    pf.run_pending()  # the round after step 1 asked again for the most-missed nodes
    pf.run_pending()
    assert access(cache, [5, 7]) == [True, True]


# -- look-ahead --------------------------------------------------------------------------------


def test_lookahead_evicts_what_is_needed_furthest_in_the_window() -> None:
    cache, _ = policy("lookahead", 2, lookahead_prefetch_steps=0)
    assert isinstance(cache, LookaheadCache)
    trace = [[1, 2, 3], [3], [2], [1], [3]]
    for s in range(3):  # a window of 3 steps: step 3 and 4 are not known yet when step 0 is gathered
        cache.on_sampled((0, s), np.array(trace[s]))
    assert access(cache, trace[0], (0, 0)) == [False, False, False]
    assert cached(cache) == [2, 3]  # 3 (step 1) and 2 (step 2) are needed before 1 (unknown)
    assert cache.next_use(np.array([1, 2, 3])).tolist() == [NEVER, 2, 1]
    cache.on_sampled((0, 3), np.array(trace[3]))
    assert access(cache, trace[1], (0, 1)) == [True]
    assert access(cache, trace[2], (0, 2)) == [True]
    cache.on_sampled((0, 4), np.array(trace[4]))
    assert access(cache, trace[3], (0, 3)) == [False]
    assert 3 in cached(cache)  # needed at step 4; 1 and 2 are needed nowhere in the window
    assert access(cache, trace[4], (0, 4)) == [True]
    assert cache.window == []


def test_lookahead_prefetches_upcoming_misses_into_free_slots() -> None:
    cache, pf = policy("lookahead", 10, lookahead_prefetch_steps=1)
    trace = [[1, 2], [3], [4, 5], [6]]
    for s, ids in enumerate(trace):
        cache.on_sampled((0, s), np.array(ids))
    assert pf.pending == 0  # nothing before the stream's first gather: demand fills the cache first
    assert access(cache, trace[0], (0, 0)) == [False, False]
    assert pf.run_pending() == 1  # step 2 (two ahead) is prefetched while step 1 is gathered
    assert access(cache, trace[1], (0, 1)) == [False]
    pf.run_pending()
    assert access(cache, trace[2], (0, 2)) == [True, True]
    assert access(cache, trace[3], (0, 3)) == [True]
    t = cache.tier
    assert (t.prefetch_issued, t.prefetch_used, t.misses) == (3, 3, 3)


def test_a_failed_lookahead_prefetch_leaves_misses_and_exact_rows() -> None:
    def down(ids: np.ndarray) -> np.ndarray:
        raise Unavailable("graph-store down")

    cache, pf = policy("lookahead", 10, fetch=down, lookahead_prefetch_steps=1)
    trace = [[1, 2], [3], [4, 5], [6]]
    for s, ids in enumerate(trace):
        cache.on_sampled((0, s), np.array(ids))
    assert access(cache, trace[0], (0, 0)) == [False, False]
    assert pf.run_pending() == 1  # the prefetch of step 2 runs and fails
    assert access(cache, trace[1], (0, 1)) == [False]
    pf.run_pending()
    assert access(cache, trace[2], (0, 2)) == [False, False]  # demand misses, rows still exact
    t = cache.tier
    assert t.prefetch_failed == t.prefetch_issued > 0 and t.prefetch_used == 0


def test_lookahead_prefetch_never_evicts_a_row_with_a_nearer_use() -> None:
    cache, pf = policy("lookahead", 2, lookahead_prefetch_steps=1)
    trace = [[1, 2], [9], [1, 2], [3]]
    for s, ids in enumerate(trace):
        cache.on_sampled((0, s), np.array(ids))
    access(cache, trace[0], (0, 0))
    assert access(cache, trace[1], (0, 1)) == [False]
    pf.run_pending()
    assert cached(cache) == [1, 2]  # 9 is bypassed, and 3 (step 3) may not push out 1 or 2 (step 2)
    assert access(cache, trace[2], (0, 2)) == [True, True]
    assert cache.tier.prefetch_issued == 0


def test_lookahead_prefetch_displaces_only_colder_rows_needed_nowhere_in_the_window() -> None:
    cache, pf = policy("lookahead", 3, lookahead_prefetch_steps=1)
    assert isinstance(cache, LookaheadCache)
    cache.tier.insert(np.array([1, 2, 3]), rows([1, 2, 3]))
    cache._freq[[1, 2, 3, 7, 8]] = [5, 1, 1, 3, 1]  # access counts of earlier epochs (set directly for brevity)
    cache.on_sampled((0, 0), np.array([1]))
    access(cache, [1], (0, 0))
    cache.on_sampled((0, 1), np.array([2]))
    cache.on_sampled((0, 2), np.array([7, 8]))  # due: two steps ahead of the cursor
    # displaceable: 1 (6 accesses) and 3 (1); 2 is needed at step 1. Only 7 (3) beats a row (3, with 1).
    assert pf.run_pending() == 1 and cache.tier.prefetch_issued == 1
    assert cached(cache) == [1, 2, 7]
    assert access(cache, [2], (0, 1)) == [True]
    assert access(cache, [7, 8], (0, 2)) == [True, False]
    assert cache.tier.prefetch_used == 1


def test_lookahead_forgets_a_closed_stream() -> None:
    cache, _ = policy("lookahead", 2, lookahead_prefetch_steps=0)
    assert isinstance(cache, LookaheadCache)
    cache.on_sampled((7, 0), np.array([1, 2]))
    cache.on_sampled((7, 1), np.array([2, 3]))
    cache.forget(7)
    assert cache.window == [] and cache.next_use(np.array([1, 2, 3])).tolist() == [NEVER] * 3


def test_replays_are_deterministic() -> None:
    g = np.random.default_rng(0)
    trace = [np.sort(g.choice(N, size=4, replace=False)) for _ in range(20)]

    def run(name: str) -> tuple:
        cache, pf = policy(name, 4, period_steps=3, alpha=0.2, initial_fill="random", seed=3)
        cache.warm_up(tiny_partitions(list(range(N))), "feat")
        pf.run_pending()
        seq = []
        for s, ids in enumerate(trace):
            cache.on_sampled((0, s), ids)
            seq.append(tuple(access(cache, ids.tolist(), (0, s))))
            pf.run_pending()
        return tuple(seq), cache.tier.stats()

    for name in ("static_degree", "lru", "massivegnn", "lookahead"):
        assert run(name) == run(name)
