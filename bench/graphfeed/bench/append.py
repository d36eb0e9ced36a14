"""``graphfeed bench append``: the temporal graph through gRPC, with real graph-store processes.

Three measurements (issue 16):

(a) **Durability under kill -9** (``--kill-trials``): two graph-store processes serve a
    synthetic temporal graph; a writer appends batches in a loop through
    :class:`~graphfeed.graph_store.temporal.client.TemporalClient` (new nodes included). Each
    trial SIGKILLs one graph-store mid-stream and restarts it on the same partition, port and
    append dir; the writer retries its outstanding batch with the same batch id. After each
    trial every acknowledged edge must be present exactly once: SampleTemporal with fanout -1 at
    t = max int64 for every touched node, multisets of ``(dst, src, t)`` of the appended edges
    compared with the acknowledged ones (0 lost, 0 applied twice is the target).
(b) **Durable appends/s through gRPC**: ``--batches`` batches of ``--batch-edges`` (10k) edges
    into one graph-store, ``--in-flight`` writers (disjoint destinations, so per-node time order
    holds), each ack fsync'd. Edges/s, p50/p99 batch latency and request bytes. Target: >= 1M
    edges/s per graph-store.
(d) **Restart cost** after (b): the append dir on disk (log, snapshots) and the time to open
    it again. With ``--restart-batches``, also in process: that many batches of random edges
    appended with snapshots off and on (``--snapshot-min-edges``), then the same measures.
(c) **Temporal sampling roots/s**: ``--roots`` roots, fanout ``--fanout``, both strategies,
    through gRPC vs the in-process store vs the vectorized NumPy baseline of ``bench temporal``
    (same data, same run; outputs checked identical).
"""

from __future__ import annotations

import argparse
import shutil
import sys
import tempfile
import threading
import time
from collections.abc import Callable
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass, field
from functools import partial
from pathlib import Path

import numpy as np

from graphfeed.bench import harness
from graphfeed.bench.systems import free_port
from graphfeed.bench.temporal import COMMON, T_SPAN, _baseline, _best, temporal_graph
from graphfeed.cluster import ServiceProcess, start_service
from graphfeed.common.partition import part_dir_name
from graphfeed.graph_store.client import GraphStoreClient
from graphfeed.graph_store.partitions import RemotePartitionSet
from graphfeed.graph_store.temporal.client import TemporalClient
from graphfeed.graph_store.temporal.store import TemporalStore

BIG_T = np.iinfo(np.int64).max
APPENDED = 1 << 62  # the eid bit of an appended edge


@dataclass
class StoreProcess:
    """One ``graphfeed serve graph-store --append-dir`` process on a fixed port, restartable in place."""

    part_dir: Path
    append_dir: Path
    log_dir: Path
    extra_args: list[str] = field(default_factory=list)  # more ``serve graph-store`` flags
    port: int = field(default_factory=free_port)
    process: ServiceProcess | None = None
    starts: int = 0

    @property
    def address(self) -> str:
        return f"127.0.0.1:{self.port}"

    def start(self) -> None:
        """Starts the process and waits for it to serve (or its death)."""
        self.starts += 1
        argv = ["graph-store", "--part-dir", str(self.part_dir), "--append-dir", str(self.append_dir)]
        argv += ["--port", str(self.port), "--metrics-port", "-1", *self.extra_args]
        self.process = start_service(f"{self.part_dir.name}-{self.starts}", argv, self.log_dir)

    def kill9(self) -> None:
        """SIGKILL, and wait for the process to be gone."""
        if self.process is not None:
            self.process.proc.kill()
            self.process.proc.wait(30)

    def stop(self) -> int:
        """SIGTERM (graceful); the exit code."""
        return 0 if self.process is None else self.process.stop()


