"""``graphfeed bench tgn``: the TGN job's fidelity through graphfeed (issue 16).

For each dataset, the same model, seed and chronological split trained twice in one run:
in process (``InProcessNeighbors``), and through graph-store processes that take the event
stream as durable appends while the job trains (``graphfeed.temporal_run``: TemporalClient
routing, AppendEdges with fsync, SampleTemporal over gRPC). Reports test AP / MRR of both, the
difference (the target: within 1 point), and the wall time of each. Torch runs on one thread so
that a difference can only come from the neighbours (multi-threaded CPU reductions are not
bit-reproducible).
"""

from __future__ import annotations

import argparse
import tempfile
import time
from pathlib import Path

from graphfeed.bench import harness


def _one(dataset: str, events_n: int, epochs: int, partitions: int) -> dict:
    from graphfeed.temporal_run import run_streaming
    from graphfeed.trainer.temporal.events import load_events
    from graphfeed.trainer.temporal.loop import TGNConfig, TGNTrainer

    events = load_events(dataset)
    events = events.head(events_n) if events_n else events
    cfg = TGNConfig(epochs=epochs)
    t0 = time.perf_counter()
    local = TGNTrainer(events, cfg, report=lambda _line: None).run()
    local_s = time.perf_counter() - t0
    with tempfile.TemporaryDirectory(prefix="gf-tgn-") as work:
        remote, remote_s = run_streaming(events, cfg, Path(work), partitions, report=lambda _line: None)
    return {
        "dataset": dataset,
        "events": events.num_events,
        "epochs": epochs,
        "graph_stores": partitions,
        "in_process": {"test_ap": local.test_ap, "test_mrr": local.test_mrr, "seconds": local_s},
        "graphfeed": {"test_ap": remote.test_ap, "test_mrr": remote.test_mrr, "seconds": remote_s},
        "ap_difference_points": 100 * (remote.test_ap - local.test_ap),
    }


def _table(rows: list[dict], command: str) -> str:
    lines = [
        f"`{command}`",
        "",
        (
            "| dataset | events | in-process test AP / MRR | through graphfeed test AP / MRR | AP difference (points) "
            "| time in-process / gf |"
        ),
        "|---|---:|---:|---:|---:|---:|",
    ]
    for r in rows:
        a, b = r["in_process"], r["graphfeed"]
        lines.append(
            f"| {r['dataset']} | {r['events']:,} | {a['test_ap']:.4f} / {a['test_mrr']:.4f} "
            f"| {b['test_ap']:.4f} / {b['test_mrr']:.4f} | {r['ap_difference_points']:+.2f} "
            f"| {a['seconds']:.0f} s / {b['seconds']:.0f} s |"
        )
    return "\n".join(lines) + "\n"


def run(args: argparse.Namespace) -> int:
    import torch

    torch.set_num_threads(1)
    rows = [_one(d, n, args.epochs, args.graph_stores) for d, n in zip(args.dataset, args.events)]
    command = "graphfeed bench tgn " + " ".join(
        f"--dataset {d} --events {n}" for d, n in zip(args.dataset, args.events)
    )
    harness.write(args, {"rows": rows}, _table(rows, command), "tgn")
    return 0 if all(abs(r["ap_difference_points"]) <= 1.0 for r in rows) else 1


def register(sub: argparse._SubParsersAction) -> None:
    help = "TGN through graphfeed (durable appends, temporal sampling) vs in process: AP/MRR"
    harness.register(sub, "tgn", __doc__, help, add_arguments, _defaults_then_run)


def add_arguments(p: argparse.ArgumentParser) -> None:
    p.add_argument(
        "--dataset", action="append", choices=("collegemsg", "lastfm"), help="repeat; default collegemsg and lastfm"
    )
    p.add_argument(
        "--events", type=int, action="append", help="events per dataset (0: all); default all CollegeMsg, 60000 LastFM"
    )
    p.add_argument("--epochs", type=int, default=1)
    p.add_argument("--graph-stores", type=int, default=2)


def _defaults_then_run(args: argparse.Namespace) -> int:
    args.dataset = args.dataset or ["collegemsg", "lastfm"]
    args.events = args.events or [0, 60_000][: len(args.dataset)]
    if len(args.events) != len(args.dataset):
        raise SystemExit("graphfeed bench tgn: give one --events per --dataset")
    return run(args)
