"""``graphfeed bench link-sweep``: every cache policy end to end, graph-stores behind a shaped link.

The deployment it emulates: graph-stores on other machines (their own network namespace,
joined by a veth pair shaped with ``tc tbf``, :class:`graphfeed.bench.links.ShapedLink`), a
sampler and one loader per cache policy on the trainer's machine (this namespace), and the
trainer (this process) reading each loader through shared memory, as a trainer on the
loader's node does. Every feature row a cache misses crosses the shaped link; the policies
differ only in which rows those are. Systems alternate run by run, each run a new epoch on a
new stream (the loaders' caches persist); in-process DGL on the same graph is the yardstick.

Writes JSON and a markdown table: minibatches/s per policy, its ratio to no cache, hit rate,
bytes over the link per minibatch, CPU seconds per minibatch per process.
"""

from __future__ import annotations

import argparse
import contextlib
import logging
import statistics
import sys
from pathlib import Path
from typing import Any

from graphfeed.bench import report

log = logging.getLogger(__name__)
DEFAULT_POLICIES = ("none", "static_degree", "lru", "massivegnn", "lookahead")


def register(sub: argparse._SubParsersAction) -> None:
    p = sub.add_parser(
        "link-sweep",
        help="every cache policy end to end, graph-stores behind a shaped link",
        description=__doc__,
        formatter_class=argparse.RawDescriptionHelpFormatter,
    )
    p.add_argument("--preset", default="small", help="synthetic preset (default small)")
    p.add_argument("--workdir", type=Path, default=Path("runs/bench"), help="datasets and logs (default runs/bench)")
    p.add_argument(
        "--link", default="10gbit", help='tc rate of the link, each direction (default 10gbit; "unlimited": unshaped)'
    )
    p.add_argument("--policies", nargs="+", default=list(DEFAULT_POLICIES), help="cache policies (default: all)")
    p.add_argument(
        "--capacity", type=float, default=0.2, help="cache bytes as a fraction of the feature table (default 0.2)"
    )
    p.add_argument("--steps", type=int, default=30, help="minibatches per run (default 30)")
    p.add_argument("--repeats", type=int, default=3, help="runs per system; the median is reported (default 3)")
    p.add_argument("--batch-size", type=int, default=1024, help="seeds per minibatch (default 1024)")
    p.add_argument(
        "--fanouts", type=int, nargs="+", default=[15, 10, 5], help="DGL order, input layer first (default 15 10 5)"
    )
    p.add_argument(
        "--out", type=Path, default=None, help="JSON path (default bench/results/link-sweep-<preset>-<link>.json)"
    )
    p.set_defaults(func=run)