class Writer(threading.Thread):
    """Appends batches in a loop until stopped, recording every acknowledged edge.

    Destinations are a mix of ingest-time nodes and new ids ``>= num_nodes``; batch ``b`` has
    time ``first_t + b`` (never going back per node). A failure is kept and re-raised by :meth:`result`.
    """

    def __init__(self, client: TemporalClient, num_nodes: int, batch_edges: int, seed: int, first_t: int) -> None:
        super().__init__(daemon=True)
        self.first_t = first_t
        self.client, self.num_nodes, self.batch_edges = client, num_nodes, batch_edges
        self.rng = np.random.default_rng(seed)
        self.acked: list[np.ndarray] = []  # [3, n] (dst, src, t) per acknowledged batch
        self.stop_event = threading.Event()
        self.error: BaseException | None = None
        self.batches = 0

    def run(self) -> None:
        try:
            while not self.stop_event.is_set():
                n, top = self.batch_edges, self.num_nodes + self.num_nodes // 4
                src, dst = self.rng.integers(0, top, n), self.rng.integers(0, top, n)
                t = np.full(n, self.first_t + self.batches, dtype=np.int64)
                self.client.append(src, dst, t)
                self.acked.append(np.stack([dst, src, t]))
                self.batches += 1
        except BaseException as exc:  # noqa: BLE001 - re-raised by result()
            self.error = exc

    def wait_for(self, batches: int, timeout_s: float = 120.0) -> None:
        """Blocks until ``batches`` batches are acknowledged in all (a condition with a deadline)."""
        deadline = time.monotonic() + timeout_s
        while self.batches < batches:
            if self.error is not None or time.monotonic() > deadline:
                raise RuntimeError(f"writer stuck at {self.batches} batches (wanted {batches})") from self.error
            time.sleep(0.01)

    def result(self) -> np.ndarray:
        """Stops; every acknowledged ``(dst, src, t)`` as int64 [3, n]."""
        self.stop_event.set()
        self.join(120)
        if self.error is not None:
            raise self.error
        return np.concatenate(self.acked, axis=1) if self.acked else np.empty((3, 0), dtype=np.int64)


def stored_appends(client: TemporalClient, nodes: np.ndarray) -> np.ndarray:
    """Every appended edge into ``nodes`` as ``(dst, src, t)`` int64 [3, n] (SampleTemporal, fanout -1)."""
    (s,) = client.sample(nodes, np.full(len(nodes), BIG_T), [-1], with_features=False)
    dst = np.repeat(nodes, np.diff(s.offsets))
    mine = (s.eid & APPENDED) != 0
    return np.stack([dst[mine], s.nbr[mine], s.ts[mine]])


def compare(acked: np.ndarray, stored: np.ndarray) -> dict[str, int]:
    """``lost``: acknowledged edges missing; ``duplicated``: stored more often than acknowledged."""
    rows, inverse = np.unique(np.concatenate([acked, stored], axis=1).T, axis=0, return_inverse=True)
    inverse = inverse.reshape(-1)
    want = np.bincount(inverse[: acked.shape[1]], minlength=len(rows))
    got = np.bincount(inverse[acked.shape[1] :], minlength=len(rows))
    return {
        "acked": int(acked.shape[1]),
        "stored": int(stored.shape[1]),
        "lost": int(np.maximum(want - got, 0).sum()),
        "duplicated": int(np.maximum(got - want, 0).sum()),
    }


def kill_trials(
    root: Path,
    work: Path,
    trials: int,
    batch_edges: int = 500,
    seed: int = 0,
    on_trial: Callable[[dict], None] | None = None,
    extra_args: tuple[str, ...] = (),
    batches_before_kill: int = 5,
) -> list[dict]:
    """Runs ``trials`` kill -9 / restart cycles (partition ``k % 2`` in trial k) under a streaming
    writer; returns one result per trial (see :func:`compare`, plus retries and times).
    ``extra_args``: more ``serve graph-store`` flags (e.g. small snapshot thresholds)."""
    (work / "logs").mkdir(parents=True, exist_ok=True)
    stores = [
        StoreProcess(root / part_dir_name(p), work / f"appends-{p}", work / "logs", list(extra_args)) for p in range(2)
    ]
    results: list[dict] = []
    acked_all: list[np.ndarray] = []  # every trial's acknowledged edges: the stores keep them all
    client = None
    try:
        with ThreadPoolExecutor(2) as pool:
            list(pool.map(lambda s: s.start(), stores))
        # reads (the final check samples every node) get a deadline that tolerates a loaded machine;
        # appends keep 10 s per attempt, so a killed store is retried promptly, and keep retrying
        # for as long as a restart (interpreter, imports, log replay) can take on a machine whose
        # other work slows it several times (a 120 s budget ran out under load: issue 28)
        partitions = RemotePartitionSet([s.address for s in stores], timeout_s=180)
        client = TemporalClient(partitions, client_id="durability", attempt_timeout_s=10, retry_deadline_s=600)
        num_nodes = int(partitions.info.num_nodes)
        for k in range(trials):
            writer = Writer(client, num_nodes, batch_edges, seed + k, first_t=10**9 + 10**6 * k)
            writer.start()
            writer.wait_for(batches_before_kill)
            retries0, victim, t0 = client.retries, stores[k % 2], time.perf_counter()
            victim.kill9()
            victim.start()
            down_s = time.perf_counter() - t0
            writer.wait_for(writer.batches + 5)
            acked_all.append(writer.result())
            acked = np.concatenate(acked_all, axis=1)
            row = {
                "trial": k,
                "killed": k % 2,
                "batches": writer.batches,
                "retries": client.retries - retries0,
                "down_s": down_s,
                **compare(acked, stored_appends(client, np.unique(acked[0]))),
            }
            results.append(row)
            if on_trial is not None:
                on_trial(row)
    finally:
        if client is not None:
            client.close()
        codes = [s.stop() for s in stores]
    if any(codes):
        raise RuntimeError(f"graph-stores exited with {codes}; logs in {work / 'logs'}")
    return results


