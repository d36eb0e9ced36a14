"""``graphfeed bench tgn --pyg``: graphfeed's TGN beside PyG's TGN example, several seeds (issue 29).

Per dataset and seed, in one run: PyG's example (:mod:`graphfeed.bench.tgn_pyg`), graphfeed with
``--visibility previous-batches`` (PyG's information: neighbours from earlier batches) and with
``same-batch`` (the TGN paper's code: earlier events of the batch too). All score the same
(positive, negative) pairs and report test AP after epoch 1, after the last epoch, and of the
epoch with the best validation AP (graphfeed keeps that one), as mean ± std over the seeds.
One negative per event everywhere (no MRR: AP only, and a third of graphfeed's time). Torch runs
on one thread; ``--jobs`` runs that many trainings at a time, in separate processes (one per
training: a GPU run turns on PyTorch's deterministic algorithms for its process). ``--device
cuda`` runs every system on the GPU.
"""

from __future__ import annotations

import argparse
import multiprocessing
import time
from concurrent.futures import ProcessPoolExecutor

import numpy as np

SYSTEMS = ("pyg", "graphfeed previous-batches", "graphfeed same-batch")


def one_run(dataset: str, events_n: int, system: str, seed: int, epochs: int, fanout: int, device: str = "cpu") -> dict:
    """Trains one system once; per-epoch validation / test AP and seconds."""
    import torch

    from graphfeed.trainer.temporal.events import load_events

    torch.set_num_threads(1)
    events = load_events(dataset)
    events = events.head(events_n) if events_n else events
    t0 = time.perf_counter()
    if system == "pyg":
        from graphfeed.bench.tgn_pyg import train_pyg

        runs = train_pyg(events, seed, epochs, fanout=fanout, mrr_negatives=1, device=device)
        per_epoch = [(e.val_ap, e.test_ap) for e in runs]
    else:
        from graphfeed.trainer.temporal.loop import TGNConfig, TGNTrainer

        visibility = system.split()[-1]
        cfg = TGNConfig(seed=seed, epochs=epochs, fanout=fanout, visibility=visibility, mrr_negatives=1, device=device)
        result = TGNTrainer(events, cfg, report=lambda _line: None).run()
        per_epoch = [(e.metrics["val"][0], e.metrics["test"][0]) for e in result.epochs]
    return {
        "dataset": dataset,
        "events": events.num_events,
        "system": system,
        "seed": seed,
        "device": device,
        "val_ap": [v for v, _ in per_epoch],
        "test_ap": [t for _, t in per_epoch],
        "seconds": time.perf_counter() - t0,
    }


def _stat(values: list[float]) -> dict:
    a = np.asarray(values, dtype=np.float64)
    return {"mean": float(a.mean()), "std": float(a.std(ddof=1)) if len(a) > 1 else 0.0, "n": len(a)}


def summarize(runs: list[dict]) -> list[dict]:
    """One row per (dataset, system): test AP after epoch 1, after the last, at the best val epoch."""
    rows = []
    for dataset in dict.fromkeys(r["dataset"] for r in runs):
        for system in SYSTEMS:
            mine = [r for r in runs if r["dataset"] == dataset and r["system"] == system]
            if not mine:
                continue
            best = [r["test_ap"][int(np.argmax(r["val_ap"]))] for r in mine]
            rows.append(
                {
                    "dataset": dataset,
                    "events": mine[0]["events"],
                    "system": system,
                    "seeds": [r["seed"] for r in mine],
                    "epochs": len(mine[0]["test_ap"]),
                    "test_ap_epoch1": _stat([r["test_ap"][0] for r in mine]),
                    "test_ap_last": _stat([r["test_ap"][-1] for r in mine]),
                    "test_ap_best_val": _stat(best),
                    "seconds_per_epoch": float(np.mean([r["seconds"] / len(r["test_ap"]) for r in mine])),
                    "device": mine[0].get("device", "cpu"),
                }
            )
    return rows


def table(rows: list[dict], command: str) -> str:
    fmt = lambda s: f"{s['mean']:.4f} ± {s['std']:.4f}"  # noqa: E731
    epochs = rows[0]["epochs"] if rows else 0
    lines = [
        f"`{command}`",
        "",
        (
            f"| dataset | events | system | test AP, epoch 1 | test AP, epoch {epochs} "
            "| test AP, best-val epoch | s / epoch |"
        ),
        "|---|---:|---|---:|---:|---:|---:|",
    ]
    for r in rows:
        lines.append(
            f"| {r['dataset']} | {r['events']:,} | {r['system']} | {fmt(r['test_ap_epoch1'])} "
            f"| {fmt(r['test_ap_last'])} | {fmt(r['test_ap_best_val'])} | {r['seconds_per_epoch']:.0f} |"
        )
    seeds = rows[0]["seeds"] if rows else []
    where = rows[0].get("device", "cpu") if rows else "cpu"
    lines += [
        "",
        (
            f"Mean ± sample std over seeds {seeds}; one negative per event; torch on 1 thread per training; "
            f"device {where}."
        ),
    ]
    return "\n".join(lines) + "\n"


def run_all(args: argparse.Namespace) -> tuple[list[dict], list[dict]]:
    """Every (dataset, seed, system) training of the comparison; (runs, summary rows)."""
    todo = [
        (d, n, system, seed, args.epochs, args.fanout, args.device)
        for d, n in zip(args.dataset, args.events)
        for seed in args.seeds
        for system in SYSTEMS
    ]
    runs = []
    spawn = multiprocessing.get_context("spawn")  # CUDA does not survive a fork
    with ProcessPoolExecutor(args.jobs, mp_context=spawn, max_tasks_per_child=1) as pool:
        for r in pool.map(one_run, *zip(*todo)):  # in order, each as soon as it and those before it are done
            print(
                f"{r['dataset']} seed {r['seed']} {r['system']}: val AP {r['val_ap']} test AP {r['test_ap']}",
                flush=True,
            )
            runs.append(r)
    return runs, summarize(runs)
