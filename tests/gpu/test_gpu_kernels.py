"""The kernels on a real GPU against the NumPy references: gathers and cache lookups bit for
bit (device tables and zero-copy pinned host tables, float32/float16, odd widths, misaligned
rows), sampling (uniform on a CSR, and temporal: recent and uniform before t) bit for bit and
by distribution, the GPU tier, and the DLPack hand-off.

Skipped without CUDA + CuPy. Needs only numpy, cupy and pytest (torch optional), so it runs on
the bare GPU image: ``python bench/gpu.py --part test`` (no conftest, no project venv).
"""

from __future__ import annotations

import math
from collections import Counter

import numpy as np
import pytest

from graphfeed.gpu_kernels import reference
from graphfeed.gpu_kernels._cuda import gpu_available, unavailable_reason

pytestmark = [pytest.mark.gpu, pytest.mark.skipif(not gpu_available(), reason=f"no CUDA GPU: {unavailable_reason()}")]

_DEG = np.array([0, 1, 4, 5, 6, 9, 31, 32, 33, 63, 64, 65, 66, 100, 150, 7, 0, 3, 120, 2, 5000])
INDPTR = np.concatenate([[0], np.cumsum(_DEG)]).astype(np.int64)
INDICES = 1000 + 3 * np.arange(INDPTR[-1], dtype=np.int64)
EIDS = 7 + np.arange(INDPTR[-1], dtype=np.int64)
ROWS = np.concatenate([np.arange(len(_DEG)), np.random.default_rng(0).integers(0, len(_DEG), 3000)]).astype(np.int64)


@pytest.fixture(scope="module")
def cp():  # noqa: ANN201 - the cupy module
    import cupy

    return cupy


@pytest.fixture(scope="module")
def K():  # noqa: ANN201, N802 - the kernels module
    from graphfeed.gpu_kernels import kernels

    return kernels


def _mapped(arr: np.ndarray):  # noqa: ANN202
    from graphfeed.gpu_kernels.memory import MappedHostArray

    return MappedHostArray.from_array(arr)


@pytest.mark.parametrize(
    ("dtype", "width"), [(np.float32, 128), (np.float16, 128), (np.float32, 3), (np.float16, 7), (np.float32, 1000)]
)
@pytest.mark.parametrize("where", ["device", "pinned", "pinned-sorted"])
def test_gather_is_bit_identical(cp, K, dtype: type[np.generic], width: int, where: str) -> None:  # noqa: ANN001, N803
    table = np.random.default_rng(1).standard_normal((5000, width)).astype(dtype)
    table[7, 0] = np.nan
    ids = np.random.default_rng(2).integers(0, len(table), 20_000)
    pinned = _mapped(table) if where != "device" else None
    src = pinned.device if pinned is not None else cp.asarray(table)
    sort = where == "pinned-sorted" or None  # None: the default (20k rows: as given)
    got = cp.asnumpy(K.gather_rows(src, ids, sorted_reads=sort))
    assert got.tobytes() == reference.gather_rows(table, ids).tobytes()
    if width % 4 == 0:  # a view 1 element in: rows no longer 16-byte aligned -> narrower loads
        got = cp.asnumpy(K.gather_rows(src[1:], ids[ids < len(table) - 1], sorted_reads=sort))
        assert got.tobytes() == table[1:][ids[ids < len(table) - 1]].tobytes()


@pytest.mark.parametrize("host", ["none", "tier", "full"])
def test_cache_gather_is_bit_identical(cp, K, host: str) -> None:  # noqa: ANN001, N803
    rng = np.random.default_rng(3)
    n, width = 20_000, 128
    table = rng.standard_normal((n, width)).astype(np.float32)
    gpu_ids = rng.choice(n, 5000, replace=False)
    gpu_slot = np.full(n, -1, dtype=np.int32)
    gpu_slot[gpu_ids] = np.arange(5000)
    host_ids = rng.choice(n, 8000, replace=False)
    host_slot = np.full(n, -1, dtype=np.int32)
    host_slot[host_ids] = np.arange(8000)
    args = [gpu_slot, table[gpu_ids]]
    if host == "tier":
        args += [table[host_ids], host_slot]
    elif host == "full":
        args += [table]
    ids = rng.integers(0, n, 50_000)
    want_out, want_where = reference.cache_gather(ids, *args)
    dev_args = [cp.asarray(args[0]), cp.asarray(args[1])] + [_mapped(a).device for a in args[2:]]
    for sort in (False, True):
        out, where = K.cache_gather(ids, *dev_args, sorted_reads=sort)
        assert cp.asnumpy(out).tobytes() == want_out.tobytes()
        assert np.array_equal(cp.asnumpy(where), want_where)


