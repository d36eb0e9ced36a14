"""``python -m graphfeed.trainer.temporal``: TGN link prediction on CollegeMsg or LastFM, in-process.

Examples::

    python -m graphfeed.trainer.temporal --dataset collegemsg --epochs 1
    python -m graphfeed.trainer.temporal --dataset lastfm --epochs 3 --checkpoint /tmp/tgn.pt --json out.json
"""

from __future__ import annotations

import argparse
import dataclasses
import json
import sys
import time
from pathlib import Path

from graphfeed.common.errors import GraphfeedError
from graphfeed.trainer.temporal.config import TGNConfig
from graphfeed.trainer.temporal.events import DATASETS, load_events


def build_parser(add_help: bool = True) -> argparse.ArgumentParser:
    """The command's flags (also ``graphfeed train-temporal``'s)."""
    p = argparse.ArgumentParser(
        prog="python -m graphfeed.trainer.temporal",
        add_help=add_help,
        description="Train a TGN (memory + temporal attention) chronologically on a temporal dataset, "
        "printing AP / MRR per 10%% of the stream and per epoch (70/15/15 chronological split).",
    )
    d = TGNConfig()
    p.add_argument("--dataset", choices=DATASETS, default="collegemsg", help="event stream (default collegemsg)")
    p.add_argument("--events", type=int, help="use only the first N events (re-split 70/15/15)")
    p.add_argument("--epochs", type=int, default=d.epochs, help=f"passes over the stream (default {d.epochs})")
    p.add_argument("--batch-size", type=int, default=d.batch_size, help=f"events per batch (default {d.batch_size})")
    p.add_argument(
        "--fanout", type=int, default=d.fanout, help=f"most recent neighbours attended to (default {d.fanout})"
    )
    p.add_argument("--lr", type=float, default=d.lr, help=f"Adam learning rate (default {d.lr})")
    p.add_argument(
        "--dim",
        type=int,
        default=d.memory_dim,
        help=f"width of the memory, time encoding and embedding (default {d.memory_dim})",
    )
    p.add_argument(
        "--mrr-negatives",
        type=int,
        default=d.mrr_negatives,
        help=f"val/test negatives per event (default {d.mrr_negatives})",
    )
    p.add_argument("--seed", type=int, default=d.seed, help="job seed: initial weights and every negative (default 0)")
    p.add_argument("--checkpoint", type=Path, help="checkpoint file; resumed from when present")
    p.add_argument(
        "--checkpoint-every",
        type=int,
        default=d.checkpoint_every,
        help=f"batches between checkpoints (default {d.checkpoint_every})",
    )
    p.add_argument("--threads", type=int, help="torch CPU threads (default: torch's choice)")
    p.add_argument(
        "--mmap-threshold-kib",
        type=int,
        default=1024,
        help="fix glibc's mmap threshold (KiB) so memory stays bounded; 0: glibc's dynamic one, up to 2x faster, "
        "but resident memory grows by GBs over a LastFM epoch (default 1024)",
    )
    p.add_argument(
        "--graph-stores",
        help="host:port of every graph-store started with --append-dir, comma-separated "
        "(or one {p} template): the events are appended there, durably, and neighbours sampled there; "
        "default: an in-process neighbour source",
    )
    p.add_argument(
        "--job-id", default="tgn", help="names the job's append batches (unique per job; a resumed job reuses it)"
    )
    p.add_argument("--json", type=Path, help="write the metrics and wall time here")
    p.add_argument("--save-weights", type=Path, help="write the final model state_dict here")
    p.add_argument("--crash-after-batches", type=int, help=argparse.SUPPRESS)  # resume tests
    return p


def config_from_args(args: argparse.Namespace) -> TGNConfig:
    """The :class:`TGNConfig` the flags describe."""
    return TGNConfig(
        seed=args.seed,
        epochs=args.epochs,
        batch_size=args.batch_size,
        fanout=args.fanout,
        lr=args.lr,
        memory_dim=args.dim,
        time_dim=args.dim,
        embed_dim=args.dim,
        mrr_negatives=args.mrr_negatives,
        checkpoint=args.checkpoint,
        checkpoint_every=args.checkpoint_every,
        crash_after_batches=args.crash_after_batches,
    )


def main(argv: list[str] | None = None) -> int:
    """Runs the command; returns the exit status (2 on a user error)."""
    return run(build_parser().parse_args(argv))


def run(args: argparse.Namespace) -> int:
    """The command with parsed ``args``."""
    import torch  # noqa: PLC0415 - not with the parser (every `graphfeed` command builds it)

    from graphfeed.trainer.temporal.loop import TGNTrainer, return_freed_memory_to_the_os  # noqa: PLC0415

    if args.threads:
        torch.set_num_threads(args.threads)
    if args.mmap_threshold_kib:
        return_freed_memory_to_the_os(args.mmap_threshold_kib * 1024)
    try:
        events = load_events(args.dataset)
        if args.events:
            events = events.head(args.events)
        cfg = config_from_args(args)
        print(
            f"{events.name}: {events.num_events:,} events, {events.num_nodes:,} nodes, "
            f"edge features D={events.edge_feat_dim}",
            flush=True,
        )
        t0 = time.perf_counter()
        source = None
        if args.graph_stores:
            from graphfeed.graph_store.partitions import RemotePartitionSet  # noqa: PLC0415 - --graph-stores only
            from graphfeed.graph_store.temporal_client import TemporalClient, TemporalStoreView  # noqa: PLC0415 - --graph-stores only
            from graphfeed.trainer.temporal.store_source import StoreNeighbors  # noqa: PLC0415

            client = TemporalClient(RemotePartitionSet(args.graph_stores.split(",")))
            source = StoreNeighbors(TemporalStoreView(client), args.job_id)
        trainer = TGNTrainer(events, cfg, source=source, report=lambda line: print(line, flush=True))
        result = trainer.run()
        seconds = time.perf_counter() - t0
    except GraphfeedError as e:
        print(f"graphfeed.trainer.temporal: error: {e}", file=sys.stderr)
        return 2
    print(
        f"final test AP {result.test_ap:.4f} MRR {result.test_mrr:.4f} "
        f"({seconds:.1f}s, {torch.get_num_threads()} threads)",
        flush=True,
    )
    if args.save_weights:
        torch.save(trainer.model.state_dict(), args.save_weights)
    if args.json:
        out = {
            "dataset": events.name,
            "events": events.num_events,
            "config": {k: str(v) for k, v in dataclasses.asdict(cfg).items()},
            "test_ap": result.test_ap,
            "test_mrr": result.test_mrr,
            "seconds": seconds,
            "threads": torch.get_num_threads(),
            "epochs": [dataclasses.asdict(e) for e in result.epochs],
            "chunks": [dataclasses.asdict(c) for c in result.chunks],
        }
        args.json.write_text(json.dumps(out, indent=2))
    return 0


if __name__ == "__main__":
    sys.exit(main())
