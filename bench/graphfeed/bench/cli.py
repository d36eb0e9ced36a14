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
    "distdgl": "graphfeed.bench.distdgl_bench",
    "wire-accuracy": "graphfeed.bench.wire_accuracy",
    "link-sweep": "graphfeed.bench.link_sweep",
    "link": "graphfeed.bench.links",
    "fuzz": "graphfeed.bench.fuzz",
    "flood": "graphfeed.bench.flood",
    "temporal": "graphfeed.bench.temporal",
    "rowstore": "graphfeed.bench.rowstore",
    "disk": "graphfeed.bench.disk",
    "tgn": "graphfeed.bench.tgn",
    "tgn-device": "graphfeed.bench.tgn_device",
    "append": "graphfeed.bench.append",
    "rgcn-fidelity": "graphfeed.bench.rgcn_fidelity",
    "embeddings": "graphfeed.bench.embeddings",
    "linkpred": "graphfeed.bench.linkpred",
    "inference": "graphfeed.bench.inference",
    "stalled": "graphfeed.bench.stalled",
}


def register(sub: argparse._SubParsersAction) -> None:
    p = sub.add_parser(
        "bench", help="benchmarks: JSON + markdown tables with ratios vs in-process DGL", description=__doc__
    )
    names = p.add_subparsers(dest="bench", required=True, metavar="BENCHMARK")
    for module in BENCHMARKS.values():
        importlib.import_module(module).register(names)
