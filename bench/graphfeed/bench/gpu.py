"""GPU data-path numbers (issue 5), one command: ``python bench/gpu.py`` (or ``graphfeed bench gpu``).

Parts (``--part``, default ``auto`` = every part this machine can run, then ``merge``):

* ``gpu``   (needs CUDA + CuPy; torch for the CPU-gather baseline): first checks the kernels
  against the NumPy references on this GPU, then measures, for 128-dim float32 rows, 1M- and
  10M-row tables, random ids, 10k/100k/1M-row batches: pinned host->device copy bandwidth (the
  limit), zero-copy gather GB/s, CPU gather + copy (``torch.index_select`` on the host, then
  ``.cuda()``; also into a pinned buffer + non-blocking copy); GPU cache gather GB/s at hit
  rates 0/50/90 % (misses read zero-copy from the pinned table); GPU uniform sampling edges/s;
  GPU temporal sampling roots/s (``recent`` and ``uniform``, fanout 10, 1M roots with hashed
  times on the 2M-node graph with hashed edge times sorted per row).
* ``cpu``   (needs DGL): DGL's CPU ``sample_neighbors`` and graphfeed's NumPy sampler on the
  same CSR (built from integer hashes, so both machines build the identical graph); temporal
  sampling by the NumPy reference and, when it is there and verified against the reference,
  the graph-store's compiled sampler (``graphfeed.graph_store.temporal.sampling``).
* ``merge``: joins ``gpu.json`` and ``cpu.json`` (with their repeats ``gpu2.json``, ... from
  ``--runs``: means of the runs) found in ``--out`` into ``gpu_bench.json`` and
  ``gpu_bench.md`` (ratios vs the issue's targets).
* ``test``: runs tests/gpu with pytest (no conftest: the bare GPU image lacks the project's deps).

Runs without the project installed (the GPU image has only torch, CuPy, NumPy): ``bench/gpu.py``
puts the checkout's namespace portions on ``sys.path`` and calls :func:`main`.
"""

from __future__ import annotations

import argparse
import importlib
import json
import os
import platform
import sys
import time
from collections.abc import Callable
from dataclasses import dataclass
from functools import partial
from pathlib import Path
from typing import Any

import numpy as np

REPO = Path(__file__).resolve().parents[3]  # bench/graphfeed/bench/gpu.py
ROW_DIM = 128  # float32 -> 512-byte rows
DEFAULT_OUT = REPO / "bench" / "results" / "gpu"


from graphfeed.bench import harness  # noqa: E402
from graphfeed.gpu_kernels import reference  # noqa: E402
from graphfeed.gpu_kernels._cuda import gpu_available, unavailable_reason  # noqa: E402


@dataclass(frozen=True)
class Sizes:
    """What to measure: table rows, batch rows (also sampling seeds), graph nodes, repeats."""

    tables: list[int]
    batches: list[int]
    graph_nodes: int
    repeat: int


FULL = Sizes([1_000_000, 10_000_000], [10_000, 100_000, 1_000_000], 2_000_000, 20)
QUICK = Sizes([1_000_000], [10_000, 100_000], 200_000, 5)


def _hash_below(seed: int, i: np.ndarray, j: int, m: int) -> np.ndarray:
    """Integers in ``[0, m)`` hashed from (seed, i, j), as the GPU kernels draw them."""
    # 0-d arrays: the reference functions take arrays and broadcast them (np.asarray inside).
    return reference.bounded(reference.rand_u64(seed, i, np.asarray(j)), np.asarray(m))


def synthetic_csr(num_nodes: int, seed: int = 1) -> tuple[np.ndarray, np.ndarray]:
    """A CSR from integer hashes only (identical on every machine and NumPy version): degrees
    uniform in [1, 20], plus 1 % hubs with up to 1000 more; neighbors uniform over all nodes."""
    v = np.arange(num_nodes, dtype=np.int64)
    deg = 1 + _hash_below(seed, v, 0, 20)
    hub = _hash_below(seed, v, 1, 100) == 0
    deg += np.where(hub, _hash_below(seed, v, 2, 1001), 0)
    indptr = np.zeros(num_nodes + 1, dtype=np.int64)
    np.cumsum(deg, out=indptr[1:])
    indices = np.empty(int(indptr[-1]), dtype=np.int64)
    chunk = 1 << 24
    for lo in range(0, len(indices), chunk):
        pos = np.arange(lo, min(lo + chunk, len(indices)), dtype=np.int64)
        indices[lo : lo + len(pos)] = _hash_below(seed + 1, pos, 0, num_nodes)
    return indptr, indices


