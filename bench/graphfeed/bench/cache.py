"""``graphfeed bench cache``: feature-cache policies against each other and against Belady.

Two measurements per dataset (2 partitions, fanout [15, 10, 5], batch 1024, one trainer):

* **replay** (exact, cheap): the epoch's input-node trace, sampled in-process, is replayed
  through every policy at 5/10/20 % of the feature table (:mod:`graphfeed.bench.cache_replay`):
  hit rate, remote feature bytes per epoch (misses + warm-up/prefetch rows), the ratio to
  ``none``, and Belady's optimum over the same trace.
* **end to end** (real, bounded): graph-stores, sampler and loader as local processes; a
  gRPC client streams ``--e2e-steps`` minibatches per policy at ``--e2e-capacity`` and decodes
  their features, each policy on a fresh loader. ``--e2e-rounds`` rounds alternate the policy
  order (forward, then backward) so that drift on a shared machine hits every policy alike;
  the table shows each policy's median and range.

Examples::

    graphfeed bench cache --dataset cora --epochs 5 --out bench/results/cache-cora.json
    graphfeed bench cache --preset small --out bench/results/cache-small.json
    graphfeed bench cache --preset large --data /tmp/gf-large --e2e-steps 20 --out bench/results/cache-large.json
"""

from __future__ import annotations

import argparse
import logging
import time
from collections.abc import Generator
from dataclasses import asdict
from pathlib import Path
from typing import Any, cast

import numpy as np

from graphfeed.bench import harness, systems
from graphfeed.bench.cache_replay import PolicyResult, record_trace, replay_belady, replay_policy
from graphfeed.bench.scrape import samples
from graphfeed.common.partition import GraphManifest
from graphfeed.loader.cache.base import POLICIES, CacheOptions

log = logging.getLogger(__name__)

CAPACITIES = (0.05, 0.10, 0.20)


def register(subparsers: argparse._SubParsersAction) -> None:
    """Adds ``bench cache``."""
    harness.register(
        subparsers,
        "cache",
        __doc__,
        "cache policies vs Belady: hit rate, remote bytes, minibatches/s",
        add_arguments,
        run,
        **harness.DATASET,
    )


def add_arguments(p: argparse.ArgumentParser) -> None:
    p.add_argument("--dataset", choices=("cora", "synthetic"), default="synthetic", help="graph (default synthetic)")
    p.add_argument("--policies", nargs="+", default=list(POLICIES), choices=POLICIES, help="policies (default all)")
    p.add_argument(
        "--capacities", nargs="+", type=float, default=list(CAPACITIES), help="fractions of the feature table"
    )
    p.add_argument("--epochs", type=int, default=1, help="epochs replayed (default 1; Cora has 2 steps an epoch)")
    p.add_argument("--max-steps", type=int, default=None, help="replay at most this many steps per epoch (default all)")
    p.add_argument("--lookahead-steps", type=int, default=8, help="look-ahead window K, replay and e2e (default 8)")
    p.add_argument("--e2e-steps", type=int, default=50, help="minibatches streamed per policy end to end (0: skip)")
    p.add_argument(
        "--e2e-capacity", type=float, default=0.20, help="capacity fraction of the end-to-end runs (default 0.2)"
    )
    p.add_argument("--e2e-rounds", type=int, default=2, help="end-to-end rounds, policy order alternating (default 2)")


def run(args: argparse.Namespace) -> int:
    """Handler of ``bench cache``: replay, end to end, targets; prints the markdown, writes JSON."""
    if args.dataset == "cora":
        args.preset = "cora"
    data = harness.ensure_dataset(args)
    manifest = GraphManifest.load(data)
    row_bytes = manifest.node_data["feat"].row_bytes
    result: dict = {
        "dataset": manifest.dataset,
        "data": str(data),
        "num_nodes": manifest.num_nodes,
        "num_partitions": manifest.num_partitions,
        "feature_row_bytes": row_bytes,
        "fanouts": args.fanouts,
        "batch_size": args.batch_size,
        "epochs": args.epochs,
        "max_steps": args.max_steps,
        "lookahead_steps": args.lookahead_steps,
        "seed": args.seed,
        "options": asdict(CacheOptions()),
    }
    result["replay"], result["trace"] = replay_all(args, data, row_bytes)
    result["e2e_runs"] = e2e_all(args, data, row_bytes) if args.e2e_steps > 0 else []
    result["e2e"] = e2e_summary(result["e2e_runs"])
    result["targets"] = targets(result)
    harness.write(args, result, markdown(result), f"cache-{data.name}")
    return 0


