"""``graphfeed bench distdgl``: DistDGL beside in-process DGL on graphfeed's benchmark dataset.

Systems, alternated run by run so machine drift hits both:

- ``dgl_sample_gather``: ``dgl.dataloading.NeighborSampler`` + ``DataLoader`` + ``feat[input_nodes]``
  in this process (the reference of ``graphfeed bench throughput``).
- ``distdgl``: DGL 2.1's ``dgl.distributed`` with 2 METIS partitions on 2 emulated machines
  (2 servers, 1 trainer; see :mod:`graphfeed.bench.distdgl`): ``DistNodeDataLoader`` +
  ``NeighborSampler`` + ``feat[input_nodes]`` pulled from the ``DistTensor``.

Writes JSON and a markdown table; the ratio compares DistDGL with DGL from the same run.
"""

from __future__ import annotations

import argparse
import logging
import statistics
import sys
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

from graphfeed.bench import report
from graphfeed.bench.distdgl import DistDGLRun, DistDGLSystem, ensure_partitions
from graphfeed.bench.throughput import _dgl_runner, ensure_dataset, load_global

log = logging.getLogger(__name__)


def register(sub: argparse._SubParsersAction) -> None:
    p = sub.add_parser(
        "distdgl",
        help="minibatches/s of DistDGL (2 servers, 1 trainer) vs in-process DGL",
        description=__doc__,
        formatter_class=argparse.RawDescriptionHelpFormatter,
    )
    p.add_argument("--preset", default="small", help="synthetic preset (tiny, small, medium, large; default small)")
    p.add_argument("--root", type=Path, default=None, help="an ingested dataset to use instead of the preset's")
    p.add_argument(
        "--workdir",
        type=Path,
        default=Path("runs/bench"),
        help="datasets, DistDGL partitions and logs (default runs/bench)",
    )
    p.add_argument("--steps", type=int, default=20, help="minibatches per run (default 20)")
    p.add_argument("--repeats", type=int, default=3, help="runs per system; the median is reported (default 3)")
    p.add_argument("--batch-size", type=int, default=1024, help="seeds per minibatch (default 1024)")
    p.add_argument(
        "--fanouts", type=int, nargs="+", default=[15, 10, 5], help="DGL order, input layer first (default 15 10 5)"
    )
    p.add_argument(
        "--threads",
        type=int,
        default=None,
        help="OMP threads of DistDGL's trainer and in-process DGL (default: half the cores)",
    )
    p.add_argument("--out", type=Path, default=None, help="JSON path (default bench/results/distdgl-<dataset>.json)")
    p.set_defaults(func=run)


def run_distdgl(
    root: Path,
    workdir: Path,
    fanouts: list[int],
    batch_size: int,
    steps: int,
    repeats: int,
    trainer_threads: int | None = None,
) -> dict[str, Any]:
    """DistDGL alone: 2 warm-up minibatches, then ``repeats`` runs of ``steps`` minibatches.

    Partitions ``root`` on first use (cached under ``workdir``; logs in ``workdir/logs``).
    Returns ``runs_minibatches_per_s``, their median ``minibatches_per_s``,
    ``sampled_edges_per_s`` (median), ``cpu_seconds_per_minibatch`` by process (trainer,
    server-0, server-1), ``wire_bytes_per_minibatch`` (TCP, both ways), ``startup_seconds`` and
    ``setup`` (what ran where). ``trainer_threads``: see :class:`DistDGLSystem`.
    """
    result = compare(
        root, workdir, fanouts, batch_size, steps, repeats, reference=False, trainer_threads=trainer_threads
    )
    return result["systems"]["distdgl"]


def compare(
    root: Path,
    workdir: Path,
    fanouts: list[int],
    batch_size: int,
    steps: int,
    repeats: int,
    reference: bool = True,
    trainer_threads: int | None = None,
) -> dict[str, Any]:
    """DistDGL and (with ``reference``) in-process DGL on ``root``, alternated run by run.

    Returns ``{"systems": {name: summary}, "distdgl_ratio_vs_dgl": ...}``, each summary as
    :func:`run_distdgl` describes; the ratio is there only with ``reference``.
    """
    data: list[tuple[Any, Any, Any]] = []

    def load(path: Path) -> tuple[Any, Any, Any]:
        data.append(load_global(path))  # kept: the reference samples the same graph
        return data[0]

    config = ensure_partitions(root, workdir, load)
    if reference and not data:
        load(root)
    started = time.perf_counter()
    with DistDGLSystem(config, workdir / "logs", fanouts, batch_size, trainer_threads=trainer_threads) as distdgl:
        startup = time.perf_counter() - started
        runners: dict[str, Callable[[int], DistDGLRun]] = {"distdgl": distdgl.run}
        if reference:
            runners = {
                "dgl_sample_gather": _reference(*data[0], fanouts, batch_size, distdgl.trainer_threads),
                **runners,
            }
        runs = _alternate(runners, steps, repeats)
    systems = {name: _summary(rs) for name, rs in runs.items()}
    systems["distdgl"].update(startup_seconds=startup, setup=distdgl.setup)
    out: dict[str, Any] = {"systems": systems}
    if reference:
        systems["dgl_sample_gather"]["setup"] = (
            f"in this process with the DistDGL trainer's {distdgl.trainer_threads} torch/OMP threads"
        )
        out["distdgl_ratio_vs_dgl"] = (
            systems["distdgl"]["minibatches_per_s"] / systems["dgl_sample_gather"]["minibatches_per_s"]
        )
    return out


