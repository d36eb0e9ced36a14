"""``python -m graphfeed.trainer.temporal``: TGN link prediction on a temporal graph, in-process.

Examples::

    python -m graphfeed.trainer.temporal --dataset collegemsg --epochs 1
    python -m graphfeed.trainer.temporal --dataset /data/calls --split 0.8,0.1,0.1 --seed 3
    python -m graphfeed.trainer.temporal --dataset calls.csv --columns src,dst,ts
    python -m graphfeed.trainer.temporal --dataset lastfm --epochs 3 --checkpoint /tmp/tgn.pt --json out.json
"""

from __future__ import annotations

import argparse
import dataclasses
import json
import sys
import time

from graphfeed.common.config import add_settings_argument, add_settings_arguments, settings_from_args
from graphfeed.common.errors import GraphfeedError
from graphfeed.trainer.temporal.config import TGNSettings
from graphfeed.trainer.temporal.events import load_events, parse_split


def build_parser(add_help: bool = True) -> argparse.ArgumentParser:
    """The command's flags (also ``graphfeed train-temporal``'s): :class:`TGNSettings`'s fields."""
    p = argparse.ArgumentParser(
        prog="python -m graphfeed.trainer.temporal",
        add_help=add_help,
        description="Train a TGN (memory + temporal attention) chronologically on a temporal dataset, "
        "printing AP / MRR per 10% of the stream and per epoch (70/15/15 chronological split). "
        "Flags override GRAPHFEED_TRAIN_TEMPORAL_* env vars.",
    )
    add_settings_arguments(p, TGNSettings, skip={"json_path", "crash_after_batches"})
    add_settings_argument(p, TGNSettings, "json_path", flag="--json")
    add_settings_argument(p, TGNSettings, "crash_after_batches", hidden=True)  # resume tests
    return p


def main(argv: list[str] | None = None) -> int:
    """Runs the command; returns the exit status (2 on a user error)."""
    return run(build_parser().parse_args(argv))


def run(args: argparse.Namespace) -> int:
    """The command with parsed ``args``."""
    return run_settings(settings_from_args(TGNSettings, args))


def run_settings(settings: TGNSettings) -> int:
    """The command with its settings."""
    import torch  # noqa: PLC0415 - not with the parser (every `graphfeed` command builds it)

    from graphfeed.trainer.temporal.loop import TGNTrainer, return_freed_memory_to_the_os  # noqa: PLC0415

    if settings.threads:
        torch.set_num_threads(settings.threads)
    if settings.mmap_threshold_kib:
        return_freed_memory_to_the_os(settings.mmap_threshold_kib * 1024)
    try:
        split = parse_split(settings.split) if settings.split else None
        events = load_events(settings.dataset, split, settings.columns)
        if settings.events:
            events = events.head(settings.events, *([split] if split else []))
        cfg = settings.tgn_config()
        print(
            f"{events.name}: {events.num_events:,} events, {events.num_nodes:,} nodes, "
            f"edge features D={events.edge_feat_dim}",
            flush=True,
        )
        t0 = time.perf_counter()
        source = None
        if settings.graph_stores:
            from graphfeed.graph_store.partitions import RemotePartitionSet  # noqa: PLC0415 - --graph-stores only
            from graphfeed.graph_store.temporal.client import TemporalClient, TemporalStoreView  # noqa: PLC0415 - --graph-stores only
            from graphfeed.trainer.temporal.store_source import StoreNeighbors  # noqa: PLC0415

            client = TemporalClient(RemotePartitionSet(settings.graph_stores.split(",")))
            source = StoreNeighbors(TemporalStoreView(client), settings.job_id)
        trainer = TGNTrainer(events, cfg, source=source, report=lambda line: print(line, flush=True))
        result = trainer.run()
        seconds = time.perf_counter() - t0
    except GraphfeedError as e:
        print(f"graphfeed.trainer.temporal: error: {e}", file=sys.stderr)
        return 2
    print(
        f"test AP {result.test_ap:.4f} MRR {result.test_mrr:.4f} of the kept epoch {result.kept_epoch} "
        f"({seconds:.1f}s, {torch.get_num_threads()} threads)",
        flush=True,
    )
    if settings.save_weights:
        torch.save(trainer.model.state_dict(), settings.save_weights)
    if settings.json_path:
        out = {
            "dataset": events.name,
            "events": events.num_events,
            "config": {k: str(v) for k, v in dataclasses.asdict(cfg).items()},
            "test_ap": result.test_ap,
            "test_mrr": result.test_mrr,
            "kept_epoch": result.kept_epoch,
            "best_epoch": result.best_epoch,
            "stopped_early": result.stopped_early,
            "seconds": seconds,
            "threads": torch.get_num_threads(),
            "epochs": [dataclasses.asdict(e) for e in result.epochs],
            "chunks": [dataclasses.asdict(c) for c in result.chunks],
        }
        settings.json_path.write_text(json.dumps(out, indent=2))
    return 0


if __name__ == "__main__":
    sys.exit(main())
