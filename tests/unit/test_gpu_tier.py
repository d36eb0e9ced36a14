"""The GPU cache tier and its loader wiring, with the kernels on the CPU emulator: exact rows,
per-tier counters, the wrapped policy's behaviour, zero-copy reads of the (pinned) host tier,
and the default path untouched where no GPU is usable."""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path
from typing import Any

import numpy as np
import pytest

from graphfeed.common.errors import InvalidArgument
from graphfeed.gpu_kernels._cuda import gpu_available
from graphfeed.gpu_kernels.emulator import EmulatorBackend, compiler
from graphfeed.graph_store.partitions import LocalPartitionSet
from graphfeed.loader.cache import gpu_tier as tier_mod
from graphfeed.loader.cache.base import CacheOptions
from graphfeed.loader.cache.belady import NEVER
from graphfeed.loader.cache.gpu_tier import GpuTier, GpuTieredCache, with_gpu_tier
from graphfeed.loader.cache.lookahead import LookaheadCache
from graphfeed.loader.cache.policies import make_cache
from graphfeed.loader.cache.prefetch import Prefetcher, node_data_fetcher
from graphfeed.loader.core import Loader
from graphfeed.loader.job import JobSpec
from graphfeed.sampler.core import MultiHopSampler
from tests.graphs import arithmetic_features

pytestmark = pytest.mark.skipif(compiler() is None, reason="no C++20 compiler for the kernel emulator")
F, N = 4, 100  # the arith_root fixture: feat[v] = v * 4 + [0, 1, 2, 3] by input id v
ROW_BYTES = 4 * F


@pytest.fixture(scope="module")
def emu() -> EmulatorBackend:
    return EmulatorBackend(block=64, max_blocks=2)


@pytest.fixture(scope="module")
def feat(arith_root: Path) -> np.ndarray:
    orig = np.load(arith_root / "orig_ids.npy")  # gid -> input id
    return arithmetic_features(orig)


def rows(ids: list[int] | np.ndarray) -> np.ndarray:
    return (np.asarray(ids, dtype=np.int64)[:, None] * 10 + np.arange(2)[None, :]).astype(np.float32)


def test_gpu_tier_hand_trace(emu: EmulatorBackend) -> None:
    t = GpuTier(3 * 8, (2,), np.float32, 10, backend=emu)
    assert t.capacity_rows == 3 and t.name == "gpu"
    t.insert(np.array([3, 7]), rows([3, 7]))
    hit, got = t.lookup(np.array([7, 1, 3]))
    assert hit.tolist() == [True, False, True] and np.array_equal(got, rows([7, 3]))
    assert (t.hits, t.misses, t.inserts, t.nbytes) == (2, 1, 2, 16)
    assert t.evict(np.array([3, 9])) == 1
    assert t.slot_of.tolist() == t.slots(np.arange(10)).tolist()  # device table == host mirror
    t.insert(np.array([0, 9]), rows([0, 9]))  # reuses the freed slot
    hit, got = t.lookup(np.array([0, 9, 7, 3]))
    assert hit.tolist() == [True, True, True, False] and np.array_equal(got, rows([0, 9, 7]))
    with pytest.raises(ValueError):
        t.insert(np.array([1]), rows([1]))  # full
    with pytest.raises(InvalidArgument):
        t.lookup(np.array([10]))


@pytest.fixture
def tiered(emu: EmulatorBackend, parts: LocalPartitionSet) -> Iterator[GpuTieredCache]:
    inner = make_cache("lru", 10 * ROW_BYTES, row_shape=(F,), dtype=np.float32, num_nodes=N)
    c = with_gpu_tier(inner, 14 * ROW_BYTES, backend=emu)
    assert isinstance(c, GpuTieredCache) and c.inner is inner and c.host_pinned
    c.warm_up(parts, "feat")
    yield c


