"""``graphfeed pack``: sample a job's next epoch(s) ahead and write packed features for them.

Examples::

    graphfeed pack --data /data/graph --out /data/packs --batch-size 1024 --fanouts 10,5 --job-seed 7 \\
        --epochs 0:2 --resident-bytes 134217728
    graphfeed pack --graph-stores gs-0:50051,gs-1:50051 --out /packs ...   # graph-stores over gRPC

A loader started with ``--pack-root /data/packs`` then serves the job's cache misses from them.
"""

from __future__ import annotations

import argparse
import json
from pathlib import Path

from graphfeed.common.partition import GraphManifest, part_dir_name
from graphfeed.graph_store.types import PartitionSet
from graphfeed.loader.job import JobSpec
from graphfeed.pack.writer import PackOptions, pack_epoch


def register(sub: argparse._SubParsersAction) -> None:
    """Adds ``pack`` to the ``graphfeed`` command."""
    p = sub.add_parser(
        "pack",
        help="offline sampling: write packed minibatch features of a job's epochs",
        description=__doc__,
        formatter_class=argparse.RawDescriptionHelpFormatter,
    )
    src = p.add_mutually_exclusive_group(required=True)
    src.add_argument("--data", type=Path, help="partition root (opened in this process)")
    src.add_argument("--graph-stores", help="host:port of every graph-store, comma-separated")
    p.add_argument("--out", type=Path, required=True, help="pack root (a loader's --pack-root)")
    p.add_argument("--epochs", default="0:1", help="epochs to pack, START:END (end exclusive; default 0:1)")
    p.add_argument("--job-seed", type=int, default=0)
    p.add_argument("--split", default="train")
    p.add_argument("--batch-size", type=int, required=True)
    p.add_argument("--fanouts", required=True, help="comma-separated, input layer first (DGL order)")
    p.add_argument(
        "--shuffle",
        action=argparse.BooleanOptionalAction,
        default=True,
        help="as the trainer's data loaders (default on)",
    )
    for flag in ("--replace", "--drop-last"):
        p.add_argument(flag, action="store_true")
    p.add_argument("--rank", type=int, default=0)
    p.add_argument("--world-size", type=int, default=1)
    p.add_argument("--feature-name", default="feat")
    d = PackOptions()
    p.add_argument("--steps-per-pack", type=int, default=d.steps_per_pack, help=f"default {d.steps_per_pack}")
    p.add_argument("--max-pack-bytes", type=int, default=d.max_pack_bytes, help=f"default {d.max_pack_bytes}")
    p.add_argument(
        "--resident",
        choices=("reuse", "degree"),
        default=d.resident,
        help="which rows stay out of the packs: most reused (default), or highest in-degree (static_degree)",
    )
    p.add_argument(
        "--resident-bytes",
        type=int,
        default=0,
        help="bytes of rows left to the memory tiers (the loader's cache_bytes)",
    )
    p.add_argument("--sample-workers", type=int, default=d.sample_workers)
    p.set_defaults(func=run)


def open_partitions(args: argparse.Namespace) -> PartitionSet:
    """The partitions ``--data`` or ``--graph-stores`` names."""
    if args.graph_stores:
        from graphfeed.graph_store.partitions import RemotePartitionSet  # noqa: PLC0415 - gRPC, for remote graph-stores only

        return RemotePartitionSet([a.strip() for a in args.graph_stores.split(",") if a.strip()])
    from graphfeed.graph_store.partitions import LocalPartitionSet  # noqa: PLC0415
    from graphfeed.graph_store.store import GraphStore  # noqa: PLC0415

    n = GraphManifest.load(args.data).num_partitions
    return LocalPartitionSet([GraphStore.open(args.data / part_dir_name(p)) for p in range(n)])


def run(args: argparse.Namespace) -> int:
    """Packs each epoch of ``--epochs`` and prints one JSON line of stats per epoch."""
    start, _, end = args.epochs.partition(":")
    epochs = range(int(start), int(end) if end else int(start) + 1)
    job = JobSpec(
        job_seed=args.job_seed,
        split=args.split,
        batch_size=args.batch_size,
        fanouts=tuple(int(f) for f in args.fanouts.split(",")),
        replace=args.replace,
        shuffle=args.shuffle,
        drop_last=args.drop_last,
        rank=args.rank,
        world_size=args.world_size,
        feature_name=args.feature_name,
    )
    opts = PackOptions(
        args.steps_per_pack, args.max_pack_bytes, args.resident, args.resident_bytes, args.sample_workers
    )
    partitions = open_partitions(args)
    try:
        for epoch in epochs:
            m = pack_epoch(partitions, job, epoch, args.out, opts)
            print(json.dumps({"epoch": epoch, "steps": m.num_steps, "packs": len(m.packs), **m.stats}), flush=True)
    finally:
        partitions.close()
    return 0
