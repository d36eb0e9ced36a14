"""``graphfeed append``: replays timestamped edges into running graph-stores at a given rate.

For demos and benchmarks of issue 16's streaming appends. The edges come from a CSV
(``src,dst,t[,feature...]``, one edge per line, an optional header line) or, when the temporal
dataset loaders are installed, a named dataset (``--source collegemsg``: its node ids as the
loader numbers them). They are sent through :class:`~graphfeed.graph_store.temporal.client.TemporalClient`
(routed by owner, durable on each ack, retried with the same batch id) in ``--batch-size``
batches, paced to ``--rate`` edges/s; every second it prints the edges acknowledged in that
second, and at the end the totals and the p50/p99 latency of a batch.
"""

from __future__ import annotations

import argparse
import importlib
import importlib.util
import time
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path

import numpy as np

from graphfeed.common.errors import InvalidArgument
from graphfeed.graph_store.partitions import RemotePartitionSet
from graphfeed.graph_store.temporal.client import TemporalClient

SOURCES_MODULE = "graphfeed.ingest.temporal_sources"  # the temporal dataset loaders (optional)


@dataclass(frozen=True)
class Edges:
    """Edges to replay, in replay order."""

    src: np.ndarray  # int64 [n]
    dst: np.ndarray  # int64 [n]
    t: np.ndarray  # int64 [n]
    feat: np.ndarray | None  # float32 [n, D]


@dataclass(frozen=True)
class ReplayStats:
    """What a replay did."""

    edges: int  # acknowledged (sent; undirected: twice the input edges)
    batches: int
    wall_s: float
    latency_s: np.ndarray  # per batch, from send to the last owner's ack
    retries: int

    @property
    def edges_per_s(self) -> float:
        return self.edges / self.wall_s if self.wall_s > 0 else 0.0


def read_edge_csv(path: Path) -> Edges:
    """``src,dst,t[,feature...]`` lines (a first line that is not numbers is a header)."""
    with open(path) as f:
        first = f.readline().strip()
    try:
        [float(x) for x in first.split(",")]
        skip = 0
    except ValueError:
        skip = 1
    table = np.loadtxt(path, delimiter=",", skiprows=skip, ndmin=2, dtype=np.float64)
    if table.shape[1] < 3:
        raise InvalidArgument(f"{path}: need columns src,dst,t[,features...], got {table.shape[1]}")
    ints = table[:, :3]
    if not np.array_equal(ints, np.round(ints)):
        raise InvalidArgument(f"{path}: src, dst and t must be integers")
    feat = table[:, 3:].astype(np.float32) if table.shape[1] > 3 else None
    return Edges(ints[:, 0].astype(np.int64), ints[:, 1].astype(np.int64), ints[:, 2].astype(np.int64), feat)


def load_source(name: str) -> Edges:
    """A named temporal dataset from the installed loaders (``collegemsg``: ``load_collegemsg``)."""
    g = getattr(importlib.import_module(SOURCES_MODULE), f"load_{name}")()
    return Edges(np.asarray(g.src, np.int64), np.asarray(g.dst, np.int64), np.asarray(g.edge_ts, np.int64), None)


def _say(line: str) -> None:
    print(line, flush=True)


def replay(
    client: TemporalClient,
    edges: Edges,
    *,
    rate: float,
    batch_size: int,
    undirected: bool = False,
    report: Callable[[str], None] = _say,
) -> ReplayStats:
    """Sends ``edges`` in order, ``batch_size`` per append, paced to ``rate`` edges/s (0: as
    fast as acks come back); ``report`` gets one line per second of acknowledged edges/s."""
    n, per_edge = len(edges.src), 2 if undirected else 1
    starts = range(0, n, batch_size)
    lat = np.empty(len(starts))
    t0 = time.perf_counter()
    second, acked_in_second = 1, 0
    for b, lo in enumerate(starts):
        hi = min(lo + batch_size, n)
        due = t0 + lo / rate if rate > 0 else 0.0
        if (wait := due - time.perf_counter()) > 0:
            time.sleep(wait)  # pacing
        sent = time.perf_counter()
        feat = None if edges.feat is None else edges.feat[lo:hi]
        client.append(edges.src[lo:hi], edges.dst[lo:hi], edges.t[lo:hi], feat, undirected=undirected)
        done = time.perf_counter()
        lat[b] = done - sent
        while done - t0 >= second:
            report(f"{second:>5d}s  {acked_in_second:>12,d} edges/s acknowledged")
            second, acked_in_second = second + 1, 0
        acked_in_second += (hi - lo) * per_edge
    wall = time.perf_counter() - t0
    return ReplayStats(n * per_edge, len(lat), wall, lat, client.retries)


def summary(stats: ReplayStats) -> str:
    """One line: totals, rate, latency percentiles."""
    p50, p99 = (float(np.percentile(stats.latency_s, q) * 1e3) if len(stats.latency_s) else 0.0 for q in (50, 99))
    return (
        f"appended {stats.edges:,} edges in {stats.batches:,} batches in {stats.wall_s:.2f} s: "
        f"{stats.edges_per_s:,.0f} edges/s; "
        f"batch latency p50 {p50:.2f} ms, p99 {p99:.2f} ms; {stats.retries} retried sends"
    )


def run(args: argparse.Namespace) -> int:
    """The ``graphfeed append`` command."""
    edges = read_edge_csv(args.csv) if args.csv is not None else load_source(args.source)
    if args.sort:
        order = np.argsort(edges.t, kind="stable")
        edges = Edges(
            edges.src[order], edges.dst[order], edges.t[order], None if edges.feat is None else edges.feat[order]
        )
    stores = RemotePartitionSet(args.graph_stores, timeout_s=args.timeout_s)
    client = TemporalClient(stores, client_id=args.client_id, attempt_timeout_s=args.timeout_s)
    try:
        stats = replay(client, edges, rate=args.rate, batch_size=args.batch_size, undirected=args.undirected)
    finally:
        client.close()
    print(summary(stats), flush=True)
    return 0


def register(sub: argparse._SubParsersAction) -> None:
    """Adds ``graphfeed append``."""
    p = sub.add_parser(
        "append",
        help="replay timestamped edges into running graph-stores at a given rate",
        description=__doc__,
        formatter_class=argparse.RawDescriptionHelpFormatter,
    )
    p.add_argument(
        "--graph-stores", nargs="+", required=True, metavar="HOST:PORT", help="every graph-store of the graph"
    )
    src = p.add_mutually_exclusive_group(required=True)
    src.add_argument("--csv", type=Path, help="edge CSV: src,dst,t[,features...] (an optional header line)")
    if importlib.util.find_spec(SOURCES_MODULE) is not None:
        src.add_argument("--source", choices=["collegemsg"], help="a temporal dataset from the installed loaders")
    p.add_argument(
        "--rate", type=float, default=0.0, help="input edges/s (--undirected sends each twice); 0: unpaced (default 0)"
    )
    p.add_argument("--batch-size", type=int, default=10_000, help="edges per append (default 10,000)")
    p.add_argument("--undirected", action="store_true", help="also append dst -> src for every edge")
    p.add_argument(
        "--sort", action="store_true", help="sort the edges by time first (appends must not go back in time per node)"
    )
    p.add_argument(
        "--client-id", default=None, help="batch-id prefix; a rerun with the same id is acknowledged as duplicates"
    )
    p.add_argument("--timeout-s", type=float, default=30.0, help="deadline of one append call (default 30)")
    p.set_defaults(func=run, source=None)