def _throughput(address: str, args: argparse.Namespace) -> dict:
    """(b): durable appends through gRPC, ``in_flight`` writers with disjoint destinations."""
    rng, n, k = np.random.default_rng(args.seed + 5), args.batch_edges, args.in_flight
    per_writer = -(-args.batches // k)
    lat: list[float] = []

    def write(w: int) -> None:
        c = GraphStoreClient(address)
        try:
            dst = (rng.integers(0, args.nodes // k, n) * k + w).astype(np.int64)
            src = rng.integers(0, args.nodes, n)
            for b in range(per_writer):
                t0 = time.perf_counter()
                c.append_edges(f"tp-{w}-{b}", src, dst, np.full(n, 2 * T_SPAN + b))
                lat.append(time.perf_counter() - t0)
        finally:
            c.close()

    t_all = time.perf_counter()
    with ThreadPoolExecutor(k) as pool:
        list(pool.map(write, range(k)))
    wall = time.perf_counter() - t_all
    edges = per_writer * k * n
    return {
        "batches": per_writer * k,
        "batch_edges": n,
        "in_flight": k,
        "edges": edges,
        "wall_s": wall,
        "edges_per_s": edges / wall,
        "p50_ms": float(np.percentile(lat, 50) * 1e3),
        "p99_ms": float(np.percentile(lat, 99) * 1e3),
        "max_ms": float(np.max(lat) * 1e3),
        "request_bytes": edges * 24,
        "mb_per_s": edges * 24 / wall / 1e6,
    }


def _sampling(address: str, part: Path, args: argparse.Namespace) -> list[dict]:
    """(c): the same roots through gRPC, in process, and with the NumPy baseline."""
    rng = np.random.default_rng(args.seed + 2)
    nodes, times = rng.integers(0, args.nodes, args.roots), rng.integers(0, T_SPAN, args.roots)
    local = TemporalStore.open(part, None)
    remote, shared = GraphStoreClient(address), GraphStoreClient(address, shm_dir="/dev/shm")
    name, baseline = _baseline()
    b = local._snap.base  # noqa: SLF001 - the baseline samples the same time-sorted CSR
    rows = []
    try:
        for strategy in ("recent", "uniform"):
            calls: dict[str, Callable[[], object]] = {
                "grpc": partial(
                    remote.sample_temporal, nodes, times, args.fanout, strategy=strategy, seed=7, with_features=False
                ),
                "grpc_shm": partial(
                    shared.sample_temporal, nodes, times, args.fanout, strategy=strategy, seed=7, with_features=False
                ),
                "in_process": partial(local.sample, nodes, times, args.fanout, strategy, 7, with_features=False),
                "numpy": partial(baseline, b.indptr, b.nbr, b.ts, b.eid, nodes, times, args.fanout, strategy, 7),
            }
            best = _best(calls, args.repeats)
            ref = baseline(b.indptr, b.nbr, b.ts, b.eid, nodes, times, args.fanout, strategy, 7)
            outs = [
                remote.sample_temporal(nodes, times, args.fanout, strategy=strategy, seed=7, with_features=False),
                shared.sample_temporal(nodes, times, args.fanout, strategy=strategy, seed=7, with_features=False),
                local.sample(nodes, times, args.fanout, strategy, 7, with_features=False),
            ]
            fields = ("offsets", "nbr", "ts", "eid")
            same = all(np.array_equal(getattr(o, f), r) for o in outs for f, r in zip(fields, ref))
            row = {
                "strategy": strategy,
                "roots": args.roots,
                "fanout": args.fanout,
                "baseline": name,
                "identical": bool(same),
            }
            for key, secs in best.items():
                row[f"{key}_s"], row[f"{key}_roots_per_s"] = secs, args.roots / secs
            row["grpc_vs_numpy"], row["grpc_shm_vs_numpy"] = (
                best["numpy"] / best["grpc"],
                best["numpy"] / best["grpc_shm"],
            )
            rows.append(row)
    finally:
        remote.close()
        shared.close()
        local.close()
    return rows


def _restart(part: Path, append_dir: Path) -> dict:
    """(d): what a restart costs after the throughput run: the append dir on disk and the open time."""
    on_disk = sum(f.stat().st_size for f in append_dir.rglob("*") if f.is_file())
    snapshots = sum(f.stat().st_size for f in (append_dir / "snapshots").rglob("*") if f.is_file())
    t0 = time.perf_counter()
    store = TemporalStore.open(part, append_dir)
    open_s = time.perf_counter() - t0
    info = store.info()
    store.close()
    return {
        "append_dir_bytes": on_disk,
        "log_bytes": on_disk - snapshots,
        "snapshot_bytes": snapshots,
        "open_s": open_s,
        "num_appended": info.num_appended,
        "seq": info.seq,
    }


def _restart_compare(part: Path, work: Path, args: argparse.Namespace) -> list[dict]:
    """(d), in process: random batches with snapshots off, then on; log / snapshot bytes and open time after each."""
    rows = []
    for snapshot_min in (0, args.snapshot_min_edges):
        log_dir, rng = work / f"restart-{snapshot_min}", np.random.default_rng(args.seed + 9)
        store = TemporalStore.open(
            part,
            log_dir,
            max_blocks=args.max_blocks,
            compact_min_edges=args.compact_min_edges,
            snapshot_min_edges=snapshot_min,
            max_append_edges=max(1_000_000, args.batch_edges),
        )
        try:
            for b in range(args.restart_batches):
                n = args.batch_edges
                store.append(
                    f"r{b}", rng.integers(0, args.nodes, n), rng.integers(0, args.nodes, n), np.full(n, 2 * T_SPAN + b)
                )
        finally:
            store.close()
        rows.append({"snapshot_min_edges": snapshot_min, **_restart(part, log_dir)})
    return rows


def _table(
    args: argparse.Namespace, trials: list[dict], tp: dict, samp: list[dict], rs: dict, compare: list[dict]
) -> str:
    lines = [f"# graphfeed bench append ({args.nodes:,} nodes, {args.edges:,} base edges, through gRPC)", ""]
    if trials:
        lost, dup, acked = sum(t["lost"] for t in trials), sum(t["duplicated"] for t in trials), trials[-1]["acked"]
        lines += [
            (
                f"Durability: {len(trials)} kill -9 trials, {acked:,} acknowledged edges: "
                f"**{lost} lost, {dup} applied twice**."
            ),
            "",
            "| trial | killed partition | retried sends | restart s | acked (cumulative) | stored |",
            "|---|---|---|---|---|---|",
        ]
        for t in trials:
            lines.append(
                f"| {t['trial']} | {t['killed']} | {t['retries']} | {t['down_s']:.1f} | {t['acked']:,} "
                f"| {t['stored']:,} |"
            )
        lines.append("")
    lines += [
        "| appends | batch edges | in flight | durable edges/s | p50 ms | p99 ms | max ms | request MB/s |",
        "|---|---|---|---|---|---|---|---|",
        (
            f"| {tp['batches']} | {tp['batch_edges']:,} | {tp['in_flight']} | {tp['edges_per_s']:,.0f} "
            f"| {tp['p50_ms']:.2f} | {tp['p99_ms']:.2f} | {tp['max_ms']:.2f} | {tp['mb_per_s']:.1f} |"
        ),
        "",
        (
            f"Temporal settings: max blocks {args.max_blocks}, compact min edges {args.compact_min_edges:,}, "
            f"snapshot min edges {args.snapshot_min_edges:,}."
        ),
        "",
        "| restart: log MB on disk | snapshot MB | open s | appended edges | batches |",
        "|---|---|---|---|---|",
        (
            f"| {rs['log_bytes'] / 1e6:.1f} | {rs['snapshot_bytes'] / 1e6:.1f} | {rs['open_s']:.2f} "
            f"| {rs['num_appended']:,} | {rs['seq']} |"
        ),
        "",
    ]
    if compare:
        lines += [
            (
                "| restart, random batches in process: snapshot min edges | log MB | snapshot MB | open s "
                "| appended edges | batches |"
            ),
            "|---|---|---|---|---|---|",
        ]
        for r in compare:
            mb = f"{r['log_bytes'] / 1e6:.1f} | {r['snapshot_bytes'] / 1e6:.1f}"
            lines.append(
                f"| {r['snapshot_min_edges']:,} | {mb} | {r['open_s']:.2f} | {r['num_appended']:,} | {r['seq']} |"
            )
    lines += [
        "",
        (
            f"| sampling (fanout {args.fanout}, {args.roots:,} roots) | gRPC roots/s | gRPC + shm roots/s "
            "| in-process roots/s | NumPy roots/s | gRPC / NumPy | gRPC + shm / NumPy | identical |"
        ),
        "|---|---|---|---|---|---|---|---|",
    ]
    for r in samp:
        lines.append(
            f"| {r['strategy']} | {r['grpc_roots_per_s']:,.0f} | {r['grpc_shm_roots_per_s']:,.0f} "
            f"| {r['in_process_roots_per_s']:,.0f} | {r['numpy_roots_per_s']:,.0f} | {r['grpc_vs_numpy']:.2f}x "
            f"| {r['grpc_shm_vs_numpy']:.2f}x | {r['identical']} |"
        )
    lines += ["", f"NumPy baseline: `{samp[0]['baseline']}` (vectorized, same data, same run).", ""]
    return "\n".join(lines)


def run(args: argparse.Namespace) -> int:
    work = Path(tempfile.mkdtemp(prefix="append-", dir=args.workdir))
    try:
        trials: list[dict] = []
        if args.kill_trials:
            root = temporal_graph(work / "g2", 10_000, 100_000, args.seed, partitions=2)
            trials = kill_trials(
                root, work / "kill", args.kill_trials, seed=args.seed, on_trial=lambda r: print(r, flush=True)
            )
        part = temporal_graph(work / "graph", args.nodes, args.edges, args.seed) / part_dir_name(0)
        store = StoreProcess(part, work / "appends", work, _temporal_flags(args))
        store.start()
        try:
            samp = _sampling(store.address, part, args)
            tp = _throughput(store.address, args)
        finally:
            code = store.stop()
        restart = _restart(part, work / "appends")
        compare = _restart_compare(part, work, args) if args.restart_batches else []
    finally:
        shutil.rmtree(work, ignore_errors=True)
    result = {
        "args": {k: str(v) for k, v in vars(args).items() if k not in ("func", "machine_start")},
        "durability": trials,
        "appends": tp,
        "sampling": samp,
        "restart": restart,
        "restart_compare": compare,
        "graph_store_exit": code,
    }
    harness.write(args, result, _table(args, trials, tp, samp, restart, compare), "append")
    ok = code == 0 and all(r["identical"] for r in samp) and not any(t["lost"] or t["duplicated"] for t in trials)
    return 0 if ok else 1


def _temporal_flags(args: argparse.Namespace) -> list[str]:
    return [
        "--temporal-max-blocks",
        str(args.max_blocks),
        "--temporal-compact-min-edges",
        str(args.compact_min_edges),
        "--temporal-snapshot-min-edges",
        str(args.snapshot_min_edges),
    ]


def _add_arguments(p: argparse.ArgumentParser) -> None:
    p.add_argument("--kill-trials", type=int, default=10, help="kill -9 / restart trials (default 10; 0 skips)")
    p.add_argument(
        "--nodes", type=int, default=100_000, help="nodes of the throughput / sampling graph (default 100,000)"
    )
    p.add_argument("--edges", type=int, default=2_000_000, help="its base edges (default 2,000,000)")
    p.add_argument("--batches", type=int, default=200, help="append batches for the throughput (default 200)")
    p.add_argument("--batch-edges", type=int, default=10_000, help="edges per append batch (default 10,000)")
    p.add_argument("--in-flight", type=int, default=2, help="concurrent writers, disjoint destinations (default 2)")
    p.add_argument("--roots", type=int, default=100_000, help="(node, time) roots per sample call (default 100,000)")
    p.add_argument("--fanout", type=int, default=10, help="neighbours per root (default 10)")
    p.add_argument("--max-blocks", type=int, default=256, help="graph-store --temporal-max-blocks (default 256)")
    p.add_argument(
        "--compact-min-edges", type=int, default=1_000_000, help="--temporal-compact-min-edges (default 1,000,000)"
    )
    p.add_argument(
        "--snapshot-min-edges", type=int, default=1_000_000, help="--temporal-snapshot-min-edges (default 1,000,000)"
    )
    p.add_argument(
        "--restart-batches", type=int, default=0, help="(d) random batches, snapshots off / on (default 0: skip)"
    )


def register(sub: argparse._SubParsersAction) -> None:
    """``graphfeed bench append``."""
    help = "kill -9 durability, durable appends/s and temporal sampling through gRPC"
    harness.register(sub, "append", __doc__, help, _add_arguments, run, **COMMON)


def main(argv: list[str] | None = None) -> int:
    return harness.main(__doc__, _add_arguments, run, argv, **COMMON)


if __name__ == "__main__":
    sys.exit(main())
