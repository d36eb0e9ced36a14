"""GPU data path without a GPU: the NumPy references against NumPy/the CPU sampler and
against uniformity, the unmodified CUDA kernels run by the CPU emulator against the references
bit for bit, and every .cu file compiled for sm_90 by nvcc and by NVRTC when those are present."""

from __future__ import annotations

import ctypes
import itertools
import math
import shutil
import subprocess
import sys
from collections import Counter
from pathlib import Path

import numpy as np
import pytest
from scipy import stats

from graphfeed.gpu_kernels import backend, kernels, reference
from graphfeed.gpu_kernels.emulator import EmulatorBackend, compiler
from graphfeed.graph_store.sampling import sample_csr as cpu_sample_csr

KERNEL_DIR = backend.KERNEL_DIR
CU_FILES = sorted(KERNEL_DIR.glob("*.cu"))

# A CSR with every sampling path: degrees 0, 1, k-1, k, k+1, small and large (> 64) rows.
_DEG = np.array([0, 1, 4, 5, 6, 9, 31, 32, 33, 63, 64, 65, 66, 100, 150, 7, 0, 3, 120, 2])
INDPTR = np.concatenate([[0], np.cumsum(_DEG)]).astype(np.int64)
INDICES = 1000 + 3 * np.arange(INDPTR[-1], dtype=np.int64)
EIDS = 7 + np.arange(INDPTR[-1], dtype=np.int64)
ROWS = np.concatenate([np.arange(len(_DEG)), [13, 13, 5, 0, 14]]).astype(np.int64)  # repeats sampled independently
FANOUTS = (-1, 0, 1, 5, 31, 32, 33, 64, 65, 90)


def _segments(offsets: np.ndarray, values: np.ndarray) -> list[np.ndarray]:
    return [values[offsets[i] : offsets[i + 1]] for i in range(len(offsets) - 1)]


def _positions(offsets: np.ndarray, eids: np.ndarray) -> list[np.ndarray]:
    """Local CSR positions of each row's sampled edges (edge id = 7 + CSR position)."""
    return [seg - 7 - INDPTR[r] for seg, r in zip(_segments(offsets, eids), ROWS)]


# -- the counter-based RNG -------------------------------------------------------------------


def _mix(z: int) -> int:
    m = (1 << 64) - 1
    z = ((z ^ (z >> 30)) * 0xBF58476D1CE4E5B9) & m
    z = ((z ^ (z >> 27)) * 0x94D049BB133111EB) & m
    return z ^ (z >> 31)


def test_rand_and_bounded_match_exact_integer_arithmetic() -> None:
    m = (1 << 64) - 1
    for seed, i, j in [(0, 0, 0), (2**64 - 1, 5, 7), (12345, 10**6, 2**31), (1, 2**40, 3)]:
        want = _mix((_mix((seed + (i + 1) * 0x9E3779B97F4A7C15) & m) + (j + 1) * 0xD1B54A32D192ED03) & m)
        got = int(reference.rand_u64(seed, np.array([i]), np.array([j]))[0])
        assert got == want
        for bound in (1, 2, 3, 1000, 2**31 - 1, 2**32 - 1):
            assert int(reference.bounded(np.array([got], dtype=np.uint64), np.array([bound]))[0]) == (got * bound) >> 64


# -- gathers --------------------------------------------------------------------------------


@pytest.mark.parametrize(("dtype", "width"), [(np.float32, 128), (np.float16, 7), (np.float32, 3), (np.float16, 64)])
def test_reference_gather_is_fancy_indexing(dtype: type, width: int) -> None:
    table: np.ndarray = np.random.default_rng(0).standard_normal((50, width)).astype(dtype)
    ids = np.array([3, 3, 49, 0, 17])
    assert np.array_equal(reference.gather_rows(table, ids), table[ids])
    out: np.ndarray = np.empty((5, width), dtype=dtype)
    assert reference.gather_rows(table, ids, out=out) is out and np.array_equal(out, table[ids])
    with pytest.raises(ValueError, match=r"\[0, 50\)"):
        reference.gather_rows(table, np.array([50]))
    with pytest.raises(ValueError):
        reference.gather_rows(table, np.array([-1]))


