"""``graphfeed bench <name>``: each benchmark module registers one sub-subcommand."""

from __future__ import annotations

import argparse
import importlib

# name -> module exposing register(subparsers); add a benchmark by adding a line here.
BENCHMARKS: dict[str, str] = {
    "cache": "graphfeed.bench.cache",
    "throughput": "graphfeed.bench.throughput",
    "gpu": "graphfeed.bench.gpu",
    "profile": "graphfeed.bench.profile",
    "link": "graphfeed.bench.links",
}


def register(sub: argparse._SubParsersAction) -> None:
    p = sub.add_parser("bench", help="benchmarks: JSON + markdown tables with ratios vs in-process DGL", description=__doc__)
    names = p.add_subparsers(dest="bench", required=True, metavar="BENCHMARK")
    for module in BENCHMARKS.values():
        importlib.import_module(module).register(names)
