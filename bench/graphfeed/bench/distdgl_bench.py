"""``graphfeed bench distdgl``: DistDGL beside in-process DGL on graphfeed's benchmark dataset.

Systems, alternated run by run so machine drift hits both:

- ``dgl_sample_gather``: ``dgl.dataloading.NeighborSampler`` + ``DataLoader`` + ``feat[input_nodes]``
  in this process (the reference of ``graphfeed bench throughput``), on as many threads as the
  DistDGL trainer: on a shared 2-core host, 2 OMP threads made in-process DGL ~3x slower than 1
  (the threads spin waiting for each other), which is no fair yardstick.
- ``distdgl``: DGL 2.1's ``dgl.distributed`` with 2 METIS partitions on 2 emulated machines
  (2 servers, 1 trainer; see :mod:`graphfeed.bench.distdgl`): ``DistNodeDataLoader`` +
  ``NeighborSampler`` + ``feat[input_nodes]`` pulled from the ``DistTensor``.

A typed dataset (``--root`` of a graph with node/edge types) runs both on the same DGL
heterograph: seeds ``{ntype: ids}`` and each type's features pulled from its own table.

Writes JSON and a markdown table; the ratio compares DistDGL with DGL from the same run.
"""

from __future__ import annotations

import argparse
import time
from pathlib import Path
from typing import Any

from graphfeed.bench import harness, runs, systems
from graphfeed.bench.distdgl import DistDGLSystem, ensure_partitions


def register(sub: argparse._SubParsersAction) -> None:
    harness.register(
        sub,
        "distdgl",
        __doc__,
        "minibatches/s of DistDGL (2 servers, 1 trainer) vs in-process DGL",
        add_arguments,
        run,
        steps=20,
        repeats=3,
        **harness.DATASET,
    )


def add_arguments(p: argparse.ArgumentParser) -> None:
    p.add_argument(
        "--threads",
        type=int,
        default=None,
        help="OMP threads of DistDGL's trainer and in-process DGL (default: half the cores)",
    )


def compare(
    root: Path, workdir: Path, fanouts: list[int], batch_size: int, steps: int, repeats: int, threads: int | None
) -> dict[str, Any]:
    """DistDGL and in-process DGL on ``root``, alternated run by run; DistDGL's partitions are
    made on first use (cached under ``workdir``; logs in ``workdir/logs``).

    Returns ``{"systems": {name: summary}, "distdgl_ratio_vs_dgl": ...}`` (summaries as
    :func:`graphfeed.bench.runs.summarize`; DistDGL's also ``startup_seconds`` and ``setup``).
    """
    data: list[tuple[Any, Any, Any]] = []

    def load(path: Path) -> tuple[Any, Any, Any]:
        data.append(harness.load_global(path))  # kept: the reference samples the same graph
        return data[0]

    config = ensure_partitions(root, workdir, load)
    g, feat, train = data[0] if data else load(root)
    started = time.perf_counter()
    with DistDGLSystem(config, workdir / "logs", fanouts, batch_size, trainer_threads=threads) as distdgl:
        startup = time.perf_counter() - started
        n = distdgl.trainer_threads
        timed = {
            "dgl_sample_gather": systems.dgl_system(g, feat, train, fanouts, batch_size, gather=True, threads=n),
            "distdgl": distdgl.run,
        }
        summary = runs.summarize(runs.alternate(timed, runs.Meter(), steps, repeats))
    summary["distdgl"].update(startup_seconds=startup, setup=distdgl.setup)
    summary["dgl_sample_gather"]["setup"] = f"in this process with the DistDGL trainer's {n} torch/OMP threads"
    return {"systems": summary, "distdgl_ratio_vs_dgl": runs.ratio(summary, "distdgl", "dgl_sample_gather")}


def run(args: argparse.Namespace) -> int:
    root = harness.ensure_dataset(args)
    result = {
        "dataset": root.name,
        "batch_size": args.batch_size,
        "fanouts": list(args.fanouts),
        "steps_per_run": args.steps,
        "repeats": args.repeats,
        **compare(
            root, args.workdir.resolve(), list(args.fanouts), args.batch_size, args.steps, args.repeats, args.threads
        ),
    }
    harness.write(args, result, markdown(result), f"distdgl-{root.name}")
    return 0


def markdown(result: dict[str, Any]) -> str:
    """The result as a table: one row per system, then the ratio and DistDGL's setup."""
    distdgl = result["systems"]["distdgl"]
    lines = [
        (
            f"dataset `{result['dataset']}`, batch {result['batch_size']}, fanouts {result['fanouts']}, "
            f"{result['steps_per_run']} minibatches x {result['repeats']} runs per system"
        ),
        "",
        *runs.table(result["systems"]),
        "",
        f"**distdgl_ratio_vs_dgl = {result['distdgl_ratio_vs_dgl']:.2f}**; up in {distdgl['startup_seconds']:.1f} s.",
        "",
        f"Setup: {distdgl['setup']}; DGL {result['systems']['dgl_sample_gather']['setup']}.",
    ]
    return "\n".join(lines) + "\n"