def replay_all(args: argparse.Namespace, data: Path, row_bytes: int) -> tuple[list[dict], dict]:
    """Every policy and Belady at every capacity over one recorded trace."""
    parts = harness.local_partitions(data)
    try:
        trace = record_trace(
            parts,
            fanouts=args.fanouts,
            batch_size=args.batch_size,
            epochs=args.epochs,
            job_seed=args.seed,
            max_steps=args.max_steps,
        )
        info = {"steps": len(trace.steps), "accesses": trace.accesses, "sample_seconds": round(trace.sample_seconds, 2)}
        log.info("trace: %d steps, %d lookups, sampled in %.1fs", info["steps"], info["accesses"], trace.sample_seconds)
        rows: list[dict] = []
        for cap in args.capacities:
            results: list[PolicyResult] = [replay_belady(trace, cap)]
            for policy in args.policies:
                results.append(
                    replay_policy(
                        trace, parts, policy, cap, lookahead_steps=args.lookahead_steps, options=CacheOptions()
                    )
                )
                log.info(
                    "replay %s @ %.0f%%: hit rate %.4f (%.1fs)",
                    policy,
                    100 * cap,
                    results[-1].hit_rate,
                    results[-1].seconds,
                )
            none_rows = trace.accesses  # the none policy fetches every lookup
            for r in results:
                d = r.to_json(row_bytes, args.epochs)
                d["ratio_to_none"] = r.rows_fetched / none_rows if none_rows else 0.0
                rows.append(d)
        return rows, info
    finally:
        for s in parts.stores:
            s.close()


def e2e_all(args: argparse.Namespace, data: Path, row_bytes: int) -> list[dict]:
    """Streams ``e2e_steps`` minibatches per policy and round through real processes, each on a fresh loader."""
    cap_bytes = int(args.e2e_capacity * GraphManifest.load(data).num_nodes) * row_bytes
    policies = ["none", *[p for p in args.policies if p != "none"]]
    order = [p for r in range(args.e2e_rounds) for p in (policies if r % 2 == 0 else policies[::-1])]
    out: list[dict] = []
    with systems.Cluster.start(data, args.workdir.resolve() / "logs", _loader_args(order[0], cap_bytes, args)) as c:
        for i, policy in enumerate(order):
            loader = c.replace_loader(f"loader-{i}-{policy}", _loader_args(policy, cap_bytes, args)) if i else c.loader
            assert loader is not None and loader.metrics_address is not None
            r = stream_steps(loader.address, args, c.shm_dir)
            r.update(
                policy=policy,
                round=i // len(policies),
                capacity_fraction=args.e2e_capacity,
                prefetch_bytes=sum(
                    s.value for s in samples(loader.metrics_address, "graphfeed_loader_prefetch_bytes_total")
                ),
            )
            log.info(
                "e2e %s: %.2f minibatches/s, first after %.1fs", policy, r["minibatches_per_s"], r["first_minibatch_s"]
            )
            out.append(r)
    return out


def e2e_summary(runs: list[dict]) -> list[dict]:
    """Per policy: the median rate over rounds, its range, and the first round's counters."""
    out = []
    for policy in dict.fromkeys(r["policy"] for r in runs):
        mine = [r for r in runs if r["policy"] == policy]
        rates = [r["minibatches_per_s"] for r in mine]
        out.append(
            {
                **mine[0],
                "minibatches_per_s": float(np.median(rates)),
                "min_per_s": min(rates),
                "max_per_s": max(rates),
                "rounds": len(mine),
            }
        )
    return out


def _loader_args(policy: str, cap_bytes: int, args: argparse.Namespace) -> list[str]:
    return ["--cache-policy", policy, "--cache-bytes", str(cap_bytes), "--lookahead-steps", str(args.lookahead_steps)]