def _cache_setup() -> tuple[np.ndarray, np.ndarray, np.ndarray, np.ndarray, np.ndarray]:
    table = np.arange(10 * 3, dtype=np.float32).reshape(10, 3)
    gpu_slot = np.full(10, -1, dtype=np.int32)
    gpu_slot[[2, 7]] = [1, 0]
    host_slot = np.full(10, -1, dtype=np.int32)
    host_slot[[7, 4, 5]] = [0, 2, 1]
    return table, gpu_slot, table[[7, 2]], host_slot, table[[7, 5, 4]]


def test_reference_cache_gather_hand_trace() -> None:
    table, gpu_slot, gpu_rows, host_slot, host_rows = _cache_setup()
    ids = np.array([2, 4, 9, 7, 5, 2])
    out, where = reference.cache_gather(ids, gpu_slot, gpu_rows)
    assert where.tolist() == [0, -1, -1, 0, -1, 0]
    assert np.array_equal(out[where == 0], table[ids[where == 0]]) and not out[where < 0].any()
    out, where = reference.cache_gather(ids, gpu_slot, gpu_rows, host_rows, host_slot)
    assert where.tolist() == [0, 1, -1, 0, 1, 0]  # 7 is in both tiers: the GPU wins
    assert np.array_equal(out[where >= 0], table[ids[where >= 0]]) and not out[2].any()
    out, where = reference.cache_gather(ids, gpu_slot, gpu_rows, table)  # full table in host memory
    assert where.tolist() == [0, 1, 1, 0, 1, 0] and np.array_equal(out, table[ids])


# -- sampling: the reference's semantics -----------------------------------------------------


@pytest.mark.parametrize("replace", [False, True])
@pytest.mark.parametrize("fanout", FANOUTS)
def test_reference_sampling_is_what_the_cpu_sampler_computes(fanout: int, replace: bool) -> None:
    ours = reference.sample_csr(INDPTR, INDICES, EIDS, ROWS, fanout, replace, 42)
    cpu = cpu_sample_csr(INDPTR, INDICES, EIDS, ROWS, fanout, replace, 42)
    assert all(a.tobytes() == b.tobytes() for a, b in zip(ours, cpu))  # one stream on CPU and GPU
    deg = INDPTR[ROWS + 1] - INDPTR[ROWS]
    for r, (pos, d) in enumerate(zip(_positions(ours[0], ours[2]), deg)):
        assert np.all(np.diff(pos) >= 0) and (len(pos) == 0 or (pos[0] >= 0 and pos[-1] < d))
        if not replace:
            assert len(np.unique(pos)) == len(pos)
        if fanout == -1 or (not replace and d <= fanout):  # deterministic: every edge, in CSR order
            assert pos.tolist() == list(range(d)), r
    assert np.array_equal(ours[1], INDICES[ours[2] - 7])  # src and eid come from the same positions


def test_reference_sampling_is_a_function_of_the_seed() -> None:
    a = reference.sample_csr(INDPTR, INDICES, EIDS, ROWS, 5, False, 7)
    b = reference.sample_csr(INDPTR, INDICES, EIDS, ROWS, 5, False, 7)
    c = reference.sample_csr(INDPTR, INDICES, EIDS, ROWS, 5, False, 8)
    assert all(np.array_equal(x, y) for x, y in zip(a, b))
    assert not np.array_equal(a[2], c[2])
    with pytest.raises(ValueError):
        reference.sample_csr(INDPTR, INDICES, EIDS, ROWS, -2, False, 0)
    with pytest.raises(ValueError):
        reference.sample_csr(INDPTR, INDICES, EIDS, np.array([len(_DEG)]), 1, False, 0)