def test_device_lookups_read_in_id_order_only_while_gpu_hits_are_few(
    tiered: GpuTieredCache, feat: np.ndarray, monkeypatch: pytest.MonkeyPatch
) -> None:
    """After a lookup that the GPU tier mostly served, the next one reads host rows as given
    (sorting them costs more than it saves); after one it mostly missed, the kernels decide."""
    asked: list[bool | None] = []
    gather = tier_mod.kernels.cache_gather

    def spy(*args: Any, sorted_reads: bool | None = None, **kw: Any) -> Any:
        asked.append(sorted_reads)
        return gather(*args, sorted_reads=sorted_reads, **kw)

    monkeypatch.setattr(tier_mod.kernels, "cache_gather", spy)
    on_gpu = np.flatnonzero(tiered.gpu.contains(np.arange(N)))
    off_gpu = np.setdiff1d(np.arange(N), on_gpu)
    for ids in (on_gpu, on_gpu, off_gpu, off_gpu):
        out, miss = tiered.lookup_device(ids)
        want = feat[ids].copy()
        want[miss] = 0
        assert np.array_equal(out, want)  # the same rows either way
    assert asked == [None, False, False, None]


def test_warm_up_puts_the_highest_degree_nodes_on_the_gpu(
    tiered: GpuTieredCache, arith_root: Path, feat: np.ndarray
) -> None:
    degree = 1 + np.load(arith_root / "orig_ids.npy") % 7  # deg(v) = 1 + v % 7
    on_gpu = np.flatnonzero(tiered.gpu.contains(np.arange(N)))
    assert len(on_gpu) == 14 and (degree[on_gpu] == 7).all()  # all 14 nodes of degree 7
    assert [t.name for t in tiered.tiers()] == ["gpu", "host"]
    hit, got = tiered.lookup(on_gpu)
    assert hit.all() and np.array_equal(got, feat[on_gpu])


def test_lookups_combine_tiers_and_the_host_policy_still_runs(tiered: GpuTieredCache, feat: np.ndarray) -> None:
    on_gpu = np.flatnonzero(tiered.gpu.contains(np.arange(N)))
    off_gpu = np.setdiff1d(np.arange(N), on_gpu)
    ids = np.concatenate([on_gpu[:3], off_gpu[:4]])
    hit, got = tiered.lookup(ids)
    assert hit.tolist() == [True] * 3 + [False] * 4 and np.array_equal(got, feat[on_gpu[:3]])
    tiered.on_access(ids, hit)
    tiered.admit(ids[~hit], feat[ids[~hit]])  # LRU admits the host misses, not the GPU rows
    assert np.array_equal(tiered.inner.tier.cached_ids(), np.sort(off_gpu[:4]))
    for read in ("lookup", "lookup_device"):
        ids = np.concatenate([off_gpu[3:6], on_gpu[5:7], off_gpu[:2]])  # miss, miss, host, gpu, gpu, host, host
        if read == "lookup":
            hit, got = tiered.lookup(ids)
            full = np.zeros((len(ids), F), np.float32)
            full[hit] = got
            miss = np.flatnonzero(~hit)
        else:
            full, miss = tiered.lookup_device(ids)
        assert miss.tolist() == [1, 2]
        want = feat[ids].copy()
        want[miss] = 0
        assert np.array_equal(full, want), read
    g, h = (t.stats() for t in tiered.tiers())
    assert (g.hits, g.misses) == (3 + 2 + 2, 4 + 5 + 5)
    assert (h.hits, h.misses) == (0 + 3 + 3, 4 + 2 + 2)


def test_zero_copy_reads_see_rows_the_host_policy_admits_later(tiered: GpuTieredCache, feat: np.ndarray) -> None:
    off_gpu = np.flatnonzero(~tiered.gpu.contains(np.arange(N)))
    evicting = off_gpu[:25]  # more than the 10 host slots: LRU evicts within the pinned slab
    for lo in range(0, 25, 5):
        ids = evicting[lo : lo + 5]
        out, miss = tiered.lookup_device(ids)
        tiered.on_access(ids, np.isin(np.arange(5), miss, invert=True))
        tiered.fill(out, miss, feat[ids[miss]])
        assert np.array_equal(out, feat[ids])
        tiered.admit(ids[miss], feat[ids[miss]])
    held = tiered.inner.tier.cached_ids()
    assert len(held) == 10 and set(held) == set(evicting[15:])
    out, miss = tiered.lookup_device(held)
    assert len(miss) == 0 and np.array_equal(out, feat[held])


