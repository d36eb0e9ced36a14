"""``graphfeed bench disk``: features bigger than the memory budget, read from disk (issue 17).

One synthetic graph (default 1M nodes x 128 float32 = 512 MB of features), a memory budget
(default 128 MB), page cache dropped before every system (``/proc/sys/vm/drop_caches``; the
graphfeed systems also read with ``O_DIRECT``), one epoch of one job, systems in the same run:

* **in memory**: the loader over graph-stores holding every row in memory (no cache).
* **packed** (graphfeed): ``graphfeed pack`` wrote the epoch's packs (resident = the highest
  in-degree rows, exactly what the loader's ``static_degree`` cache of the budget holds); the
  loader serves its cache misses from the packs (pack tier), with 1 and with 4 pread threads.
* **unpacked, budgeted graph-stores** (what a user without packs runs): one
  ``graphfeed serve graph-store --memory-budget B/P --direct-io`` process per partition (the
  stores together hold the budget: their highest in-degree rows), the same loader and cache,
  its misses fetched over gRPC through ``RemotePartitionSet``, twice: with shared memory (same
  host, the favourable case) and wire only (``shm_dir=""``, a loader on another host). Sampling
  reads the same in-process topology as every other system (``--store-sampling remote`` sends it
  to the graph-stores too), so the systems differ only in where feature rows come from.
* **unpacked, flat file read by the loader**: the same loader and cache, its misses read by the
  loader itself from a flat feature file with coalesced ``O_DIRECT`` preads (4 KiB pages,
  adjacent pages merged): the disk cost of on-demand reads without the graph-store's process
  and RPC, to tell the two apart.
* **naive memmap**: what PyG/DGL users do: ``np.memmap`` of the flat file, ``feat[input_nodes]``
  per minibatch (sampling overlapped on 2 threads); once with the page cache as the kernel runs
  it (unbounded: it may cache the whole file), once held to the budget (see :func:`run_memmap`).

Per system: e2e minibatches/s (sampling + features; no trainer step), disk bytes read
(``/proc/<pid>/io`` ``read_bytes`` of this process and of the graph-store processes) and read
amplification = disk bytes / bytes of the rows the memory tier did not serve; memory: the
loader's peak RSS over its RSS before the loader was built (cache and buffers included), and
the graph-store processes' peak RSS (``VmHWM``, reset before the epoch). Also the packing:
blow-up (packed / table bytes) and time vs the epoch's.

Example::

    graphfeed bench disk --workdir /tmp/gf-disk --out bench/results/disk.json
"""

from __future__ import annotations

import argparse
import contextlib
import ctypes
import functools
import gc
import logging
import os
import shutil
import time
from collections.abc import Callable, Sequence
from concurrent.futures import Future, ThreadPoolExecutor
from pathlib import Path
from typing import Any

import numpy as np

from graphfeed.bench import harness
from graphfeed.bench.disk_cgroup import SYSTEM as CGROUP_SYSTEM
from graphfeed.bench.disk_cgroup import run_in_cgroup
from graphfeed.bench.disk_stores import (
    BudgetedStores,
    RemoteRows,
    drop_caches,
    read_bytes,
    reset_peak_rss,
    status_bytes,
)
from graphfeed.common.futures import completed
from graphfeed.common.partition import GraphManifest, flat_node_data_path, part_dir_name
from graphfeed.graph_store.partitions import ForwardingPartitionSet, RemotePartitionSet
from graphfeed.graph_store.types import PartitionSet, RowsInto
from graphfeed.loader.core import Loader
from graphfeed.loader.job import JobSpec
from graphfeed.loader.packs.format import PackManifest
from graphfeed.pack.offline import plan_epoch, sample_steps
from graphfeed.pack.writer import PackOptions, pack_epoch
from graphfeed.sampler.core import MultiHopSampler

log = logging.getLogger(__name__)

PAGE = 4096
FLAT = "feat.bin"  # the features in gid order, raw
STORES_SHM = "unpacked, budgeted graph-stores, shared memory"
STORES_WIRE = "unpacked, budgeted graph-stores, wire only"
FLAT_SYSTEM = "unpacked, flat file read by the loader"
REUSED = "packed, an unpacked epoch reusing another epoch's packs"


def register(sub: argparse._SubParsersAction) -> None:
    harness.register(
        sub,
        "disk",
        __doc__,
        "out of core: packed vs on-demand vs memmap vs in-memory features",
        add_arguments,
        run,
        workdir=Path("/tmp/gf-disk"),
        batch_size=256,
        fanouts=(10, 5),
    )