def sampling_seeds(num_nodes: int, batch: int, seed: int = 2) -> np.ndarray:
    return _hash_below(seed, np.arange(batch, dtype=np.int64), 0, num_nodes)


T_SPAN = 1 << 31  # edge timestamps are hashed into [0, T_SPAN)
TEMPORAL_FANOUT = 10


TemporalCsr = tuple[np.ndarray, np.ndarray, np.ndarray, np.ndarray]  # indptr, nbr, ts, eid


def synthetic_temporal(num_nodes: int, seed: int = 1) -> TemporalCsr:
    """:func:`synthetic_csr` with a timestamp per edge, hashed into ``[0, T_SPAN)`` and sorted
    within each row (the time-sorted CSR temporal sampling reads): ``(indptr, nbr, ts, eid)``."""
    indptr, nbr = synthetic_csr(num_nodes, seed)
    row_of = np.repeat(np.arange(num_nodes, dtype=np.int64), np.diff(indptr))
    key = row_of * T_SPAN + _hash_below(seed + 2, np.arange(len(nbr), dtype=np.int64), 0, T_SPAN)
    key.sort()  # row is the high part: sorts each row's timestamps, rows stay in place
    key -= row_of * T_SPAN
    return indptr, nbr, key, np.arange(len(nbr), dtype=np.int64)


def temporal_roots(num_nodes: int, batch: int, seed: int = 3) -> tuple[np.ndarray, np.ndarray]:
    """``batch`` (row, time) roots from hashes: uniform rows, times uniform over the edges' span."""
    return sampling_seeds(num_nodes, batch, seed), _hash_below(seed, np.arange(batch, dtype=np.int64), 1, T_SPAN)


def _median_s(fn: Callable[[], Any], repeat: int, sync: Callable[[], None], warmup: int = 2) -> float:
    for _ in range(warmup):
        fn()
    sync()
    times = []
    for _ in range(repeat):
        t0 = time.perf_counter()
        fn()
        sync()
        times.append(time.perf_counter() - t0)
    return float(np.median(times))


# -- the GPU part ------------------------------------------------------------------------------


def _verify(cp: Any, kernels: Any) -> None:
    """Kernel == reference, bit for bit, on this GPU, before any number is taken."""
    from graphfeed.gpu_kernels.memory import MappedHostArray

    rng = np.random.default_rng(0)
    table = rng.standard_normal((4096, ROW_DIM)).astype(np.float32)
    ids = rng.integers(0, len(table), 10_000)
    pinned = MappedHostArray.from_array(table)
    assert cp.asnumpy(kernels.gather_rows(pinned.device, ids)).tobytes() == table[ids].tobytes(), "zero-copy gather"
    slot = np.full(len(table), -1, dtype=np.int32)
    slot[::3] = np.arange(len(slot[::3]))
    cached = np.ascontiguousarray(table[::3])
    out, where = kernels.cache_gather(ids, cp.asarray(slot), cp.asarray(cached), pinned.device)
    ref_out, ref_where = reference.cache_gather(ids, slot, cached, table)
    assert cp.asnumpy(out).tobytes() == ref_out.tobytes() and np.array_equal(cp.asnumpy(where), ref_where), (
        "cache gather"
    )
    indptr, indices = synthetic_csr(20_000)
    seeds = sampling_seeds(20_000, 5000)
    for fanout, replace in [(10, False), (25, True), (100, False), (-1, False)]:
        got = kernels.sample_csr(indptr, indices, np.arange(len(indices)), seeds, fanout, replace, 7)
        want = reference.sample_csr(indptr, indices, np.arange(len(indices)), seeds, fanout, replace, 7)
        assert all(np.array_equal(cp.asnumpy(g), w) for g, w in zip(got, want)), f"sampling {fanout} {replace}"
    graph = synthetic_temporal(20_000)
    rows, times = temporal_roots(20_000, 5000)
    for fanout, strategy in [(10, "recent"), (10, "uniform"), (100, "uniform"), (-1, "recent")]:
        on_gpu = kernels.sample_temporal(*graph, rows, times, fanout, strategy, 7, 3)
        on_cpu = reference.sample_temporal(*graph, rows, times, fanout, strategy, 7, 3)
        assert all(np.array_equal(cp.asnumpy(g), w) for g, w in zip(on_gpu, on_cpu)), f"temporal {fanout} {strategy}"