def _feature_bytes(root: Path) -> int:
    from graphfeed.common.partition import GraphManifest, PartitionReader, part_dir_name

    m = GraphManifest.load(root)
    reader = PartitionReader(root / part_dir_name(0))
    try:
        row = reader.node_data("feat")
        return int(m.num_nodes) * int(row.itemsize * (row.size // max(1, len(row))))
    finally:
        reader.close()


def run(args: argparse.Namespace) -> int:
    from graphfeed.bench.links import ShapedLink
    from graphfeed.bench.throughput import (
        Meter,
        _alternate,
        _dgl_runner,
        _gf_e2e_runner,
        ensure_dataset,
        load_global,
        summarize,
    )
    from graphfeed.cluster import LocalCluster, start_service

    workdir = args.workdir.resolve()
    root = ensure_dataset(workdir, args.preset)
    g, feat, train = load_global(root)
    cache_bytes = int(args.capacity * _feature_bytes(root))
    fanouts, bs, logs = list(args.fanouts), args.batch_size, workdir / "logs"
    with contextlib.ExitStack() as stack:
        link = stack.enter_context(ShapedLink(None if args.link == "unlimited" else args.link))
        first, *rest = args.policies
        cluster = LocalCluster.start(
            root,
            logs,
            ["--cache-policy", first, "--cache-bytes", str(cache_bytes)],
            shm_dir="/dev/shm",
            store_placement=link.placement(),
        )
        stack.callback(cluster.stop)
        assert cluster.loader is not None and cluster.sampler is not None, "LocalCluster.start starts both"
        meter = Meter(cluster)
        loaders = {first: cluster.loader.address}
        for policy in rest:
            extra = start_service(
                f"loader-{policy}",
                [
                    "loader",
                    "--graph-store-addresses",
                    *[s.address for s in cluster.graph_stores],
                    "--sampler-address",
                    cluster.sampler.address,
                    "--shm-dir",
                    "/dev/shm",
                    "--cache-policy",
                    policy,
                    "--cache-bytes",
                    str(cache_bytes),
                ],
                logs,
            )
            stack.callback(extra.stop)
            meter.add(f"loader-{policy}", extra)
            loaders[policy] = extra.address
        runners: dict[str, Any] = {"dgl_sample_gather": _dgl_runner(g, feat, train, fanouts, bs, gather=True)}
        runners.update(
            {f"gf_e2e[{p}]": _gf_e2e_runner(address, fanouts, bs, "/dev/shm") for p, address in loaders.items()}
        )
        runs = _alternate(runners, meter, args.steps, args.repeats)
        drops = link.drops()
    result = _summary(summarize(runs, {}, args, list(runners)), args, cache_bytes, link.rate, drops)
    report.write(
        args.out or Path("bench/results") / f"link-sweep-{args.preset}-{args.link}.json", result, markdown(result)
    )
    return 0


def _summary(base: dict, args: argparse.Namespace, cache_bytes: int, rate: str, drops: dict[str, int]) -> dict:
    systems = base["systems"]
    none = systems.get("gf_e2e[none]", {}).get("minibatches_per_s")
    for name, s in systems.items():
        # bytes the graph-stores sent across the link (behind it: every graph-store RPC)
        s["link_bytes_per_minibatch"] = sum(
            v for k, v in s["bytes_per_minibatch_by_rpc"].items() if k.startswith("graph-store-")
        )
        if none and name.startswith("gf_e2e["):
            s["ratio_vs_no_cache"] = s["minibatches_per_s"] / none
    dgl = systems["dgl_sample_gather"]["minibatches_per_s"]
    return {
        "command": "graphfeed bench link-sweep " + " ".join(sys.argv[3:]),
        "preset": args.preset,
        "link": rate,
        "cache_bytes": cache_bytes,
        "capacity": args.capacity,
        "batch_size": args.batch_size,
        "fanouts": list(args.fanouts),
        "steps_per_run": args.steps,
        "repeats": args.repeats,
        "tbf_drops": drops,
        "systems": systems,
        "ratios_vs_dgl": {k: v["minibatches_per_s"] / dgl for k, v in systems.items() if k != "dgl_sample_gather"},
    }


def markdown(result: dict) -> str:
    lines = [
        (
            f"preset `{result['preset']}`, graph-stores behind a {result['link']} link (tbf, each direction), cache "
            f"{result['cache_bytes'] / 1e6:.0f} MB = {result['capacity']:.0%} of the feature table, "
            f"batch {result['batch_size']}, fanouts {result['fanouts']}, "
            f"{result['steps_per_run']} minibatches x {result['repeats']} runs per system (median)"
        ),
        "",
        (
            "| system | minibatches/s | vs no cache | vs DGL | MB over the link / minibatch "
            "| CPU s/minibatch (by process) |"
        ),
        "|---|---:|---:|---:|---:|---|",
    ]
    for name, s in result["systems"].items():
        cpu = ", ".join(f"{k} {v:.3f}" for k, v in s["cpu_seconds_per_minibatch"].items() if v > 0.0005)
        vs_none = f"{s['ratio_vs_no_cache']:.2f}" if "ratio_vs_no_cache" in s else ""
        vs_dgl = f"{result['ratios_vs_dgl'][name]:.2f}" if name in result["ratios_vs_dgl"] else "1.00"
        link_mb = s["link_bytes_per_minibatch"] / 1e6
        lines.append(f"| {name} | {s['minibatches_per_s']:.2f} | {vs_none} | {vs_dgl} | {link_mb:.1f} | {cpu} |")
    lines += [
        "",
        f"tbf drops: {result['tbf_drops'] or 'none'}; runs: "
        + ", ".join(f"{k} {statistics.median(v['runs_minibatches_per_s']):.2f}" for k, v in result["systems"].items()),
    ]
    return "\n".join(lines) + "\n"