def test_unpinned_host_tier_gives_the_same_rows(
    emu: EmulatorBackend, parts: LocalPartitionSet, feat: np.ndarray
) -> None:
    inner = make_cache("static_degree", 30 * ROW_BYTES, row_shape=(F,), dtype=np.float32, num_nodes=N)
    c = GpuTieredCache(inner, GpuTier(10 * ROW_BYTES, (F,), np.float32, N, backend=emu), pin_host=False)
    c.warm_up(parts, "feat")
    assert not c.host_pinned and c.name == "gpu+static_degree"
    ids = np.arange(N)
    out, miss = c.lookup_device(ids)
    assert len(miss) == N - 30  # inclusive tiers: the GPU's 10 are among the host's top 30
    assert np.array_equal(np.delete(out, miss, axis=0), np.delete(feat, miss, axis=0))


def test_a_lookahead_policy_behind_the_gpu_tier_hears_every_hook(
    emu: EmulatorBackend, parts: LocalPartitionSet, feat: np.ndarray
) -> None:
    """The wrapper hands the host policy all it works from: the sampled window and the
    prefetcher (it prefetches upcoming host misses), a stream's end (it forgets its window)
    and close (its prefetches stop)."""
    opts = CacheOptions(lookahead_prefetch_steps=1)
    inner = make_cache("lookahead", 10 * ROW_BYTES, row_shape=(F,), dtype=np.float32, num_nodes=N, options=opts)
    c = with_gpu_tier(inner, 14 * ROW_BYTES, backend=emu)
    assert isinstance(c, GpuTieredCache) and isinstance(c.inner, LookaheadCache) and isinstance(inner, LookaheadCache)
    pf = Prefetcher(node_data_fetcher(parts, "feat"), manual=True, max_pending=100)
    c.attach(pf)
    c.warm_up(parts, "feat")
    off_gpu = np.flatnonzero(~c.gpu.contains(np.arange(N)))
    trace = [off_gpu[0:2], off_gpu[2:3], off_gpu[3:5], off_gpu[5:6]]  # as in test_cache_policies, off the GPU
    for s, ids in enumerate(trace):
        c.on_sampled((0, s), ids)

    def access(step: int) -> list[bool]:
        ids = trace[step]
        hit, got = c.lookup(ids)
        assert np.array_equal(got, feat[ids[hit]])
        c.on_access(ids, hit, (0, step))
        c.admit(ids[~hit], feat[ids[~hit]])
        return hit.tolist()

    assert access(0) == [False, False]
    assert pf.run_pending() == 1  # step 2 (two ahead) is prefetched while step 1 is gathered
    assert access(1) == [False]
    pf.run_pending()
    assert access(2) == [True, True] and access(3) == [True]
    t = inner.tier
    assert (t.prefetch_issued, t.prefetch_used, t.misses) == (3, 3, 3)
    later = off_gpu[10:12]
    c.on_sampled((7, 0), later)
    assert (inner.next_use(later) != NEVER).all()
    c.forget(7)
    assert (inner.next_use(later) == NEVER).all()
    c.close()
    assert not pf.submit(later, lambda *_: None, lambda *_: None)  # closed: no prefetch is queued any more


def test_without_a_budget_or_a_gpu_the_policy_is_unchanged(emu: EmulatorBackend) -> None:
    inner = make_cache("lru", 10 * ROW_BYTES, row_shape=(F,), dtype=np.float32, num_nodes=N)
    assert with_gpu_tier(inner, 0, backend=emu) is inner
    assert with_gpu_tier(inner, ROW_BYTES - 1, backend=emu) is inner  # holds no row
    if not gpu_available():
        assert with_gpu_tier(inner, 1 << 20) is inner


JOB = JobSpec(job_id="g", job_seed=3, split="train", batch_size=8, fanouts=(3, 2), shuffle=True)