def _subset_counts(deg: int, k: int, replace: bool, draws: int, seed: int = 3) -> Counter:
    """How often each sampled tuple of positions comes up, over ``draws`` independent samples."""
    indptr = np.array([0, deg], dtype=np.int64)
    e = np.arange(deg, dtype=np.int64)
    offsets, _, eids = reference.sample_csr(indptr, e, e, np.zeros(draws, dtype=np.int64), k, replace, seed)
    return Counter(tuple(s) for s in _segments(offsets, eids))


@pytest.mark.parametrize(("deg", "k"), [(6, 2), (7, 3)])
def test_floyd_path_picks_every_subset_equally_often(deg: int, k: int) -> None:
    counts = _subset_counts(deg, k, False, 40_000)
    assert len(counts) == math.comb(deg, k)  # every k-subset occurs, nothing else
    assert stats.chisquare(list(counts.values())).pvalue > 1e-4


def test_reservoir_path_picks_subsets_uniformly() -> None:
    deg, k, draws = 67, 65, 60_000  # k > 64: reservoir; C(67, 65) = 2211 subsets = the 2 left out
    counts = _subset_counts(deg, k, False, draws)
    left_out = Counter(tuple(sorted(set(range(deg)) - set(s))) for s in counts.elements())
    assert len(left_out) == math.comb(deg, 2)
    assert stats.chisquare(list(left_out.values())).pvalue > 1e-4


@pytest.mark.parametrize("k", [2, 70])
def test_with_replacement_draws_independent_uniform_positions(k: int) -> None:
    deg = 5
    counts = _subset_counts(deg, k, True, 10_000 if k == 2 else 2_000)
    flat = Counter(p for s, c in counts.items() for p in s for _ in range(c))
    assert stats.chisquare([flat[p] for p in range(deg)]).pvalue > 1e-4
    if k == 2:  # ordered pairs (i <= j) have probability 2/25 (i != j) or 1/25 (i == j)
        pairs = list(itertools.combinations_with_replacement(range(deg), 2))
        expected = np.array([1.0 if i == j else 2.0 for i, j in pairs]) / 25 * sum(counts.values())
        assert stats.chisquare([counts[p] for p in pairs], expected).pvalue > 1e-4


# -- the kernels themselves, on the CPU emulator ---------------------------------------------

needs_cxx = pytest.mark.skipif(compiler() is None, reason="no C++20 compiler for the kernel emulator")


@pytest.fixture(scope="module")
def emu() -> EmulatorBackend:
    return EmulatorBackend(block=64, max_blocks=3)  # few blocks: the grid-stride loops run many times


@needs_cxx
@pytest.mark.parametrize(
    ("dtype", "width", "offset", "unit"),
    [
        (np.float32, 128, 0, 16),
        (np.float16, 128, 0, 16),
        (np.float32, 2, 0, 8),
        (np.float32, 3, 0, 4),
        (np.float16, 7, 0, 2),
        (np.uint8, 5, 0, 1),
        (np.float32, 128, 1, 4),  # offset: base pointer 4 B off
    ],
)
def test_emulated_gather_is_bit_identical(
    emu: EmulatorBackend, dtype: type, width: int, offset: int, unit: int
) -> None:
    base: np.ndarray = np.random.default_rng(1).standard_normal((41, width)).astype(dtype)
    if np.dtype(dtype).kind == "f":
        base[5, 0] = np.nan  # NaN payloads must survive: the kernels move bytes, not floats
    table = base[offset:]
    if offset:  # misalign the base pointer by 4 bytes: forces 4-byte units on 512-byte rows
        raw = np.empty(table.nbytes + 4, dtype=np.uint8)
        table = np.frombuffer(raw[4:].data, dtype=dtype).reshape(table.shape)
        table[...] = base[offset:]
    assert kernels._unit(kernels._row_bytes(table), [emu.ptr(table)]) == unit
    ids = np.random.default_rng(2).integers(0, len(table), 300)
    for sorted_reads in (None, False, True):
        got = kernels.gather_rows(table, ids, sorted_reads=sorted_reads, backend=emu)
        assert got.tobytes() == reference.gather_rows(table, ids).tobytes()
    assert kernels.gather_rows(table, ids[:0], backend=emu).shape == (0, width)