def test_pinned_tables_count_as_host_memory_and_device_arrays_do_not(cp) -> None:  # noqa: ANN001
    from graphfeed.gpu_kernels.backend import cuda_backend

    be = cuda_backend()
    pinned = _mapped(np.zeros((4, 4), dtype=np.float32))
    assert be.is_host_memory(pinned.device) and not be.is_host_memory(cp.zeros((4, 4), dtype=cp.float32))


@pytest.mark.parametrize("replace", [False, True])
@pytest.mark.parametrize("fanout", [-1, 0, 1, 5, 10, 25, 32, 33, 64, 65, 100, 200])
def test_sampling_is_bit_identical(cp, K, fanout: int, replace: bool) -> None:  # noqa: ANN001, N803
    for seed in (0, 123456789, 2**64 - 1):
        got = K.sample_csr(
            cp.asarray(INDPTR), cp.asarray(INDICES), cp.asarray(EIDS), cp.asarray(ROWS), fanout, replace, seed
        )
        want = reference.sample_csr(INDPTR, INDICES, EIDS, ROWS, fanout, replace, seed)
        for g, w in zip(got, want):
            assert np.array_equal(cp.asnumpy(g), w)


def _chi2_ok(observed: list[int], expected: list[float]) -> bool:
    """Chi-square statistic within 6 standard deviations of its mean (no SciPy on the GPU image)."""
    stat = sum((o - e) ** 2 / e for o, e in zip(observed, expected))
    df = len(observed) - 1
    return stat < df + 6 * math.sqrt(2 * df)


@pytest.mark.parametrize(("deg", "k"), [(7, 3), (67, 65)])
def test_sampling_without_replacement_is_uniform_over_subsets(cp, K, deg: int, k: int) -> None:  # noqa: ANN001, N803
    draws = 200_000
    e = np.arange(deg, dtype=np.int64)
    _, _, eids = K.sample_csr(np.array([0, deg]), e, e, np.zeros(draws, dtype=np.int64), k, False, 5)
    eids = cp.asnumpy(eids).reshape(draws, k)
    if k <= deg // 2:
        counts = Counter(map(tuple, eids))
    else:  # count the complements (deg - k of them): fewer outcomes to enumerate
        mask = np.ones((draws, deg), dtype=bool)
        mask[np.arange(draws)[:, None], eids] = False
        counts = Counter(map(tuple, np.nonzero(mask)[1].reshape(draws, deg - k)))
    outcomes = math.comb(deg, k)
    assert len(counts) == outcomes
    assert _chi2_ok(list(counts.values()), [draws / outcomes] * outcomes)


def test_sampling_with_replacement_is_uniform(cp, K) -> None:  # noqa: ANN001, N803
    deg, k, draws = 9, 40, 20_000
    e = np.arange(deg, dtype=np.int64)
    _, _, eids = K.sample_csr(np.array([0, deg]), e, e, np.zeros(draws, dtype=np.int64), k, True, 9)
    counts = np.bincount(cp.asnumpy(eids), minlength=deg)
    assert _chi2_ok(counts.tolist(), [draws * k / deg] * deg)


def _temporal_graph() -> tuple[tuple[np.ndarray, ...], np.ndarray, np.ndarray]:
    """The sampling CSR with timestamps ascending per row (ties included), and roots at times
    before, inside and after their rows' edges."""
    rng = np.random.default_rng(5)
    row_of = np.repeat(np.arange(len(_DEG)), _DEG)
    ts = np.sort(row_of * 10**6 + rng.integers(0, 2000, INDPTR[-1])) - row_of * 10**6  # sorted within each row
    times = rng.integers(-100, 2100, len(ROWS))
    return (INDPTR, INDICES, ts, EIDS), ROWS, times


@pytest.mark.parametrize("strategy", ["recent", "uniform"])
@pytest.mark.parametrize("fanout", [-1, 0, 1, 5, 10, 25, 32, 33, 64, 65, 100, 200])
def test_temporal_sampling_is_bit_identical(cp, K, fanout: int, strategy: str) -> None:  # noqa: ANN001, N803
    csr, rows, times = _temporal_graph()
    dev = [cp.asarray(a) for a in (*csr, rows, times)]
    for seed, first in ((0, 0), (123456789, 17), (2**64 - 1, 2**40)):
        got = K.sample_temporal(dev[0], dev[1], dev[2], dev[3], dev[4], dev[5], fanout, strategy, seed, first)
        want = reference.sample_temporal(csr[0], csr[1], csr[2], csr[3], rows, times, fanout, strategy, seed, first)
        for g, w in zip(got, want):
            assert np.array_equal(cp.asnumpy(g), w)