def _epoch(loader: Loader) -> list[np.ndarray]:
    with loader.stream(JOB, 0) as s:
        return [mb.features for mb in s]


def test_loader_default_path_has_no_gpu_tier(parts: LocalPartitionSet) -> None:
    loader = Loader(parts, MultiHopSampler(parts), cache_policy="lru", cache_bytes=20 * ROW_BYTES, gpu_cache_bytes=0)
    try:
        _epoch(loader)
        assert [t.tier for t in loader.cache_stats()] == ["host"]
    finally:
        loader.close()


def test_loader_with_an_emulated_gpu_tier_streams_the_same_features(
    parts: LocalPartitionSet, emu: EmulatorBackend, monkeypatch: pytest.MonkeyPatch
) -> None:
    kw: dict[str, Any] = {"cache_policy": "lru", "cache_bytes": 20 * ROW_BYTES}
    plain = Loader(parts, MultiHopSampler(parts), **kw)
    monkeypatch.setattr(tier_mod, "gpu_available", lambda: True)
    monkeypatch.setattr(tier_mod, "cuda_backend", lambda: emu)
    gpu = Loader(parts, MultiHopSampler(parts), gpu_cache_bytes=14 * ROW_BYTES, **kw)
    try:
        want, got = _epoch(plain), _epoch(gpu)
        assert len(got) == len(want) and all(np.array_equal(a, b) for a, b in zip(got, want))
        stats = {t.tier: t for t in gpu.cache_stats()}
        assert set(stats) == {"gpu", "host"} and stats["gpu"].hits > 0
        assert stats["gpu"].hits + stats["gpu"].misses == sum(len(f) for f in got)
    finally:
        plain.close()
        gpu.close()


def test_embedded_data_loader_hands_device_features_to_torch(
    parts: LocalPartitionSet, emu: EmulatorBackend, monkeypatch: pytest.MonkeyPatch
) -> None:
    """The embedded path: the stream gathers into "device" arrays (one cache_gather kernel,
    misses filled), the data loader wraps them through DLPack, and training sees the same
    tensors as from the host path."""
    pytest.importorskip("dgl")
    from graphfeed.trainer.dataloader import EmbeddedDataLoader

    kw: dict[str, Any] = {"cache_policy": "lru", "cache_bytes": 20 * ROW_BYTES}
    plain = Loader(parts, MultiHopSampler(parts), **kw)
    monkeypatch.setattr(tier_mod, "gpu_available", lambda: True)
    monkeypatch.setattr(tier_mod, "cuda_backend", lambda: emu)
    gpu = Loader(parts, MultiHopSampler(parts), gpu_cache_bytes=14 * ROW_BYTES, **kw)
    lookups = []
    monkeypatch.setattr(GpuTieredCache, "lookup", lambda *a: lookups.append(a))  # the host path must not run
    job: dict[str, Any] = dict(fanouts=[3, 2], batch_size=8, seed=3, job_id="g")
    try:
        want = [
            (i.numpy().copy(), b[0].srcdata["feat"].numpy().copy(), b[-1].dstdata["label"].numpy().copy())
            for i, _o, b in EmbeddedDataLoader(plain, **job)
        ]
        dl = EmbeddedDataLoader(gpu, device_features=True, **job)
        assert dl.device_features and not EmbeddedDataLoader(plain, device_features=True, **job).device_features
        got = [(i.numpy(), b[0].srcdata["feat"].numpy(), b[-1].dstdata["label"].numpy()) for i, _o, b in dl]
        assert len(got) == len(want) == len(dl) and not lookups
        for (gi, gf, gl), (wi, wf, wl) in zip(got, want):
            assert np.array_equal(gi, wi) and np.array_equal(gf, wf) and np.array_equal(gl, wl)
        stats = {t.tier: t for t in gpu.cache_stats()}
        assert stats["gpu"].hits > 0 and stats["gpu"].hits + stats["gpu"].misses == sum(len(f) for _, f, _ in got)
        assert dl.stats.cache_hits >= stats["gpu"].hits and dl.state_dict() == {"epoch": 1, "step": 0}
    finally:
        plain.close()
        gpu.close()