def add_arguments(p: argparse.ArgumentParser) -> None:
    p.add_argument("--nodes", type=int, default=1_000_000)
    p.add_argument("--edges", type=int, default=5_000_000, help="undirected edges (default 5M)")
    p.add_argument("--feat-dim", type=int, default=128, help="float32 features per node (a row must divide 4 KiB)")
    p.add_argument("--train-fraction", type=float, default=0.03, help="seed nodes of the epoch (papers100M: 0.011)")
    p.add_argument(
        "--budget-bytes",
        type=int,
        default=128 << 20,
        help="memory for feature rows: the loader's cache (less 2 packs where --max-pack-bytes caps them)",
    )
    p.add_argument(
        "--max-blow-up", type=float, default=3.0, help="packs: bytes written per epoch / table bytes, at most"
    )
    p.add_argument(
        "--max-pack-bytes",
        type=int,
        default=0,
        help="packs: distinct rows of one pack, at most (2 are held; taken from the budget); 0: sized by --max-blow-up",
    )
    p.add_argument("--pack-epochs", type=int, default=2, help="epochs packed ahead (0..N-1); epoch 0 is streamed")
    p.add_argument("--threads", default="1,4", help="pread threads of the packed system, comma-separated")
    p.add_argument(
        "--store-budget-bytes",
        type=int,
        default=0,
        help="--memory-budget of each graph-store (0: the budget / partitions)",
    )
    p.add_argument("--io-threads", type=int, default=8, help="--io-threads of each graph-store")
    p.add_argument(
        "--shm-dir", default="/dev/shm", help="shared-memory directory of the graph-stores' shared-memory system"
    )
    p.add_argument(
        "--store-sampling",
        choices=("local", "remote"),
        default="local",
        help="graph-store systems: sample from the in-process topology like the others (local) or over gRPC",
    )
    p.add_argument(
        "--slow-steps", type=int, default=20, help="steps of the memmap held to the budget (it thrashes; 0: all)"
    )
    p.add_argument(
        "--slow-store-steps",
        type=int,
        default=0,
        help="steps of the unpacked systems (graph-stores, flat file: random reads; 0: the epoch)",
    )
    p.add_argument(
        "--slow-seconds", type=float, default=120.0, help="memmap under a cgroup limit: stop after the step past this"
    )


def ensure_graph(args: argparse.Namespace) -> Path:
    """The synthetic graph in 2 random partitions plus its flat feature file (made on first use)."""
    from graphfeed.ingest.synthetic import generate

    tf = args.train_fraction
    make = functools.partial(
        generate,
        args.nodes,
        args.edges,
        args.feat_dim,
        16,
        fractions=(tf, 0.01, 0.01),
        name="disk-bench",
        progress=True,
    )
    root = harness.dataset(args.workdir, f"graph-{args.nodes}-{args.edges}-{args.feat_dim}-{tf}", 2, "random", make)
    if not (root / FLAT).exists():  # partitions own consecutive gids: their flat tables concatenate in gid order
        with open(root / f"{FLAT}.tmp", "wb") as out:
            for p in range(2):
                with open(flat_node_data_path(root / part_dir_name(p), "feat"), "rb") as part:
                    shutil.copyfileobj(part, out, 16 << 20)
        os.replace(root / f"{FLAT}.tmp", root / FLAT)
    return root


