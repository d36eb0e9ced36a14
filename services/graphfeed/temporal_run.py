"""Continuous temporal training through graphfeed's services: the TGN job of
``graphfeed.trainer.temporal`` with its neighbours held by graph-store processes that take the
event stream as durable appends (GNNFlow), for ``graphfeed demo --temporal`` and
``graphfeed bench tgn``. (``graphfeed train-temporal --graph-stores H:P,...`` trains the same job
against graph-stores someone else started; there is no ``graphfeed train --temporal``.) Both
visibilities run here: ``previous-batches`` samples the stores as they were before each batch's
append (``StoreNeighbors``).

The graph-stores start from partitions that hold the stream's nodes and no edge: every edge
arrives by ``AppendEdges`` while the job trains (each batch of events is appended, acknowledged
durable and visible, then trained on), routed to its owner by
:class:`~graphfeed.graph_store.temporal.client.TemporalClient`.
"""

from __future__ import annotations

import time
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from pathlib import Path

import numpy as np

from graphfeed.cluster import ServiceProcess, start_service
from graphfeed.common.partition import part_dir_name
from graphfeed.graph_store.partitions import RemotePartitionSet
from graphfeed.graph_store.temporal.client import TemporalClient, TemporalStoreView
from graphfeed.ingest.graph import GraphData
from graphfeed.ingest.partition import write_partitioned
from graphfeed.trainer.temporal.events import TemporalEvents
from graphfeed.trainer.temporal.loop import TGNConfig, TGNResult, TGNTrainer
from graphfeed.trainer.temporal.store_source import StoreNeighbors


def empty_partitions(events: TemporalEvents, root: Path, num_partitions: int) -> None:
    """Partitions of the stream's nodes with no edge yet (edge features of the stream's width)."""
    none = np.empty(0, dtype=np.int64)
    g = GraphData(
        name=events.name,
        num_nodes=events.num_nodes,
        src=none,
        dst=none,
        node_data={},
        splits={},
        num_classes=0,
        edge_ts=none,
        edge_feat=np.empty((0, events.edge_feat_dim), np.float32) if events.edge_feat_dim else None,
    )
    write_partitioned(g, root, num_partitions, method="random", seed=0)


@contextmanager
def temporal_graph_stores(root: Path, num_partitions: int, log_dir: Path) -> Iterator[list[ServiceProcess]]:
    """One ``graphfeed serve graph-store --append-dir`` process per partition of ``root``."""
    stores: list[ServiceProcess] = []
    try:
        for p in range(num_partitions):
            part = root / part_dir_name(p)
            args = ["graph-store", "--part-dir", str(part), "--append-dir", str(root / f"appends-{p}"), "--shm-dir", ""]
            stores.append(start_service(f"graph-store-{p}", args, log_dir))
        yield stores
    finally:
        for s in reversed(stores):
            s.stop()


def train_through_graph_stores(
    events: TemporalEvents,
    cfg: TGNConfig,
    addresses: list[str],
    report: Callable[[str], None] = print,
    job: str = "tgn",
) -> TGNResult:
    """The TGN job with its neighbour source on the graph-stores at ``addresses``."""
    client = TemporalClient(RemotePartitionSet(addresses))
    try:
        return TGNTrainer(events, cfg, source=StoreNeighbors(TemporalStoreView(client), job), report=report).run()
    finally:
        client.close()


def run_streaming(
    events: TemporalEvents,
    cfg: TGNConfig,
    workdir: Path,
    num_partitions: int = 2,
    report: Callable[[str], None] = print,
) -> tuple[TGNResult, float]:
    """Partitions, graph-store processes, the job; ``(result, seconds of training)``."""
    root = workdir / "graph"
    empty_partitions(events, root, num_partitions)
    with temporal_graph_stores(root, num_partitions, workdir / "logs") as stores:
        t0 = time.perf_counter()
        result = train_through_graph_stores(events, cfg, [s.address for s in stores], report)
        return result, time.perf_counter() - t0