@needs_cxx
def test_large_batches_from_host_memory_are_read_in_id_order(
    emu: EmulatorBackend, monkeypatch: pytest.MonkeyPatch
) -> None:
    """The default read order: argsort(ids) from SORTED_READS_MIN rows on (every emulated array
    counts as host memory; the table-size threshold is lowered); rows land where the ids ask."""
    assert kernels._read_order(emu, np.arange(kernels.SORTED_READS_MIN), [np.zeros(8)], None) == 0  # small table
    monkeypatch.setattr(kernels, "SORTED_READS_MIN_BYTES", 0)
    ids = np.random.default_rng(5).integers(0, 1000, kernels.SORTED_READS_MIN)
    order = kernels._read_order(emu, ids, [ids], None)
    assert np.array_equal(ids[order], np.sort(ids))
    assert kernels._read_order(emu, ids[:-1], [ids], None) == 0  # below the threshold: as given
    assert kernels._read_order(emu, ids, [], None) == 0  # nothing read from host memory
    table = np.arange(1000 * 4, dtype=np.float32).reshape(1000, 4)
    assert kernels.gather_rows(table, ids, backend=emu).tobytes() == table[ids].tobytes()
    gpu_slot = np.full(1000, -1, dtype=np.int32)  # a third on the "GPU": the rest go in id order
    gpu_slot[::3] = np.arange(len(gpu_slot[::3]))
    host_slot = np.where(np.arange(1000) % 5 == 0, -1, np.arange(1000)).astype(np.int32)  # some misses
    args = (gpu_slot, table[::3].copy(), table, host_slot)
    out, where = kernels.cache_gather(ids, *args, backend=emu)
    want_out, want_where = reference.cache_gather(ids, *args)
    assert out.tobytes() == want_out.tobytes() and np.array_equal(where, want_where)
    assert set(np.unique(where)) == {-1, 0, 1}


@needs_cxx
def test_emulated_cache_gather_is_bit_identical(emu: EmulatorBackend) -> None:
    table, gpu_slot, gpu_rows, host_slot, host_rows = _cache_setup()
    ids = np.random.default_rng(3).integers(0, 10, 500)
    cases = [(gpu_slot, gpu_rows), (gpu_slot, gpu_rows, host_rows, host_slot), (gpu_slot, gpu_rows, table)]
    for args, sorted_reads in itertools.product(cases, (None, True)):
        out, where = kernels.cache_gather(ids, *args, sorted_reads=sorted_reads, backend=emu)
        want_out, want_where = reference.cache_gather(ids, *args)
        assert out.tobytes() == want_out.tobytes() and np.array_equal(where, want_where)
    with pytest.raises(ValueError):
        kernels.cache_gather(np.array([10]), gpu_slot, gpu_rows, backend=emu)


@needs_cxx
@pytest.mark.parametrize("replace", [False, True])
@pytest.mark.parametrize("fanout", FANOUTS)
def test_emulated_sampling_is_bit_identical(emu: EmulatorBackend, fanout: int, replace: bool) -> None:
    for seed in (0, 2**64 - 1):
        got = kernels.sample_csr(INDPTR, INDICES, EIDS, ROWS, fanout, replace, seed, backend=emu)
        want = reference.sample_csr(INDPTR, INDICES, EIDS, ROWS, fanout, replace, seed)
        for g, w in zip(got, want):
            assert g.dtype == np.int64 and np.array_equal(g, w)


@needs_cxx
@pytest.mark.parametrize("bad", [-1, len(_DEG)])
def test_emulated_sampling_refuses_rows_outside_the_graph(emu: EmulatorBackend, bad: int) -> None:
    """Refused after the one device sync (the count kernel reads no row outside the CSR)."""
    rows = np.append(ROWS, bad)
    with pytest.raises(ValueError, match=rf"rows must be in \[0, {len(_DEG)}\), got \[{min(bad, 0)}, "):
        kernels.sample_csr(INDPTR, INDICES, EIDS, rows, 3, False, 0, backend=emu)


# -- compilation for the H100/H200 (sm_90) ----------------------------------------------------