def test_temporal_uniform_before_t_is_uniform_over_subsets(cp, K) -> None:  # noqa: ANN001, N803
    deg, before, k, draws = 30, 7, 3, 200_000  # ts = position: 7 edges before t = 7
    e = np.arange(deg, dtype=np.int64)
    times = np.full(draws, before, dtype=np.int64)
    _, _, _, eids = K.sample_temporal(
        np.array([0, deg]), e, e, e, np.zeros(draws, dtype=np.int64), times, k, "uniform", 5
    )
    counts = Counter(map(tuple, cp.asnumpy(eids).reshape(draws, k)))
    outcomes = math.comb(before, k)
    assert len(counts) == outcomes
    assert _chi2_ok(list(counts.values()), [draws / outcomes] * outcomes)


def test_gpu_tier_round_trip_and_dlpack(cp) -> None:  # noqa: ANN001
    tier = pytest.importorskip(
        "graphfeed.loader.cache.gpu_tier", reason="the loader's deps (grpc, ...) are not installed"
    )
    t = tier.GpuTier(100 * 512, (128,), np.float32, 1000)
    ids = np.arange(0, 1000, 10)
    rows = np.random.default_rng(4).standard_normal((100, 128)).astype(np.float32)
    t.insert(ids, rows)
    hit, got = t.lookup(np.array([10, 11, 990]))
    assert hit.tolist() == [True, False, True] and np.array_equal(got, rows[[1, 99]])
    torch = pytest.importorskip("torch")
    from graphfeed.gpu_kernels.memory import to_torch

    x = to_torch(t.rows)
    assert x.is_cuda and x.data_ptr() == t.rows.data.ptr  # same memory: no copy
    assert torch.equal(x[1].cpu(), torch.from_numpy(rows[1]))


def test_auto_cache_budget_is_a_share_of_free_device_memory(cp) -> None:  # noqa: ANN001
    from graphfeed.gpu_kernels._cuda import auto_cache_bytes

    free, _ = cp.cuda.runtime.memGetInfo()
    assert 0 < auto_cache_bytes() <= free // 4 + 1


def test_loader_stream_on_device_gives_the_host_path_s_features(cp, tmp_path) -> None:  # noqa: ANN001
    """The embedded loader's device path on a real GPU: features arrive as CuPy arrays (GPU tier
    + zero-copy pinned host tier + misses copied up), equal to the host path's, and reach torch
    through DLPack without a copy. Needs the project's own dependencies (skipped on a bare image)."""
    core = pytest.importorskip(
        "graphfeed.loader.core", reason="the loader's deps (grpc, rocksdict, numba) are not installed"
    )
    from graphfeed.common.partition import part_dir_name
    from graphfeed.graph_store.partitions import LocalPartitionSet
    from graphfeed.graph_store.store import GraphStore
    from graphfeed.loader.job import JobSpec
    from graphfeed.sampler.core import MultiHopSampler
    from tests.graphs import write_arithmetic

    root = write_arithmetic(tmp_path)
    parts = LocalPartitionSet([GraphStore.open(root / part_dir_name(p)) for p in range(2)])
    job = JobSpec(job_id="gpu", job_seed=3, split="train", batch_size=8, fanouts=(3, 2), shuffle=True)
    kw = {"cache_policy": "lru", "cache_bytes": 20 * 16}
    plain, gpu = (
        core.Loader(parts, MultiHopSampler(parts), **kw),
        core.Loader(parts, MultiHopSampler(parts), gpu_cache_bytes=14 * 16, **kw),
    )
    try:
        assert gpu.gpu_features("feat")
        with plain.stream(job, 0) as s:
            want = [mb.features for mb in s]
        with gpu.stream(job, 0, on_device=True) as s:
            got = list(s)
        assert len(got) == len(want)
        for mb, w in zip(got, want):
            assert isinstance(mb.features, cp.ndarray) and np.array_equal(cp.asnumpy(mb.features), w)
        stats = {t.tier: t for t in gpu.cache_stats()}
        assert stats["gpu"].hits > 0 and stats["host"].hits > 0  # both tiers served rows on the device path
        torch = pytest.importorskip("torch")
        from graphfeed.gpu_kernels.memory import to_torch

        x = to_torch(got[0].features)
        assert x.is_cuda and x.data_ptr() == got[0].features.data.ptr
        assert torch.equal(x.cpu(), torch.from_numpy(want[0]))
    finally:
        plain.close()
        gpu.close()
