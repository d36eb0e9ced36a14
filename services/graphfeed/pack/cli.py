"""``graphfeed pack``: sample a job's next epoch(s) ahead and write packed features for them.

Examples::

    graphfeed pack --data /data/graph --out /data/packs --batch-size 1024 --fanouts 15,10,5 --job-seed 7 \\
        --epochs 0:4 --resident-bytes 134217728              # packs at most 3x the table per epoch (--max-blow-up)
    graphfeed pack ... --max-pack-bytes 268435456            # a loader holds <= 2 x 256 MiB of packs; more blow-up
    graphfeed pack --graph-stores gs-0:50051,gs-1:50051 --out /packs ...   # graph-stores over gRPC

A loader started with ``--pack-root /data/packs`` then serves the job's cache misses from them.
Epochs are packed ahead (``--epochs START:END``): each is sampled exactly as the loader will, so
a pack serves the epoch it was written for; pack the next ones while the trainer runs.
"""

from __future__ import annotations

import argparse
import json
import time

from graphfeed.common.config import add_settings_argument, add_settings_arguments, settings_from_args
from graphfeed.common.partition import GraphManifest, part_dir_name
from graphfeed.graph_store.types import PartitionSet
from graphfeed.pack.config import PackSettings
from graphfeed.pack.writer import pack_tables


def register(sub: argparse._SubParsersAction) -> None:
    """Adds ``pack`` to the ``graphfeed`` command; its flags are :class:`PackSettings`'s fields."""
    p = sub.add_parser(
        "pack",
        help="offline sampling: write packed minibatch features of a job's epochs",
        description=__doc__,
        formatter_class=argparse.RawDescriptionHelpFormatter,
    )
    src = p.add_mutually_exclusive_group(required=True)
    add_settings_argument(src, PackSettings, "data")
    add_settings_argument(src, PackSettings, "graph_stores")
    add_settings_arguments(p, PackSettings, skip={"data", "graph_stores"})
    p.set_defaults(func=run)


def open_partitions(settings: PackSettings) -> PartitionSet:
    """The partitions ``--data`` or ``--graph-stores`` names."""
    if settings.graph_stores:
        from graphfeed.graph_store.partitions import RemotePartitionSet  # noqa: PLC0415 - gRPC, for remote graph-stores only

        return RemotePartitionSet([a.strip() for a in settings.graph_stores.split(",") if a.strip()])
    from graphfeed.graph_store.partitions import LocalPartitionSet  # noqa: PLC0415
    from graphfeed.graph_store.store import GraphStore  # noqa: PLC0415

    if settings.data is None:
        raise SystemExit("graphfeed pack: give --data or --graph-stores")
    n = GraphManifest.load(settings.data).num_partitions
    return LocalPartitionSet([GraphStore.open(settings.data / part_dir_name(p)) for p in range(n)])


def wait_for_graph_stores(addresses: list[str], wait_s: float) -> None:
    """Returns once every graph-store (a ``{p}`` template: as many as partition 0 says) answers
    SERVING; raises PeerNotReady after ``wait_s`` seconds."""
    from graphfeed.common.readiness import wait_serving  # noqa: PLC0415 - gRPC, for remote graph-stores only
    from graphfeed.graph_store.partitions import PARTITION_PLACEHOLDER, expand_addresses  # noqa: PLC0415

    deadline = time.monotonic() + wait_s
    if len(addresses) == 1 and PARTITION_PLACEHOLDER in addresses[0]:
        wait_serving(addresses[0].replace(PARTITION_PLACEHOLDER, "0"), "graph-store 0", wait_s, poll_s=1.0)
    for address in expand_addresses(addresses, timeout_s=max(1.0, deadline - time.monotonic())):
        wait_serving(address, f"graph-store {address}", max(1.0, deadline - time.monotonic()), poll_s=1.0)


def run(args: argparse.Namespace) -> int:
    """Packs each epoch of ``--epochs`` and prints one JSON line of stats per epoch."""
    settings = settings_from_args(PackSettings, args)
    epochs = settings.epoch_range()
    job, opts = settings.job(), settings.options()
    if settings.token_file:
        from graphfeed.common.security import ClientSecurity, configure_clients  # noqa: PLC0415

        configure_clients(ClientSecurity.of(token_file=settings.token_file))
    if settings.graph_stores and settings.wait_s > 0:
        wait_for_graph_stores([a.strip() for a in settings.graph_stores.split(",") if a.strip()], settings.wait_s)
    partitions = open_partitions(settings)
    try:
        for epoch in epochs:
            for m in pack_tables(partitions, job, epoch, settings.out, opts):
                line = {"epoch": epoch, "table": m.job.feature_name, "steps": m.num_steps, "packs": len(m.packs)}
                print(json.dumps({**line, **m.stats}), flush=True)
    finally:
        partitions.close()
    return 0