def _reference(
    g: Any, feat: Any, train: Any, fanouts: list[int], batch_size: int, threads: int
) -> Callable[[int], DistDGLRun]:
    """``dgl_sample_gather`` of the throughput benchmark, timed with this process's CPU, on as
    many threads as the DistDGL trainer: on a shared 2-core host, 2 OMP threads made in-process
    DGL ~3x slower than 1 (the threads spin waiting for each other), which is no fair yardstick."""
    import psutil
    import torch

    sample = _dgl_runner(g, feat, train, fanouts, batch_size, gather=True)
    me = psutil.Process()

    def run(steps: int) -> DistDGLRun:
        previous = torch.get_num_threads()
        torch.set_num_threads(threads)
        cpu, started = sum(me.cpu_times()[:2]), time.perf_counter()
        try:
            edges = sample(steps)
        finally:
            torch.set_num_threads(previous)
        return DistDGLRun(steps, time.perf_counter() - started, edges, {}, {"client": sum(me.cpu_times()[:2]) - cpu})

    return run


def _alternate(
    runners: dict[str, Callable[[int], DistDGLRun]], steps: int, repeats: int
) -> dict[str, list[DistDGLRun]]:
    for fn in runners.values():  # warm-up: imports, connections, caches
        fn(2)
    runs: dict[str, list[DistDGLRun]] = {name: [] for name in runners}
    for r in range(repeats):
        for name, fn in runners.items():
            runs[name].append(fn(steps))
            log.info("repeat %d %-18s %6.2f minibatches/s", r, name, runs[name][-1].minibatches_per_s)
    return runs


def _summary(runs: list[DistDGLRun]) -> dict[str, Any]:
    minibatches = sum(r.minibatches for r in runs)
    procs = sorted({k for r in runs for k in r.cpu_seconds})
    routes = sorted({k for r in runs for k in r.traffic})
    return {
        "minibatches_per_s": statistics.median(r.minibatches_per_s for r in runs),
        "runs_minibatches_per_s": [r.minibatches_per_s for r in runs],
        "sampled_edges_per_s": statistics.median(r.sampled_edges / r.seconds for r in runs),
        "wire_bytes_per_minibatch": sum(n for r in runs for n in r.traffic.values()) / minibatches,
        "bytes_per_minibatch_by_rpc": {k: sum(r.traffic.get(k, 0) for r in runs) / minibatches for k in routes},
        "cpu_seconds_per_minibatch": {k: sum(r.cpu_seconds.get(k, 0.0) for r in runs) / minibatches for k in procs},
    }


def run(args: argparse.Namespace) -> int:
    workdir = args.workdir.resolve()
    root = args.root.resolve() if args.root else ensure_dataset(workdir, args.preset)
    fanouts = list(args.fanouts)
    result = {
        "command": "graphfeed bench distdgl " + " ".join(sys.argv[3:]),
        "dataset": root.name,
        "batch_size": args.batch_size,
        "fanouts": fanouts,
        "steps_per_run": args.steps,
        "repeats": args.repeats,
        **compare(root, workdir, fanouts, args.batch_size, args.steps, args.repeats, trainer_threads=args.threads),
    }
    report.write(args.out or Path("bench/results") / f"distdgl-{root.name}.json", result, markdown(result))
    return 0


def markdown(result: dict[str, Any]) -> str:
    """The result as a table: one row per system, then the ratio and DistDGL's setup."""
    lines = [
        (
            f"dataset `{result['dataset']}`, batch {result['batch_size']}, fanouts {result['fanouts']}, "
            f"{result['steps_per_run']} minibatches x {result['repeats']} runs per system (median)"
        ),
        "",
        "| system | minibatches/s | runs | sampled edges/s | wire MB/minibatch | CPU s/minibatch (by process) |",
        "|---|---:|---|---:|---:|---|",
    ]
    for name, s in result["systems"].items():
        runs = ", ".join(f"{v:.2f}" for v in s["runs_minibatches_per_s"])
        cpu = ", ".join(f"{k} {v:.3f}" for k, v in s["cpu_seconds_per_minibatch"].items())
        lines.append(
            f"| {name} | {s['minibatches_per_s']:.2f} | {runs} | {s['sampled_edges_per_s'] / 1e6:.2f} M | "
            f"{s['wire_bytes_per_minibatch'] / 1e6:.2f} | {cpu} |"
        )
    distdgl = result["systems"]["distdgl"]
    ratio = result["distdgl_ratio_vs_dgl"]
    lines += [
        "",
        f"**distdgl_ratio_vs_dgl = {ratio:.2f}**; DistDGL started in {distdgl['startup_seconds']:.1f} s.",
        "",
        f"Setup: {distdgl['setup']}; DGL {result['systems']['dgl_sample_gather']['setup']}.",
    ]
    return "\n".join(lines) + "\n"