def _torch_cuda() -> Any:
    try:
        import torch

        return torch if torch.cuda.is_available() else None
    except ImportError:
        return None


def _transfer_rows(cp: Any, kernels: Any, table: Any, ids_all: np.ndarray, batch: int, repeat: int) -> dict[str, Any]:
    """Pinned copy, zero-copy gather and CPU gather + copy of ``batch`` random rows."""
    row_bytes = ROW_DIM * 4
    nbytes = batch * row_bytes
    sync = cp.cuda.Device().synchronize
    ids_h = ids_all[:batch]
    ids_d = cp.asarray(ids_h)
    out = cp.empty((batch, ROW_DIM), dtype=cp.float32)
    contiguous = table.device[:batch]  # pinned source of a plain DMA copy
    t_copy = _median_s(
        lambda: cp.cuda.runtime.memcpyAsync(out.data.ptr, contiguous.data.ptr, nbytes, 4, 0), repeat, sync
    )
    gather = partial(kernels.gather_rows, table.device, ids_d, out=out, check_ids=False)
    t_zc = _median_s(gather, repeat, sync)  # the default: ids sorted first from SORTED_READS_MIN rows on
    t_given = _median_s(partial(gather, sorted_reads=False), repeat, sync)  # reads in the ids' own order
    row: dict[str, Any] = {
        "batch_rows": batch,
        "bytes": nbytes,
        "pinned_copy_gbps": nbytes / t_copy / 1e9,
        "zero_copy_gbps": nbytes / t_zc / 1e9,
        "zero_copy_as_given_gbps": nbytes / t_given / 1e9,
    }
    torch = _torch_cuda()
    if torch is not None:
        table_t = torch.from_numpy(table.host)
        ids_t = torch.from_numpy(ids_h)
        tsync = torch.cuda.synchronize
        t_cpu = _median_s(lambda: torch.index_select(table_t, 0, ids_t).cuda(), repeat, tsync)
        staging = torch.empty((batch, ROW_DIM), dtype=torch.float32).pin_memory()
        t_pin = _median_s(
            lambda: torch.index_select(table_t, 0, ids_t, out=staging).cuda(non_blocking=True), repeat, tsync
        )
        row.update(
            cpu_gather_copy_gbps=nbytes / t_cpu / 1e9,
            cpu_gather_pinned_copy_gbps=nbytes / t_pin / 1e9,
            torch_threads=torch.get_num_threads(),
        )
    return row


