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
import statistics

from graphfeed.bench import harness, runs, systems

DEFAULT_POLICIES = ("none", "static_degree", "lru", "massivegnn", "lookahead")


def register(sub: argparse._SubParsersAction) -> None:
    harness.register(
        sub,
        "link-sweep",
        __doc__,
        "every cache policy end to end, graph-stores behind a shaped link",
        add_arguments,
        run,
        steps=30,
        repeats=3,
        **harness.DATASET,
    )


def add_arguments(p: argparse.ArgumentParser) -> None:
    p.add_argument(
        "--link", default="10gbit", help='tc rate of the link, each direction (default 10gbit; "unlimited": unshaped)'
    )
    p.add_argument("--policies", nargs="+", default=list(DEFAULT_POLICIES), help="cache policies (default: all)")
    p.add_argument(
        "--capacity", type=float, default=0.2, help="cache bytes as a fraction of the feature table (default 0.2)"
    )


def run(args: argparse.Namespace) -> int:
    from graphfeed.bench.links import ShapedLink
    from graphfeed.common.partition import GraphManifest

    root = harness.ensure_dataset(args)
    g, feat, train = harness.load_global(root)
    cache_bytes = int(args.capacity * GraphManifest.load(root).num_nodes * feat[0].numpy().nbytes)
    fanouts, bs = list(args.fanouts), args.batch_size
    with ShapedLink(None if args.link == "unlimited" else args.link) as link:
        first, *rest = args.policies
        loader_args = lambda policy: ["--cache-policy", policy, "--cache-bytes", str(cache_bytes)]  # noqa: E731
        with systems.Cluster.start(
            root, args.workdir.resolve() / "logs", loader_args(first), "shm", link.placement()
        ) as c:
            loaders = {first: c.loader, **{p: c.start_loader(f"loader-{p}", loader_args(p)) for p in rest}}
            timed = {"dgl_sample_gather": systems.dgl_system(g, feat, train, fanouts, bs, gather=True)}
            for policy, loader in loaders.items():
                job = {"fanouts": fanouts, "batch_size": bs, "job_id": f"bench-{policy}"}
                timed[f"gf_e2e[{policy}]"] = systems.loader_system(c.remote(loader, **job))
            done = runs.alternate(timed, runs.Meter(c.services), args.steps, args.repeats)
        drops = link.drops()
        rate = link.rate
    result = _summary(runs.summarize(done, timed), args, cache_bytes, rate, drops)
    harness.write(args, result, markdown(result), f"link-sweep-{args.preset}-{args.link}")
    return 0


def _summary(systems: dict, args: argparse.Namespace, cache_bytes: int, rate: str, drops: dict[str, int]) -> dict:
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
        "preset": harness.dataset_name(args),
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
