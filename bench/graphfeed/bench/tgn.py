"""``graphfeed bench tgn``: the TGN job's fidelity through graphfeed (issue 16).

For each dataset, the same model, seed and chronological split trained twice in one run:
in process (``InProcessNeighbors``), and through graph-store processes that take the event
stream as durable appends while the job trains (``graphfeed.temporal_run``: TemporalClient
routing, AppendEdges with fsync, SampleTemporal over gRPC). Reports test AP / MRR of both, the
difference (the target: within 1 point), and the wall time of each. ``--visibility
previous-batches`` runs both with PyG's information (the stores sampled as of each append).
Torch runs on one thread so that a difference can only come from the neighbours
(multi-threaded CPU reductions are not bit-reproducible).

With ``--pyg``: graphfeed's TGN beside PyG's TGN example instead, several seeds, both neighbour
visibilities (:mod:`graphfeed.bench.tgn_compare`).
"""

from __future__ import annotations

import argparse
import sys
import tempfile
import time
from pathlib import Path

from graphfeed.bench import harness

DATASETS = ("collegemsg", "lastfm", "pubmed")


def _one(dataset: str, events_n: int, epochs: int, partitions: int, seed: int, visibility: str) -> dict:
    from graphfeed.temporal_run import run_streaming
    from graphfeed.trainer.temporal.events import load_events
    from graphfeed.trainer.temporal.loop import TGNConfig, TGNTrainer

    events = load_events(dataset)
    events = events.head(events_n) if events_n else events
    cfg = TGNConfig(epochs=epochs, seed=seed, visibility=visibility)
    t0 = time.perf_counter()
    local = TGNTrainer(events, cfg, report=lambda _line: None).run()
    local_s = time.perf_counter() - t0
    with tempfile.TemporaryDirectory(prefix="gf-tgn-") as work:
        remote, remote_s = run_streaming(events, cfg, Path(work), partitions, report=lambda _line: None)
    return {
        "dataset": dataset,
        "events": events.num_events,
        "epochs": epochs,
        "seed": seed,
        "graph_stores": partitions,
        "visibility": visibility,
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
            f"| {r['dataset']} (seed {r['seed']}) | {r['events']:,} | {a['test_ap']:.4f} / {a['test_mrr']:.4f} "
            f"| {b['test_ap']:.4f} / {b['test_mrr']:.4f} | {r['ap_difference_points']:+.2f} "
            f"| {a['seconds']:.0f} s / {b['seconds']:.0f} s |"
        )
    return "\n".join(lines) + "\n"


def _command(args: argparse.Namespace) -> str:
    data = " ".join(f"--dataset {d} --events {n}" for d, n in zip(args.dataset, args.events))
    seeds = " ".join(str(s) for s in args.seeds)
    extra = (
        f" --pyg --fanout {args.fanout} --jobs {args.jobs} --device {args.device}"
        if args.pyg
        else f" --graph-stores {args.graph_stores} --visibility {args.visibility}"
    )
    return f"graphfeed bench tgn {data} --seeds {seeds} --epochs {args.epochs}{extra}"


def run(args: argparse.Namespace) -> int:
    import torch

    torch.set_num_threads(1)
    if args.pyg:
        from graphfeed.bench import tgn_compare, tgn_pyg

        missing = tgn_pyg.available()
        if missing:
            print(f"graphfeed bench tgn --pyg: {missing}", file=sys.stderr)
            return 2
        runs, summary = tgn_compare.run_all(args)
        harness.write(args, {"runs": runs, "rows": summary}, tgn_compare.table(summary, _command(args)), "tgn_pyg")
        return 0
    rows = [
        _one(d, n, args.epochs, args.graph_stores, seed, args.visibility)
        for d, n in zip(args.dataset, args.events)
        for seed in args.seeds
    ]
    harness.write(args, {"rows": rows}, _table(rows, _command(args)), "tgn")
    return 0 if all(abs(r["ap_difference_points"]) <= 1.0 for r in rows) else 1


def register(sub: argparse._SubParsersAction) -> None:
    help = "TGN through graphfeed (durable appends, temporal sampling) vs in process, or (--pyg) vs PyG: AP/MRR"
    harness.register(sub, "tgn", __doc__, help, add_arguments, _defaults_then_run)


def add_arguments(p: argparse.ArgumentParser) -> None:
    p.add_argument(
        "--dataset",
        action="append",
        help=f"one of {', '.join(DATASETS)} or an ingested root; repeat; default collegemsg and lastfm "
        "(with --pyg: and pubmed)",
    )
    p.add_argument(
        "--events",
        type=int,
        action="append",
        help="events per dataset (0: all); default all CollegeMsg, 60000 LastFM, all PubMed",
    )
    p.add_argument("--epochs", type=int, default=1)
    p.add_argument("--seeds", type=int, nargs="+", help="job seeds, one run each (default: --seed)")
    p.add_argument("--graph-stores", type=int, default=2)
    p.add_argument(
        "--visibility",
        choices=("same-batch", "previous-batches"),
        default="same-batch",
        help="without --pyg: the neighbours both runs may see (previous-batches: the stores as of each append)",
    )
    p.add_argument("--pyg", action="store_true", help="compare with PyG's TGN example (needs torch_geometric)")
    p.add_argument("--fanout", type=int, default=10, help="--pyg: neighbours per root (0: memory only)")
    p.add_argument("--jobs", type=int, default=1, help="--pyg: trainings at a time (processes)")
    p.add_argument("--device", choices=("cpu", "cuda"), default="cpu", help="--pyg: where every system trains")


def _defaults_then_run(args: argparse.Namespace) -> int:
    args.dataset = args.dataset or ["collegemsg", "lastfm", *(["pubmed"] if args.pyg else [])]
    args.seeds = args.seeds or [args.seed]
    defaults = {"collegemsg": 0, "lastfm": 60_000, "pubmed": 0}
    args.events = args.events or [defaults.get(Path(d).name, 0) for d in args.dataset]
    if len(args.events) != len(args.dataset):
        raise SystemExit("graphfeed bench tgn: give one --events per --dataset")
    return run(args)


if __name__ == "__main__":  # the bare GPU image: PYTHONPATH=services:trainer:gpu_kernels:bench python -m ...
    raise SystemExit(harness.main(__doc__, add_arguments, _defaults_then_run))