def _cache_rows(
    cp: Any, kernels: Any, table: Any, batch: int, repeat: int, rng: np.random.Generator
) -> list[dict[str, Any]]:
    """GPU cache gather at hit rates 0/50/90 %: a cache of 20 % of the table, misses zero-copy."""
    n = table.host.shape[0]
    cached = rng.permutation(n)[: n // 5]
    in_cache = np.zeros(n, dtype=bool)
    in_cache[cached] = True
    uncached = np.flatnonzero(~in_cache)
    slot = np.full(n, -1, dtype=np.int32)
    slot[cached] = np.arange(len(cached))
    slot_d = cp.asarray(slot)
    gpu_rows = kernels.gather_rows(table.device, cp.asarray(cached))  # the cache slab, filled from the table
    sync = cp.cuda.Device().synchronize
    rows = []
    for hit_rate in (0.0, 0.5, 0.9):
        hits = int(batch * hit_rate)
        ids = np.concatenate([rng.choice(cached, hits), rng.choice(uncached, batch - hits)])
        ids_d = cp.asarray(rng.permutation(ids))
        run = partial(kernels.cache_gather, ids_d, slot_d, gpu_rows, table.device, check_ids=False)
        t, t_given = _median_s(run, repeat, sync), _median_s(partial(run, sorted_reads=False), repeat, sync)
        nbytes = batch * ROW_DIM * 4
        rows.append(
            {
                "table_rows": n,
                "batch_rows": batch,
                "hit_rate": hit_rate,
                "gbps": nbytes / t / 1e9,
                "as_given_gbps": nbytes / t_given / 1e9,
            }
        )
    return rows


def _sampling_rows(cp: Any, kernels: Any, graph_nodes: int, batches: list[int], repeat: int) -> list[dict[str, Any]]:
    indptr, indices = synthetic_csr(graph_nodes)
    d_indptr, d_indices, d_eids = cp.asarray(indptr), cp.asarray(indices), cp.arange(len(indices), dtype=cp.int64)
    sync = cp.cuda.Device().synchronize
    rows = []
    for batch in batches:
        seeds = cp.asarray(sampling_seeds(graph_nodes, batch))
        for fanout, replace in [(10, False), (25, False), (10, True), (100, False)]:
            edges = int(kernels.sample_csr(d_indptr, d_indices, d_eids, seeds, fanout, replace, 1)[0][-1])
            t = _median_s(
                partial(kernels.sample_csr, d_indptr, d_indices, d_eids, seeds, fanout, replace, 1), repeat, sync
            )
            rows.append(
                {
                    "graph_nodes": graph_nodes,
                    "graph_edges": len(indices),
                    "batch_seeds": batch,
                    "fanout": fanout,
                    "replace": replace,
                    "edges": edges,
                    "seconds": t,
                    "edges_per_s": edges / t,
                }
            )
    return rows


def _temporal_gpu_rows(cp: Any, kernels: Any, graph_nodes: int, roots: int, repeat: int) -> list[dict[str, Any]]:
    """Temporal sampling (fanout 10, both strategies) of ``roots`` (row, time) roots, roots/s."""
    graph = synthetic_temporal(graph_nodes)
    dev = [cp.asarray(a) for a in (*graph, *temporal_roots(graph_nodes, roots))]
    sync = cp.cuda.Device().synchronize
    rows = []
    for strategy in ("recent", "uniform"):
        run = partial(kernels.sample_temporal, *dev, TEMPORAL_FANOUT, strategy, 1)
        edges = int(run()[0][-1])
        t = _median_s(run, repeat, sync)
        rows.append(
            {
                "graph_nodes": graph_nodes,
                "graph_edges": len(graph[1]),
                "roots": roots,
                "fanout": TEMPORAL_FANOUT,
                "strategy": strategy,
                "edges": edges,
                "seconds": t,
                "roots_per_s": roots / t,
            }
        )
    return rows


def run_gpu(sizes: Sizes) -> dict[str, Any]:
    from graphfeed.gpu_kernels import kernels
    from graphfeed.gpu_kernels._cuda import cupy_module
    from graphfeed.gpu_kernels.memory import MappedHostArray

    cp = cupy_module()
    _verify(cp, kernels)
    tables, batches, repeat = sizes.tables, sizes.batches, sizes.repeat
    rng = np.random.default_rng(0)
    transfer, cache = [], []
    for n in tables:
        table = MappedHostArray((n, ROW_DIM), np.float32)
        for lo in range(0, n, 1 << 20):  # fill in chunks: bounded temporaries
            table.host[lo : lo + (1 << 20)] = rng.random((min(1 << 20, n - lo), ROW_DIM), dtype=np.float32)
        ids_all = rng.integers(0, n, max(batches))
        for batch in batches:
            transfer.append({"table_rows": n, **_transfer_rows(cp, kernels, table, ids_all, batch, repeat)})
            cache += _cache_rows(cp, kernels, table, batch, repeat, rng)
        table.close()
    sampling = _sampling_rows(cp, kernels, sizes.graph_nodes, batches, repeat)
    temporal = _temporal_gpu_rows(cp, kernels, sizes.graph_nodes, max(batches), repeat)
    props = cp.cuda.runtime.getDeviceProperties(cp.cuda.Device().id)
    torch = _torch_cuda()
    meta = {
        "device": props["name"].decode(),
        "cupy": cp.__version__,
        "cuda_runtime": cp.cuda.runtime.runtimeGetVersion(),
        "torch": getattr(torch, "__version__", None),
        "cpus": os.cpu_count(),
        "sizes": sizes.__dict__,
        "verified": True,
    }
    return {"meta": meta, "transfer": transfer, "cache": cache, "sampling_gpu": sampling, "temporal_gpu": temporal}


# -- the CPU part (DGL) ------------------------------------------------------------------------


def _graph_store_temporal(graph: TemporalCsr, rows: np.ndarray, times: np.ndarray) -> tuple[Any, str]:
    """The graph-store's compiled temporal sampler (``graphfeed.graph_store.temporal.sampling``,
    same arguments as the reference) when it is there and gives the reference's bytes on a
    sample of the roots, else None and why not."""
    try:
        sample_temporal = importlib.import_module("graphfeed.graph_store.temporal.sampling").sample_temporal
    except (ImportError, AttributeError) as e:
        return None, f"not available: {e}"
    for strategy in ("recent", "uniform"):
        try:
            got = sample_temporal(*graph, rows, times, TEMPORAL_FANOUT, strategy, 1)
        except Exception as e:  # noqa: BLE001 - a different signature: report it, keep the other numbers
            return None, f"{type(e).__name__}: {e}"
        want = reference.sample_temporal(*graph, rows, times, TEMPORAL_FANOUT, strategy, 1)
        if not all(np.array_equal(np.asarray(g), w) for g, w in zip(got, want)):
            return None, f"differs from the reference ({strategy})"
    return sample_temporal, "verified against the reference"


def _temporal_cpu_rows(graph_nodes: int, roots: int, repeat: int) -> tuple[list[dict[str, Any]], str]:
    """The NumPy reference and (when there) the graph-store's sampler on the GPU part's data."""
    graph = synthetic_temporal(graph_nodes)
    rows, times = temporal_roots(graph_nodes, roots)
    compiled, status = _graph_store_temporal(graph, rows[:10_000], times[:10_000])
    out = []
    for strategy in ("recent", "uniform"):
        run = partial(reference.sample_temporal, *graph, rows, times, TEMPORAL_FANOUT, strategy, 1)
        edges = int(run()[0][-1])
        row = {
            "graph_nodes": graph_nodes,
            "graph_edges": len(graph[1]),
            "roots": roots,
            "fanout": TEMPORAL_FANOUT,
            "strategy": strategy,
            "edges": edges,
            "numpy_roots_per_s": roots / _median_s(run, repeat, lambda: None, 0),
        }
        if compiled is not None:
            t = _median_s(partial(compiled, *graph, rows, times, TEMPORAL_FANOUT, strategy, 1), repeat, lambda: None, 1)
            row["graph_store_roots_per_s"] = roots / t
        out.append(row)
    return out, status


def run_cpu(sizes: Sizes) -> dict[str, Any]:
    import dgl
    import torch

    from graphfeed.graph_store.sampling import sample_csr

    graph_nodes, batches, repeat = sizes.graph_nodes, sizes.batches, min(sizes.repeat, 3)
    indptr, indices = synthetic_csr(graph_nodes)
    eids = np.arange(len(indices), dtype=np.int64)
    g = dgl.graph(
        ("csc", (torch.from_numpy(indptr), torch.from_numpy(indices), torch.from_numpy(eids))), num_nodes=graph_nodes
    )
    rows = []
    for batch in batches:
        seeds = sampling_seeds(graph_nodes, batch)
        seeds_t = torch.from_numpy(seeds)
        for fanout, replace in [(10, False), (25, False), (10, True), (100, False)]:
            edges = (
                g.in_degrees(seeds_t).clamp(max=fanout).sum().item()
                if not replace
                else int((g.in_degrees(seeds_t) > 0).sum()) * fanout
            )
            t_dgl = _median_s(
                partial(dgl.sampling.sample_neighbors, g, seeds_t, fanout, replace=replace), repeat, lambda: None, 1
            )
            t_np = _median_s(
                partial(sample_csr, indptr, indices, eids, seeds, fanout, replace, 0), repeat, lambda: None, 1
            )
            rows.append(
                {
                    "graph_nodes": graph_nodes,
                    "graph_edges": len(indices),
                    "batch_seeds": batch,
                    "fanout": fanout,
                    "replace": replace,
                    "edges": edges,
                    "dgl_edges_per_s": edges / t_dgl,
                    "numpy_edges_per_s": edges / t_np,
                }
            )
    temporal, graph_store = _temporal_cpu_rows(graph_nodes, max(batches), repeat)
    meta = {
        "cpu": platform.processor() or platform.machine(),
        "cpus": os.cpu_count(),
        "torch_threads": torch.get_num_threads(),
        "dgl": dgl.__version__,
        "sizes": sizes.__dict__,
        "graph_store_temporal": graph_store,
    }
    return {"meta": meta, "sampling_cpu": rows, "temporal_cpu": temporal}


# -- merge, report, CLI ----------------------------------------------------------------------

TARGETS = {
    "zero_copy_vs_pinned_copy": 0.8,
    "zero_copy_vs_cpu_gather_copy": 1.6,
    "gpu_vs_dgl_sampling": 10.0,
    "gpu_vs_cpu_temporal": 10.0,
}


def _merge_temporal(gpu_rows: list[dict[str, Any]], cpu_rows: list[dict[str, Any]]) -> list[dict[str, Any]]:
    """GPU and CPU temporal rows side by side; the ratio is against the faster CPU sampler."""
    key = lambda r: (r["graph_nodes"], r["roots"], r["fanout"], r["strategy"])  # noqa: E731
    cpu = {key(r): r for r in cpu_rows}
    merged = []
    for r in gpu_rows:
        row = dict(r)
        c = cpu.get(key(r), {})
        row.update({k: c[k] for k in ("numpy_roots_per_s", "graph_store_roots_per_s") if k in c})
        best_cpu = max([row.get("numpy_roots_per_s") or 0.0, row.get("graph_store_roots_per_s") or 0.0])
        if best_cpu:
            row["gpu_vs_cpu_temporal"] = row["roots_per_s"] / best_cpu
        merged.append(row)
    gpu_keys = {key(r) for r in gpu_rows}
    return merged + [dict(r) for r in cpu_rows if key(r) not in gpu_keys]


def _mean_of_runs(runs: list[Any]) -> Any:
    """The runs of one part (same sizes, same structure) as one: floats averaged, the rest (sizes,
    counts, names) taken from the first run."""
    first = runs[0]
    if isinstance(first, dict):
        return {k: _mean_of_runs([r[k] for r in runs]) for k in first}
    if isinstance(first, list):
        return [_mean_of_runs(list(items)) for items in zip(*runs)]
    if isinstance(first, float):
        return float(np.mean(runs))
    return first


def _run_files(out_dir: Path, name: str) -> list[Path]:
    """``<name>.json`` and the repeats ``<name>2.json``, ``<name>3.json``, ... in ``out_dir``."""
    return [p for p in sorted(out_dir.glob(f"{name}*.json")) if p.stem == name or p.stem[len(name) :].isdigit()]


def _forget_runs(out_dir: Path, name: str) -> None:
    """Removes an earlier measurement's runs of a part, so that the merge averages only new ones."""
    for p in _run_files(out_dir, name):
        p.unlink()


def merge(out_dir: Path) -> dict[str, Any]:
    """Joins the parts found in ``out_dir`` (each the mean of its runs) and adds the ratios the
    issue sets targets for."""
    parts = {}
    for name in ("gpu", "cpu"):
        runs = [json.loads(p.read_text()) for p in _run_files(out_dir, name)]
        if runs:
            parts[name] = _mean_of_runs(runs)
            parts[name]["meta"]["runs"] = len(runs)
    gpu, cpu = parts.get("gpu", {}), parts.get("cpu", {})
    transfer = [dict(r) for r in gpu.get("transfer", [])]
    for r in transfer:
        r["zero_copy_vs_pinned_copy"] = r["zero_copy_gbps"] / r["pinned_copy_gbps"]
        if "cpu_gather_copy_gbps" in r:
            r["zero_copy_vs_cpu_gather_copy"] = r["zero_copy_gbps"] / r["cpu_gather_copy_gbps"]
    key = lambda r: (r["graph_nodes"], r["batch_seeds"], r["fanout"], r["replace"])  # noqa: E731
    dgl = {key(r): r for r in cpu.get("sampling_cpu", [])}
    sampling = []
    for r in gpu.get("sampling_gpu", []):
        row = dict(r)
        if key(r) in dgl:
            row.update(
                dgl_edges_per_s=dgl[key(r)]["dgl_edges_per_s"], numpy_edges_per_s=dgl[key(r)]["numpy_edges_per_s"]
            )
            row["gpu_vs_dgl_sampling"] = row["edges_per_s"] / row["dgl_edges_per_s"]
        sampling.append(row)
    gpu_keys = {key(r) for r in sampling}
    sampling += [dict(r) for k, r in dgl.items() if k not in gpu_keys]  # CPU numbers without a GPU run
    temporal = _merge_temporal(gpu.get("temporal_gpu", []), cpu.get("temporal_cpu", []))
    return {
        "targets": TARGETS,
        "gpu_meta": gpu.get("meta"),
        "cpu_meta": cpu.get("meta"),
        "transfer": transfer,
        "cache": gpu.get("cache", []),
        "sampling": sampling,
        "temporal": temporal,
    }


def _fmt(v: Any, digits: int = 1) -> str:
    if v is None:
        return "—"
    if isinstance(v, float):
        return f"{v:.{digits}f}"
    return f"{v:,}" if isinstance(v, int) and not isinstance(v, bool) else str(v)


def _table(title: str, header: list[str], rows: list[list[str]]) -> list[str]:
    align = [
        "---" if h in ("graph nodes / edges", "replace", "strategy") else "---:" for h in header
    ]  # text left, numbers right
    return [
        "",
        f"### {title}",
        "",
        "| " + " | ".join(header) + " |",
        "|" + "|".join(align) + "|",
        *("| " + " | ".join(r) + " |" for r in rows),
    ]


def to_markdown(res: dict[str, Any], command: str) -> str:
    """The tables for BENCHMARKS.md."""
    g, c = res.get("gpu_meta") or {}, res.get("cpu_meta") or {}
    lines = [
        f"Command: `{command}`",
        "",
        (
            f"GPU part: {g.get('device', 'not run')}, mean of {g.get('runs', '—')} runs "
            f"(CuPy {g.get('cupy', '—')}, torch {g.get('torch', '—')}, "
            f"{g.get('cpus', '—')} CPUs; "
            f"kernels verified against the NumPy references first: {g.get('verified', '—')})"
        ),
        (
            f"CPU part: {c.get('cpus', 'not run')} CPUs, mean of {c.get('runs', '—')} runs, DGL {c.get('dgl', '—')}, "
            f"torch threads {c.get('torch_threads', '—')}; "
            f"graph-store temporal sampler: {c.get('graph_store_temporal', '—')}"
        ),
    ]
    lines += _table(
        "Host -> GPU, 128-dim float32 rows, random ids (GB/s of gathered rows)",
        [
            "table rows",
            "batch rows",
            "pinned copy (limit)",
            "zero-copy gather",
            "zero-copy, reads in the ids' order",
            "CPU gather + .cuda()",
            "CPU gather to pinned + copy",
            "zero-copy / pinned (target >= 0.8)",
            "zero-copy / CPU gather (target >= 1.6)",
        ],
        [
            [
                _fmt(r["table_rows"]),
                _fmt(r["batch_rows"]),
                _fmt(r["pinned_copy_gbps"]),
                _fmt(r["zero_copy_gbps"]),
                _fmt(r.get("zero_copy_as_given_gbps")),
                _fmt(r.get("cpu_gather_copy_gbps")),
                _fmt(r.get("cpu_gather_pinned_copy_gbps")),
                _fmt(r["zero_copy_vs_pinned_copy"], 2),
                _fmt(r.get("zero_copy_vs_cpu_gather_copy"), 2),
            ]
            for r in res["transfer"]
        ],
    )
    by: dict[tuple[int, int], dict[float, dict[str, Any]]] = {}
    for r in res["cache"]:
        by.setdefault((r["table_rows"], r["batch_rows"]), {})[r["hit_rate"]] = r
    hits = (0.0, 0.5, 0.9)
    lines += _table(
        "GPU cache gather (a 20 % cache on the GPU, misses zero-copy from the pinned table), GB/s: "
        "default (large batches read in id order) / reads in the ids' order",
        ["table rows", "batch rows", "hit 0 %", "hit 50 %", "hit 90 %"],
        [
            [_fmt(n), _fmt(b)]
            + [f"{_fmt(h.get(x, {}).get('gbps'))} / {_fmt(h.get(x, {}).get('as_given_gbps'))}" for x in hits]
            for (n, b), h in by.items()
        ],
    )
    mega = lambda r, k: None if r.get(k) is None else r[k] / 1e6  # noqa: E731
    lines += _table(
        "Uniform neighbor sampling, Medges/s (GPU kernel on the GPU machine; DGL and NumPy on the CPU machine)",
        [
            "graph nodes / edges",
            "seeds",
            "fanout",
            "replace",
            "GPU kernel",
            "DGL CPU",
            "graphfeed NumPy CPU",
            "GPU / DGL (target >= 10)",
        ],
        [
            [
                f"{_fmt(r['graph_nodes'])} / {_fmt(r['graph_edges'])}",
                _fmt(r["batch_seeds"]),
                str(r["fanout"]),
                str(r["replace"]),
                _fmt(mega(r, "edges_per_s")),
                _fmt(mega(r, "dgl_edges_per_s")),
                _fmt(mega(r, "numpy_edges_per_s")),
                _fmt(r.get("gpu_vs_dgl_sampling")),
            ]
            for r in res["sampling"]
        ],
    )
    lines += _table(
        f"Temporal neighbor sampling (fanout {TEMPORAL_FANOUT}, edges strictly before each root's time), M roots/s",
        [
            "graph nodes / edges",
            "roots",
            "strategy",
            "GPU kernel",
            "graph-store CPU",
            "NumPy CPU",
            "GPU / best CPU (target >= 10)",
        ],
        [
            [
                f"{_fmt(r['graph_nodes'])} / {_fmt(r['graph_edges'])}",
                _fmt(r["roots"]),
                r["strategy"],
                _fmt(mega(r, "roots_per_s"), 2),
                _fmt(mega(r, "graph_store_roots_per_s"), 2),
                _fmt(mega(r, "numpy_roots_per_s"), 2),
                _fmt(r.get("gpu_vs_cpu_temporal")),
            ]
            for r in res.get("temporal", [])
        ],
    )
    return "\n".join(lines) + "\n"


def _dgl_available() -> bool:
    try:
        import dgl  # noqa: F401

        return True
    except Exception:  # noqa: BLE001 - DGL raises more than ImportError when its deps are off
        return False


def run(args: argparse.Namespace) -> int:
    """Runs the requested part(s); writes ``<part>.json`` and the merged report to ``--out``."""
    out: Path = args.out or DEFAULT_OUT  # a folder
    out.mkdir(parents=True, exist_ok=True)
    sizes = QUICK if args.quick else FULL
    part = args.part
    if part == "test":
        import pytest

        return int(pytest.main(["-q", "--noconftest", "-p", "no:cacheprovider", "-rs", str(REPO / "tests" / "gpu")]))
    ran = []
    suffixes = [""] + [str(i) for i in range(2, args.runs + 1)]  # gpu.json, gpu2.json, ...
    if part in ("gpu", "auto"):
        if gpu_available():
            _forget_runs(out, "gpu")
            for suffix in suffixes:
                (out / f"gpu{suffix}.json").write_text(json.dumps(run_gpu(sizes), indent=2))
            ran.append("gpu")
        elif part == "gpu":
            print(f"no usable GPU: {unavailable_reason()}", file=sys.stderr)
            return 2
    if part in ("cpu", "auto"):
        if _dgl_available():
            _forget_runs(out, "cpu")
            for suffix in suffixes:
                (out / f"cpu{suffix}.json").write_text(json.dumps(run_cpu(sizes), indent=2))
            ran.append("cpu")
        elif part == "cpu":
            print("the cpu part needs DGL (the project's venv has it)", file=sys.stderr)
            return 2
    res = merge(out)
    command = "python bench/gpu.py" + (" --quick" if args.quick else "")
    (out / "gpu_bench.json").write_text(json.dumps(res, indent=2))
    md = to_markdown(res, command)
    (out / "gpu_bench.md").write_text(md)
    print(md)
    print(f"ran: {', '.join(ran) or 'nothing (merge only)'}; wrote {out}/gpu_bench.{{json,md}}", file=sys.stderr)
    return 0


def _add_arguments(p: argparse.ArgumentParser) -> None:
    p.add_argument(
        "--part",
        choices=["auto", "gpu", "cpu", "merge", "test"],
        default="auto",
        help="auto (default): every part this machine can run, then merge",
    )
    p.add_argument("--quick", action="store_true", help="1M-row table, 10k/100k batches, 200k-node graph: a smoke run")
    p.add_argument("--runs", type=int, default=3, help="runs of each part (default 3); the report gives their means")


def register(sub: argparse._SubParsersAction) -> None:
    """``graphfeed bench gpu`` (``--out``: the results folder, default bench/results/gpu)."""
    harness.register(
        sub, "gpu", __doc__, "GPU data path: zero-copy gather, GPU cache, GPU sampling vs DGL", _add_arguments, run
    )


def main(argv: list[str] | None = None) -> int:
    return harness.main(__doc__, _add_arguments, run, argv)


if __name__ == "__main__":
    sys.exit(main())