class FlatFileRows(ForwardingPartitionSet):
    """Feature rows read on demand from the flat file: the ids' 4 KiB pages, adjacent pages
    merged into one pread, ``O_DIRECT``, preads spread over ``threads``. Other node data
    (labels) comes from the graph-stores."""

    def __init__(self, inner: PartitionSet, path: Path, name: str, threads: int = 4) -> None:
        super().__init__(inner)
        spec = inner.info.node_data[name]
        self.name, self.dtype, self.row_shape = name, np.dtype(spec.dtype), tuple(spec.row_shape)
        self.row_bytes = self.dtype.itemsize * int(np.prod(self.row_shape))
        if PAGE % self.row_bytes:
            raise SystemExit(f"rows of {self.row_bytes} bytes do not divide a 4 KiB page: pick another --feat-dim")
        self.fd = os.open(path, os.O_RDONLY | os.O_DIRECT)
        self.pool = ThreadPoolExecutor(max_workers=threads, thread_name_prefix="flat-pread")
        self.threads = threads

    def read_node_data(self, p: int, name: str, ids: np.ndarray, into: RowsInto) -> Future[int]:
        if name != self.name:
            return self.inner.read_node_data(p, name, ids, into)
        return completed(lambda: into.place(self.read(np.asarray(ids, dtype=np.int64))))

    def read(self, ids: np.ndarray) -> np.ndarray:
        """Rows of ``ids`` in ``ids`` order."""
        pages = np.unique(ids * self.row_bytes // PAGE)
        cut = np.flatnonzero(np.diff(pages) != 1) + 1
        starts, counts = pages[np.r_[0, cut]], np.diff(np.r_[0, cut, len(pages)])
        import mmap

        buf = mmap.mmap(-1, max(1, len(pages)) * PAGE)
        view = memoryview(buf)
        at = np.r_[0, np.cumsum(counts)[:-1]] * PAGE
        runs = list(zip((starts * PAGE).tolist(), (counts * PAGE).tolist(), at.tolist()))
        share = -(-len(runs) // self.threads)
        list(
            self.pool.map(
                lambda part: self._pread_runs(view, part), [runs[i : i + share] for i in range(0, len(runs), share)]
            )
        )
        per_page = PAGE // self.row_bytes
        slot = np.searchsorted(pages, ids * self.row_bytes // PAGE) * per_page + (ids % per_page)
        table = np.frombuffer(buf, dtype=self.dtype).reshape(-1, *self.row_shape)
        return table[slot]

    def _pread_runs(self, view: memoryview, runs: list[tuple[int, int, int]]) -> None:
        for offset, nbytes, into in runs:
            done = 0
            while done < nbytes:
                n = os.preadv(self.fd, [view[into + done : into + nbytes]], offset + done)
                if n == 0:
                    raise EOFError(f"feature file ended at byte {offset + done}")
                done += n

    def close(self) -> None:
        self.pool.shutdown()
        os.close(self.fd)


def warm_topology(root: Path) -> None:
    """Reads the partitions' memory-mapped topology back in (every system samples from it;
    only feature reads should reach the disk)."""
    for f in root.glob("part-*/*.npy"):
        f.read_bytes()


def measure(
    name: str,
    prepare: Callable[[], Callable[[], dict[str, Any]]],
    row_bytes: int,
    root: Path,
    store_pids: Sequence[int] = (),
    cold: bool = True,
) -> dict[str, Any]:
    """Runs one system from a cold page cache (features only): minibatches/s, disk bytes, read
    amplification, memory.

    ``prepare()`` builds the system (a loader warms its cache there, off the clock) and returns
    the timed epoch. Disk bytes are this process's and the ``store_pids`` processes'. Memory:
    this process's peak RSS over its RSS before ``prepare`` (``loader_rss_bytes``), and the sum of
    the ``store_pids``' peak RSS during the epoch (``store_peak_rss_bytes``). ``cold=False``
    leaves the page cache alone (tests: dropping it slows everything else on the machine).
    """
    pids: list[int | str] = ["self", *store_pids]
    release_freed_memory()
    rss0 = status_bytes("self", "VmRSS")
    fn = prepare()
    dropped = drop_caches() if cold else False
    warm_topology(root)
    resets = [reset_peak_rss(pid) for pid in pids]  # every one, no short cut
    store_rss = sum(status_bytes(pid, "VmRSS") for pid in store_pids)
    before = sum(read_bytes(pid) for pid in pids)
    t0 = time.perf_counter()
    r = fn()
    seconds = time.perf_counter() - t0
    disk = sum(read_bytes(pid) for pid in pids) - before
    needed = r["disk_rows"] * row_bytes
    out = {
        "system": name,
        "seconds": seconds,
        "minibatches_per_s": r["steps"] / seconds,
        "disk_read_bytes": disk,
        "needed_bytes": needed,
        "read_amplification": disk / needed if needed else 0.0,
        "page_cache_dropped": dropped,
        "loader_rss_bytes": status_bytes("self", "VmHWM") - rss0,
        "loader_peak_rss_bytes": status_bytes("self", "VmHWM"),  # the whole process (see markdown's note)
        "store_rss_before_bytes": store_rss,
        "store_peak_rss_bytes": sum(status_bytes(pid, "VmHWM") for pid in store_pids),
        # after the epoch: anonymous (heap, answers, budget rows) vs file-backed (mapped topology, reclaimable)
        "store_rss_anon_bytes": sum(status_bytes(pid, "RssAnon") for pid in store_pids),
        "store_rss_file_bytes": sum(status_bytes(pid, "RssFile") for pid in store_pids),
        "peak_rss_reset": all(resets),
        "graph_store_processes": len(store_pids),
        **r,
    }
    log.info("%s: %s", name, {k: round(v, 3) if isinstance(v, float) else v for k, v in out.items()})
    return out


def release_freed_memory() -> None:
    """Collects garbage (a closed loader's cycles) and hands freed heap pages back to the kernel
    (glibc ``malloc_trim``), so the next system's RSS growth is not hidden by reused memory."""
    gc.collect()
    with contextlib.suppress(OSError, AttributeError):  # not glibc: growth may be understated
        ctypes.CDLL("libc.so.6").malloc_trim(0)


def run_loader(
    parts: PartitionSet, job: JobSpec, max_steps: int = 0, epoch: int = 0, **kw: Any
) -> Callable[[], dict[str, Any]]:
    """One epoch through a loader (cache warmed before the clock starts): steps, rows. ``max_steps``
    > 0 stops after that many steps (the slow systems: their rate is what is compared)."""
    loader = Loader(parts, MultiHopSampler(parts), lookahead_steps=8, **kw)
    loader.warm_cache(job.feature_name)

    def go() -> dict[str, Any]:
        steps = rows = misses = packed = 0
        try:
            with loader.stream(job, epoch) as s:
                for mb in s:
                    steps, rows = steps + 1, rows + len(mb.blocks.input_nodes)
                    misses, packed = misses + mb.stats.cache_misses, packed + mb.stats.pack_rows
                    if steps == max_steps:
                        break
            pack_bytes = loader.pack_stats.disk_bytes
        finally:
            loader.close()
        return {
            "steps": steps,
            "input_rows": rows,
            "disk_rows": misses,
            "cache_misses": misses,
            "pack_rows": packed,
            "pack_read_bytes": pack_bytes,
        }

    return go


def run_memmap(
    parts: PartitionSet, job: JobSpec, path: Path, budget_bytes: int = 0, max_steps: int = 0
) -> Callable[[], dict[str, Any]]:
    """One epoch of ``feat[input_nodes]`` on a memory map of the flat file (what ``np.memmap``
    is: an ``mmap`` under an ndarray), sampling 8 steps ahead on 2 threads.

    ``budget_bytes`` > 0 holds the file's page cache to the budget the way a memory cgroup
    would, coarsely: each time that many bytes were read since the last time, the file's pages
    are dropped (``MADV_DONTNEED`` + ``POSIX_FADV_DONTNEED``). 0: the page cache grows freely.
    ``max_steps`` > 0 stops after that many steps (the rate is what is compared).
    """
    spec = parts.info.node_data[job.feature_name]

    def go() -> dict[str, Any]:
        import mmap

        fd = os.open(path, os.O_RDONLY)
        mm = mmap.mmap(fd, 0, prot=mmap.PROT_READ)
        feat = np.frombuffer(mm, dtype=spec.dtype).reshape(-1, *spec.row_shape)
        steps = rows = flushes = 0
        mark = read_bytes()
        try:
            for _, ids in sample_steps(MultiHopSampler(parts), job, plan_epoch(parts, job, 0)):
                x = feat[ids]
                steps, rows = steps + 1, rows + len(x)
                if budget_bytes and read_bytes() - mark > budget_bytes:
                    mm.madvise(mmap.MADV_DONTNEED)
                    os.posix_fadvise(fd, 0, 0, os.POSIX_FADV_DONTNEED)
                    mark, flushes = read_bytes(), flushes + 1
                if steps == max_steps:
                    break
            del feat, x
        finally:
            mm.close()
            os.close(fd)
        return {"steps": steps, "input_rows": rows, "disk_rows": rows, "page_cache_flushes": flushes}

    return go


def run(args: argparse.Namespace) -> int:
    root = ensure_graph(args)
    m = GraphManifest.load(root)
    parts = harness.local_partitions(root)
    row_bytes = m.node_data["feat"].row_bytes
    job = JobSpec(
        job_id="disk",
        job_seed=1,
        batch_size=args.batch_size,
        fanouts=tuple(args.fanouts),
        shuffle=True,
    )
    cache_bytes = args.budget_bytes - 2 * args.max_pack_bytes
    packs = args.workdir / "packs"
    opts = PackOptions(
        max_blow_up=args.max_blow_up,
        max_pack_bytes=args.max_pack_bytes,
        resident="degree",
        resident_bytes=cache_bytes,
    )
    plan = plan_epoch(parts, job, 0).plan  # compiles the sampling kernels: no system, packing included, pays for it
    MultiHopSampler(parts).sample(plan.seeds(0), list(job.fanouts), job.replace, job.job_seed, 0, 0)
    manifest, pack_s = pack_ahead(parts, job, packs, opts, max(1, args.pack_epochs))
    results = [measure("in memory", lambda: run_loader(parts, job, cache_policy="none"), row_bytes, root)]
    for threads in [int(t) for t in args.threads.split(",")]:
        kw = {
            "cache_policy": "static_degree",
            "cache_bytes": cache_bytes,
            "pack_root": packs,
            "pack_read_threads": threads,
        }
        packed = lambda kw=kw: run_loader(parts, job, pack_direct_io=True, **kw)  # noqa: E731
        results.append(measure(f"packed, {threads} pread threads", packed, row_bytes, root))
    # an epoch nobody packed, served from epoch pack_epochs - 1's packs (the loader's pack reuse)
    reused = lambda kw=kw: run_loader(parts, job, 0, max(1, args.pack_epochs), pack_direct_io=True, **kw)  # noqa: E731
    results.append(measure(REUSED, reused, row_bytes, root))
    results += run_budgeted_stores(args, root, parts, job)
    flat = FlatFileRows(parts, root / FLAT, "feat", threads=4)
    try:
        unpacked = lambda: run_loader(  # noqa: E731
            flat, job, args.slow_store_steps, cache_policy="static_degree", cache_bytes=args.budget_bytes
        )
        results.append(measure(FLAT_SYSTEM, unpacked, row_bytes, root))
    finally:
        flat.close()
    results.append(measure("naive np.memmap", lambda: run_memmap(parts, job, root / FLAT), row_bytes, root))
    naive_budget = lambda: run_memmap(parts, job, root / FLAT, args.budget_bytes, args.slow_steps)  # noqa: E731
    results.append(measure("naive np.memmap, page cache held to the budget", naive_budget, row_bytes, root))
    results.append(memmap_in_cgroup(args, root, job, row_bytes))
    result = summarize(args, m, manifest.stats, pack_s, results, cache_bytes)
    harness.write(args, result, markdown(result), "disk")
    return 0


def pack_ahead(
    parts: PartitionSet, job: JobSpec, root: Path, opts: PackOptions, epochs: int
) -> tuple[PackManifest, float]:
    """Packs epochs ``0..epochs-1`` as ``graphfeed pack --epochs 0:N`` does; epoch 0's manifest
    and the wall seconds per epoch (the CPU seconds are in each manifest's stats). Packs of an
    earlier run are removed first (epoch N must have none: the reuse system streams it)."""
    shutil.rmtree(root, ignore_errors=True)
    t0 = time.perf_counter()
    manifests = [pack_epoch(parts, job, e, root, opts) for e in range(epochs)]
    for m in manifests:
        log.info("packed epoch %d: %s", m.epoch, m.stats)
    return manifests[0], (time.perf_counter() - t0) / epochs


def memmap_in_cgroup(args: argparse.Namespace, root: Path, job: JobSpec, row_bytes: int) -> dict[str, Any]:
    """The memmap system in a child process under a real cgroup memory limit (its memory without
    features + the budget; :mod:`graphfeed.bench.disk_cgroup`), from a cold page cache."""
    spec = {f: getattr(job, f) for f in ("job_id", "job_seed", "batch_size", "replace", "shuffle", "feature_name")}
    drop_caches()
    job_fields = {**spec, "fanouts": list(job.fanouts)}
    r = run_in_cgroup(root, root / FLAT, job_fields, args.budget_bytes, args.slow_steps, args.slow_seconds)
    if "skipped" in r:
        log.warning("%s skipped: %s", r["system"], r["skipped"])
        return r
    needed = r["disk_rows"] * row_bytes
    return {
        **r,
        "needed_bytes": needed,
        "read_amplification": r["disk_read_bytes"] / needed if needed else 0.0,
        "loader_rss_bytes": r["cgroup_max_usage_bytes"],
        "graph_store_processes": 0,
    }


def store_budget(args: argparse.Namespace, partitions: int) -> int:
    """Each graph-store's ``--memory-budget``: ``--store-budget-bytes``, or the budget split over
    the partitions (the stores together keep the budget's worth of rows)."""
    return args.store_budget_bytes or args.budget_bytes // partitions


def run_budgeted_stores(
    args: argparse.Namespace, root: Path, parts: PartitionSet, job: JobSpec
) -> list[dict[str, Any]]:
    """The unpacked system as a user runs it: budgeted ``--direct-io`` graph-store processes
    serving the loader's misses over gRPC, with shared memory and wire only (same processes)."""
    m = GraphManifest.load(root)
    row_bytes = m.node_data[job.feature_name].row_bytes
    stores = BudgetedStores.start(
        root, store_budget(args, m.num_partitions), args.workdir / "logs", io_threads=args.io_threads
    )
    out = []
    try:
        for system, shm_dir in ((STORES_SHM, args.shm_dir), (STORES_WIRE, "")):
            remote = RemotePartitionSet(stores.addresses, timeout_s=120.0, shm_dir=shm_dir)
            rows = remote if args.store_sampling == "remote" else RemoteRows(parts, remote)
            shm0 = stores.shm_bytes()
            try:
                go = lambda rows=rows: run_loader(  # noqa: E731
                    rows, job, args.slow_store_steps, cache_policy="static_degree", cache_bytes=args.budget_bytes
                )
                r = measure(system, go, row_bytes, root, stores.pids)
            finally:
                rows.close()
            shm = stores.shm_bytes() - shm0  # > 0 only where rows came through shared memory
            out.append(
                {
                    **r,
                    "store_budget_bytes": stores.budget_bytes,
                    "store_rss_ready_bytes": stores.ready_rss_bytes,
                    "shm_dir": shm_dir,
                    "shm_bytes": shm,
                    "sampling": args.store_sampling,
                }
            )
    finally:
        stores.stop()
    return out


def summarize(
    args: argparse.Namespace,
    m: GraphManifest,
    stats: dict[str, float],
    pack_s: float,
    results: list[dict],
    cache_bytes: int,
) -> dict:
    by = {r["system"]: r for r in results}
    own = [r for r in results if r["system"].startswith("packed") and r["system"] != REUSED]
    best_packed = max(own, key=lambda r: r["minibatches_per_s"])
    return {
        "graph": {
            "nodes": m.num_nodes,
            "edges": m.num_edges,
            "feature_bytes": int(stats["table_bytes"]),
            "train_fraction": args.train_fraction,
        },
        "job": {"batch_size": args.batch_size, "fanouts": args.fanouts, "steps": best_packed["steps"]},
        "budget_bytes": args.budget_bytes,
        "cache_bytes": cache_bytes,
        "max_pack_bytes": args.max_pack_bytes,
        "pack_epochs": max(1, args.pack_epochs),
        "store_budget_bytes": store_budget(args, m.num_partitions),
        "pack": {**stats, "wall_seconds": pack_s},
        "systems": results,
        "ratios": {
            "packed_vs_in_memory": best_packed["minibatches_per_s"] / by["in memory"]["minibatches_per_s"],
            "packed_vs_memmap": best_packed["minibatches_per_s"] / by["naive np.memmap"]["minibatches_per_s"],
            "packed_vs_memmap_at_budget": best_packed["minibatches_per_s"]
            / by["naive np.memmap, page cache held to the budget"]["minibatches_per_s"],
            "packed_vs_unpacked": best_packed["minibatches_per_s"] / by[STORES_SHM]["minibatches_per_s"],
            "packed_vs_unpacked_wire": best_packed["minibatches_per_s"] / by[STORES_WIRE]["minibatches_per_s"],
            "reused_vs_in_memory": by[REUSED]["minibatches_per_s"] / by["in memory"]["minibatches_per_s"],
            "packed_vs_flat_file": best_packed["minibatches_per_s"] / by[FLAT_SYSTEM]["minibatches_per_s"],
            "packed_vs_memmap_in_cgroup": best_packed["minibatches_per_s"]
            / by[CGROUP_SYSTEM].get("minibatches_per_s", float("nan")),
            "pack_time_vs_packed_epoch": pack_s / best_packed["seconds"],
        },
    }


def markdown(r: dict) -> str:
    g, p, q, j = r["graph"], r["pack"], r["ratios"], r["job"]
    mib = 2**20
    head = (
        f"`graphfeed bench disk`: {g['nodes']:,} nodes, {g['edges']:,} edges, {g['feature_bytes'] / mib:.0f} MiB of "
        f"features, budget {r['budget_bytes'] / mib:.0f} MiB (cache {r['cache_bytes'] / mib:.0f} MiB; packs sized to a "
        f"{p['max_blow_up']:.1f}x blow-up, largest {p['largest_pack_bytes'] / mib:.0f} MiB, "
        f"{p['steps_per_pack']:.1f} steps per pack), batch {j['batch_size']}, fanouts {j['fanouts']}, "
        f"{j['steps']} steps; page cache dropped before each system."
    )
    cols = (
        "| system | steps | minibatches/s | disk MiB read | needed MiB | read amplification | loader RSS MiB "
        "| loader process peak MiB | graph-store RSS MiB |"
    )
    lines = [head, "", cols, "|---|---|---|---|---|---|---|---|---|"]
    for s in r["systems"]:
        if "skipped" in s:
            lines.append(f"| {s['system']} | skipped: {s['skipped'][:200]} |")
            continue
        stores = (
            f"{s['store_rss_ready_bytes'] / mib:.0f} → {s['store_peak_rss_bytes'] / mib:.0f} "
            f"({s['store_rss_anon_bytes'] / mib:.0f} anon + {s['store_rss_file_bytes'] / mib:.0f} file after)"
            if s["graph_store_processes"]
            else "–"
        )
        lines.append(
            f"| {s['system']} | {s['steps']} | {s['minibatches_per_s']:.2f} | {s['disk_read_bytes'] / mib:.1f} "
            f"| {s['needed_bytes'] / mib:.1f} | {s['read_amplification']:.2f}x | {s['loader_rss_bytes'] / mib:.0f} "
            f"| {s['loader_peak_rss_bytes'] / mib:.0f} | {stores} |"
        )
    packing = (
        f"Packing (per epoch, {r['pack_epochs']} packed ahead): blow-up {p['blow_up']:.2f}x "
        f"({p['packed_bytes'] / mib:.0f} MiB packed), {p['wall_seconds']:.1f} s "
        f"(sampling {p['sample_seconds']:.1f} s, row fetch {p['fetch_seconds']:.1f} s, "
        f"writes {p['write_seconds']:.1f} s) = {q['pack_time_vs_packed_epoch']:.2f}x the packed epoch."
    )
    ratios = (
        f"Best packed vs in memory {q['packed_vs_in_memory']:.2f}x, vs naive memmap {q['packed_vs_memmap']:.2f}x "
        f"(page cache held to the budget: {q['packed_vs_memmap_at_budget']:.2f}x), "
        f"vs unpacked (budgeted graph-stores, shared memory) {q['packed_vs_unpacked']:.2f}x, "
        f"wire only {q['packed_vs_unpacked_wire']:.2f}x, flat file read by the loader {q['packed_vs_flat_file']:.2f}x, "
        f"naive memmap under a cgroup limit {q['packed_vs_memmap_in_cgroup']:.2f}x. An epoch served from another "
        f"epoch's packs vs in memory {q['reused_vs_in_memory']:.2f}x."
    )
    note = (
        "Needed = bytes of the rows the memory tier did not serve (cache misses; every input row for memmap). "
        "Amplification below 1 means rows shared by a pack's minibatches were read once. "
        f"Graph-stores: one process per partition, --memory-budget {r['store_budget_bytes'] / mib:.0f} MiB each, "
        "--direct-io; their disk reads count above (labels included: the budget covers every node-data table, "
        "so their reads exceed needed by the labels that were not in memory), their RSS (ready → peak) is all of "
        "their processes' "
        "(interpreter, libraries, budget rows, buffers) once READY (budget rows loaded, nothing served) and at the "
        "epoch's peak. Loader RSS = the bench "
        "process's peak RSS over its RSS before the system was built (cache, pack buffers, mapped file pages); the "
        "in-memory and packed rows sample from, and fall back to, in-process graph-stores holding the whole table, "
        "which is not counted there. Loader process peak = the whole process's VmHWM (that table, topology and "
        "every system before included: an upper bound); for the cgroup system, the child's own process, whose "
        "loader RSS column is the cgroup's peak usage (memory without features + page cache, held to the limit)."
    )
    lines += ["", packing, ratios, "", note]
    return "\n".join(lines) + "\n"