@pytest.mark.skipif(shutil.which("nvcc") is None, reason="nvcc not on PATH")
@pytest.mark.parametrize("cu", CU_FILES, ids=lambda p: p.name)
def test_kernels_compile_for_sm90_with_nvcc(cu: Path, tmp_path: Path) -> None:
    cmd = [
        "nvcc",
        "-cubin",
        "-arch=sm_90",
        "-std=c++17",
        "-Werror",
        "all-warnings",
        f"-I{KERNEL_DIR}",
        str(cu),
        "-o",
        str(tmp_path / "k.cubin"),
    ]
    res = subprocess.run(cmd, capture_output=True, text=True, timeout=240)
    assert res.returncode == 0, res.stderr
    assert (tmp_path / "k.cubin").stat().st_size > 0


def _nvrtc() -> ctypes.CDLL | None:
    try:
        import nvidia.cuda_nvrtc as pkg  # the wheel torch's CUDA build ships
    except ImportError:
        return None
    libs = sorted(Path(next(iter(pkg.__path__))).glob("lib/libnvrtc.so*"))
    return ctypes.CDLL(str(libs[0])) if libs else None


@pytest.mark.skipif(_nvrtc() is None, reason="no NVRTC library")
@pytest.mark.parametrize("cu", CU_FILES, ids=lambda p: p.name)
def test_kernels_compile_with_nvrtc_as_cupy_does(cu: Path) -> None:
    """The exact text and options ``cupy.RawModule`` gets (header inlined, no include path)."""
    lib = _nvrtc()
    assert lib is not None
    prog = ctypes.c_void_p()
    assert (
        lib.nvrtcCreateProgram(ctypes.byref(prog), backend._module_source(cu).encode(), cu.name.encode(), 0, None, None)
        == 0
    )
    opts = [b"-std=c++17", b"--gpu-architecture=compute_90"]
    rc = lib.nvrtcCompileProgram(prog, len(opts), (ctypes.c_char_p * len(opts))(*opts))
    size = ctypes.c_size_t()
    lib.nvrtcGetProgramLogSize(prog, ctypes.byref(size))
    log = ctypes.create_string_buffer(size.value)
    lib.nvrtcGetProgramLog(prog, log)
    lib.nvrtcDestroyProgram(ctypes.byref(prog))
    assert rc == 0 and not log.value.strip(), log.value.decode()


def test_importing_the_gpu_modules_imports_no_cupy() -> None:
    code = (
        "import sys\n"
        "import graphfeed.gpu_kernels.kernels, graphfeed.gpu_kernels.memory, graphfeed.loader.cache.gpu_tier\n"
        "import graphfeed.gpu_kernels.reference, graphfeed.gpu_kernels.emulator, graphfeed.bench.gpu\n"
        "assert not [m for m in sys.modules if m.startswith('cupy')]\n"
        "from graphfeed.gpu_kernels._cuda import auto_cache_bytes, gpu_available\n"
        "print(gpu_available(), auto_cache_bytes())\n"  # imports CuPy only now, and never raises
    )
    res = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=120)
    assert res.returncode == 0, res.stderr
    available, budget = res.stdout.split()
    assert available in ("True", "False") and (int(budget) > 0) == (available == "True")


def test_the_gpu_kernels_import_nothing_else_of_graphfeed() -> None:
    """Kernels, launchers, references and the emulator stand alone: the loader builds on them
    (its GPU tier), never the other way round."""
    code = (
        "import importlib, pkgutil, sys\n"
        "import graphfeed.gpu_kernels as pkg\n"
        "mods = [importlib.import_module(f'{pkg.__name__}.{m.name}') for m in pkgutil.iter_modules(pkg.__path__)]\n"
        "assert len(mods) >= 5, mods\n"
        "print(sorted(m for m in sys.modules if m.startswith('graphfeed.') "
        "and not m.startswith('graphfeed.gpu_kernels')))\n"
    )
    res = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=120)
    assert res.returncode == 0, res.stderr
    assert res.stdout.strip() == "[]"