def stream_steps(address: str, args: argparse.Namespace, shm_dir: str = "") -> dict:
    """Streams the first ``e2e_steps`` minibatches (epoch 0, then 1, ...) through a
    ``RemoteDataLoader`` and touches their features, as a trainer would; the rate is taken from
    the first minibatch to the last."""
    from graphfeed.trainer.dataloader import RemoteDataLoader

    job = {"fanouts": list(args.fanouts), "batch_size": args.batch_size, "seed": args.seed, "job_id": "bench-cache"}
    loader = RemoteDataLoader(address, "train", shm_dir=shm_dir, **job)
    hits = misses = remote = n = 0
    t0 = time.perf_counter()
    t_first = t_last = t0
    try:
        while n < args.e2e_steps:  # Cora has 2 steps an epoch
            epoch = cast("Generator[Any, None, None]", iter(loader))  # a generator: closing cancels its stream
            for _input_nodes, _seeds, blocks in epoch:
                blocks[0].srcdata["feat"].sum()  # touch the bytes, as training would
                n += 1
                t_last = time.perf_counter()
                t_first = t_last if n == 1 else t_first
                if n == args.e2e_steps:
                    break
            epoch.close()
            s = loader.stats
            hits, misses, remote = hits + s.cache_hits, misses + s.cache_misses, remote + s.remote_feature_bytes
    finally:
        loader.close()
    rate = (n - 1) / (t_last - t_first) if n > 1 and t_last > t_first else 0.0
    return {
        "steps": n,
        "first_minibatch_s": t_first - t0,
        "minibatches_per_s": rate,
        "hit_rate": hits / (hits + misses) if hits + misses else 0.0,
        "remote_bytes": remote,
    }


def targets(result: dict) -> dict:
    """The issue's targets at 20 % capacity, where measured."""
    at = {r["policy"]: r for r in result["replay"] if abs(r["capacity_fraction"] - 0.20) < 1e-9}
    out: dict = {}
    if {"lookahead", "belady"} <= at.keys():
        la, b = at["lookahead"], at["belady"]
        out["lookahead_remote_bytes_le_40pct_of_none"] = la["ratio_to_none"] <= 0.40
        out["belady_remote_bytes_ratio_to_none"] = b["ratio_to_none"]
        out["lookahead_hit_rate_ge_95pct_of_belady"] = la["hit_rate"] >= 0.95 * b["hit_rate"]
        out["lookahead_reuse_ge_95pct_of_belady"] = la["reuse_rate"] >= 0.95 * b["hit_rate"]
    if {"massivegnn", "lru", "static_degree"} <= at.keys():
        m = at["massivegnn"]["hit_rate"]
        out["massivegnn_beats_lru_and_static_degree"] = (
            m > at["lru"]["hit_rate"] and m > at["static_degree"]["hit_rate"]
        )
    e2e = {r["policy"]: r for r in result.get("e2e") or []}
    if "none" in e2e:  # medians; the ranges in the table show how much the shared machine moved them
        out["no_policy_slower_than_none_e2e"] = all(
            r["minibatches_per_s"] >= e2e["none"]["minibatches_per_s"] for r in e2e.values()
        )
    return out


def markdown(result: dict) -> str:
    """The tables for BENCHMARKS.md."""
    mb = 1 << 20
    lines = [
        (
            f"**{result['dataset']}**: {result['num_nodes']:,} nodes, {result['feature_row_bytes']} B feature rows, "
            f"{result['trace']['steps']} steps ({result['epochs']} epoch(s)), {result['trace']['accesses']:,} lookups, "
            f"window K={result['lookahead_steps']}."
        ),
        "",
        "| capacity | policy | hit rate | remote MB / epoch | vs none | prefetched rows (used) |",
        "|---|---|---|---|---|---|",
    ]
    for r in result["replay"]:
        pf = f"{r['prefetch_issued']:,} ({r['prefetch_used']:,})" if r["prefetch_issued"] else "-"
        lines.append(
            f"| {100 * r['capacity_fraction']:.0f} % | {r['policy']} | {r['hit_rate']:.3f} | "
            f"{r['remote_bytes_per_epoch'] / mb:,.1f} | {r['ratio_to_none']:.3f} | {pf} |"
        )
    if result["e2e"]:
        r0 = result["e2e"][0]
        capacity = f"capacity {100 * r0['capacity_fraction']:.0f} %"
        lines += [
            "",
            f"End to end, {r0['steps']} minibatches per run, {r0['rounds']} round(s), {capacity}:",
            "",
            "| policy | minibatches/s, median (range) | first minibatch s | hit rate | demand MB | prefetch MB |",
            "|---|---|---|---|---|---|",
        ]
        for r in result["e2e"]:
            lines.append(
                f"| {r['policy']} | {r['minibatches_per_s']:.2f} ({r['min_per_s']:.2f}-{r['max_per_s']:.2f}) | "
                f"{r['first_minibatch_s']:.1f} | "
                f"{r['hit_rate']:.3f} | {r['remote_bytes'] / mb:,.1f} | {r['prefetch_bytes'] / mb:,.1f} |"
            )
    if result["targets"]:
        targets = ", ".join(f"{k} = {v if isinstance(v, bool) else round(v, 3)}" for k, v in result["targets"].items())
        lines += ["", "Targets at 20 %: " + targets]
    return "\n".join(lines)
