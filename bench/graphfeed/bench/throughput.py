"""``graphfeed bench throughput``: graphfeed's services beside in-process DGL, in one run.

Systems, alternated run by run so machine drift hits all of them:

- ``dgl_sample``: ``dgl.dataloading.NeighborSampler`` + ``DataLoader`` in this process.
- ``dgl_sample_gather``: the same plus ``feat[input_nodes]``.
- ``gf_sampler``: the graphfeed sampler service; blocks decoded in this process.
- ``gf_e2e``: minibatches (blocks + input features + labels) through ``RemoteDataLoader``:
  graph-stores -> loader service -> trainer (two hops for the features).
- ``gf_embedded``: the same minibatches through ``EmbeddedDataLoader``, a loader in the
  trainer's process over the graph-stores and the sampler service: one hop for the features.
- ``distdgl`` (``--distdgl``): DistDGL on 2 emulated machines (:mod:`graphfeed.bench.distdgl`).

With ``--edges RELATION`` every system makes edge minibatches instead (link prediction: the
dataset ingested with that edge split, ``batch_size`` positive train edges per minibatch,
``--num-negatives`` uniform negatives each, seed edges and reverse twins excluded; DGL's edge
DataLoader on the DGL side; :mod:`graphfeed.bench.edge_systems`).

Plus the machine's limits: sequential memcpy, random-row gather and gRPC loopback streaming.
Writes JSON and a markdown table; ratios compare graphfeed with DGL from the same run.
"""

from __future__ import annotations

import argparse
import contextlib
import statistics
import time
from pathlib import Path
from typing import Any

import numpy as np

from graphfeed.bench import edge_systems, harness, runs, systems
from graphfeed.common.partition import GraphManifest

SYSTEMS = ("dgl_sample", "dgl_sample_gather", "gf_sampler", "gf_e2e", "gf_embedded", "distdgl")


def register(sub: argparse._SubParsersAction) -> None:
    harness.register(
        sub,
        "throughput",
        __doc__,
        "minibatches/s of graphfeed vs in-process DGL",
        add_arguments,
        run,
        # Each run starts a new epoch for every system: DGL draws a permutation of its seeds then
        # (0.9 s for 17M edges), graphfeed's plan starts for free but its pipeline fills. 60
        # minibatches is steady state within a few percent; 20 flattered graphfeed (stop 34).
        steps=60,
        repeats=3,
        **harness.DATASET,
    )


def add_arguments(p: argparse.ArgumentParser) -> None:
    p.add_argument("--cache-policy", default="none", help="loader cache policy (default none)")
    p.add_argument("--cache-bytes", type=int, default=0, help="loader cache bytes (default 0)")
    p.add_argument("--inflight", type=int, default=4, help="sampler calls outstanding in gf_sampler (default 4)")
    p.add_argument(
        "--warmup",
        type=int,
        default=12,
        help="untimed minibatches per system before the timed runs, the same for every system (default 12: a "
        "typed job's pipeline fills its reusable shared-memory files over its first ~12 minibatches)",
    )
    p.add_argument(
        "--transport",
        choices=tuple(systems.LAYOUTS),
        default="shm",
        help="shm: bulk tensors through /dev/shm between same-host processes (gRPC carries references); "
        "kubernetes: graph-stores and sampler over gRPC only, the loader hands the trainer shared memory; "
        "grpc: everything inline on the wire (default shm)",
    )
    p.add_argument(
        "--link",
        default="",
        help="graph-stores in their own network namespace behind a veth pair shaped to this tc rate each way "
        '("10gbit", "25gbit"; "unlimited": unshaped), as on other machines; needs root',
    )
    p.add_argument(
        "--distdgl",
        action="store_true",
        help="also DistDGL (dgl.distributed: 2 METIS partitions, 2 servers, 1 trainer, each emulated machine "
        "in its own mount namespace; needs root, unshare, nsenter, ss)",
    )
    p.add_argument(
        "--dgl-threads",
        type=int,
        default=0,
        help="torch/OMP threads of this process (DGL and the trainers' side; DistDGL's trainer gets the same); "
        "default: torch's own",
    )
    p.add_argument(
        "--edges",
        default="",
        metavar="RELATION",
        help='edge minibatches (link prediction) of this relation ("_E" of a one-type graph, "writes" of '
        "mag): the preset ingested with that edge split; graphfeed's edge jobs vs DGL's edge DataLoader",
    )
    p.add_argument(
        "--num-negatives", type=int, default=1, help="with --edges: uniform negatives per positive edge (default 1)"
    )
    p.add_argument(
        "--no-machine-limits",
        action="store_true",
        help="skip measuring memcpy, random-row gather and gRPC loopback (about 15 s; smoke tests)",
    )
    p.add_argument(
        "--feature-wire-dtype",
        choices=("", "float16", "bfloat16"),
        default="",
        help="gf_e2e's and gf_embedded's job: features travel in this type (default \"\": the stored one)",
    )


def run(args: argparse.Namespace) -> int:
    import torch

    from graphfeed.cluster import LOOPBACK

    if args.dgl_threads:
        torch.set_num_threads(args.dgl_threads)
    fanouts, bs, workdir = list(args.fanouts), args.batch_size, args.workdir.resolve()
    root = harness.ensure_dataset(args)
    g, feat, train = harness.load_global(root)
    job = {"fanouts": fanouts, "batch_size": bs, "shuffle": True, "feature_wire_dtype": args.feature_wire_dtype}
    if args.edges:
        job.update(edge_systems.job(args.num_negatives))
        rows, schema = harness.edge_rows(root), GraphManifest.load(root).schema()
        if args.num_negatives < 1 or schema.etype_id(args.edges) != int(rows[0, 2]):
            raise SystemExit(
                f"bench throughput: --num-negatives must be >= 1, and --edges {args.edges!r} the relation of "
                f"{root}'s edge split ({edge_systems.describe(rows, schema, 1)['relation']})"
            )
        args.edge_mode = edge_systems.describe(rows, schema, args.num_negatives)
        if args.distdgl:
            args.edge_mode["distdgl_exclusion"] = edge_systems.DISTDGL_EXCLUSION
    cache = {"cache_policy": args.cache_policy, "cache_bytes": args.cache_bytes}
    with contextlib.ExitStack() as stack:
        # DistDGL's processes first: forking once this process has gRPC channels aborts the child
        edges = edge_systems.reference_edges(g, rows, schema) if args.edges else None
        distdgl = (
            distdgl_system(stack, root, workdir, (g, feat, train), fanouts, bs, edges, args.num_negatives)
            if args.distdgl
            else None
        )
        placement = LOOPBACK
        if args.link:  # the graph-stores on "another machine": a namespace behind a shaped veth
            from graphfeed.bench.links import ShapedLink

            placement = stack.enter_context(ShapedLink(None if args.link == "unlimited" else args.link)).placement()
        loader_args = ["--cache-policy", args.cache_policy, "--cache-bytes", str(args.cache_bytes)]
        cluster = stack.enter_context(
            systems.Cluster.start(root, workdir / "logs", loader_args, args.transport, placement)
        )
        assert cluster.sampler is not None
        shm = systems.LAYOUTS[args.transport][0]
        if args.edges:
            k = args.num_negatives
            timed: dict[str, systems.System] = {
                "dgl_sample": edge_systems.dgl_system(g, feat, rows, schema, fanouts, bs, k, gather=False),
                "dgl_sample_gather": edge_systems.dgl_system(g, feat, rows, schema, fanouts, bs, k, gather=True),
                "gf_sampler": edge_systems.sampler_system(
                    cluster.sampler.address, rows, schema, fanouts, bs, k, args.inflight, shm
                ),
            }
        else:
            timed = {
                "dgl_sample": systems.dgl_system(g, feat, train, fanouts, bs, gather=False),
                "dgl_sample_gather": systems.dgl_system(g, feat, train, fanouts, bs, gather=True),
                "gf_sampler": systems.sampler_system(
                    cluster.sampler.address, harness.split_gids(root), fanouts, bs, args.inflight, shm
                ),
            }
        timed |= {
            "gf_e2e": systems.loader_system(cluster.remote(job_id="bench", **job)),
            "gf_embedded": systems.loader_system(cluster.embedded(job_id="bench-embedded", **cache, **job)),
        }
        if distdgl is not None:
            timed["distdgl"] = distdgl
        done = runs.alternate(timed, runs.Meter(cluster.services), args.steps, args.repeats, args.warmup)
        width = next(iter(feat.values())).shape[1] if isinstance(feat, dict) else feat.shape[1]
        limits = {} if args.no_machine_limits else machine_limits(int(width), 222_000)
    result = summarize(runs.summarize(done, SYSTEMS), limits, args)
    name = f"throughput-{args.preset}" + (f"-edges-{args.edges.replace(':', '.')}" if args.edges else "")
    harness.write(args, result, markdown(result), name)
    return 0


def distdgl_system(
    stack: contextlib.ExitStack,
    root: Path,
    workdir: Path,
    data: tuple,
    fanouts: list[int],
    batch_size: int,
    edges: dict[str, Any] | None = None,
    num_negatives: int = 1,
) -> systems.System:
    """DistDGL (2 servers, 1 trainer, each emulated machine in its own mount namespace) on the
    same graph: ``run(steps) -> Run`` measured by its own processes; with ``edges``
    (:func:`graphfeed.bench.edge_systems.reference_edges`) its ``DistEdgeDataLoader``."""
    import torch

    from graphfeed.bench.distdgl import DistDGLSystem, ensure_partitions

    config = ensure_partitions(root, workdir, lambda _root: data, edges)
    flags = ("--num-negatives", str(num_negatives)) if edges is not None else ()
    system = DistDGLSystem(
        config, workdir / "logs", fanouts, batch_size, trainer_threads=torch.get_num_threads(), trainer_args=flags
    )
    return stack.enter_context(system).run


def machine_limits(feat_width: int, rows: int) -> dict[str, float]:
    """Sequential memcpy, random-row gather and gRPC loopback streaming, in GB/s."""
    from graphfeed.bench.loopback import measure

    a = np.ones(64 << 20, dtype=np.float32)  # 256 MB
    b = np.empty_like(a)
    np.copyto(b, a)
    t0 = time.perf_counter()
    for _ in range(5):
        np.copyto(b, a)
    memcpy = 5 * a.nbytes / (time.perf_counter() - t0) / 1e9
    table = np.ones((1_000_000, feat_width), dtype=np.float32)
    ids = np.random.default_rng(0).integers(0, len(table), rows)
    table[ids]
    t0 = time.perf_counter()
    for _ in range(3):
        out = table[ids]
    gather = 3 * out.nbytes / (time.perf_counter() - t0) / 1e9
    server = systems.Child.spawn("loopback", ["graphfeed.bench.loopback"])
    try:
        address = server.wait_ready()
        grpc_gbps = statistics.median(measure(address) for _ in range(3))
    finally:
        server.stop()
    return {"memcpy_gbps": memcpy, "random_row_gather_gbps": gather, "grpc_loopback_stream_gbps": grpc_gbps}


TRAINER_POD = ("client", "loader")
"""The processes of a trainer pod: the trainer (this process, ``client``) and its loader sidecar."""


def cpu_shares(systems_: dict[str, dict[str, Any]]) -> None:
    """Adds each system's CPU seconds per minibatch in all (``cpu_total_s``) and in the trainer
    pod (``trainer_pod_cpu_s``: what bounds a GPU's feed on a cluster, where graph-stores and
    samplers run on other nodes)."""
    for summary in systems_.values():
        cpu = summary.get("cpu_seconds_per_minibatch") or {}
        summary["cpu_total_s"] = round(sum(cpu.values()), 4)
        summary["trainer_pod_cpu_s"] = round(sum(v for k, v in cpu.items() if k in TRAINER_POD), 4)


def summarize(systems_: dict[str, dict[str, Any]], limits: dict[str, float], args: argparse.Namespace) -> dict:
    """The systems' summaries, the ratios between them and the machine's limits."""
    ratio = lambda a, b: runs.ratio(systems_, a, b)  # noqa: E731
    cpu_shares(systems_)
    dgl_cpu = systems_.get("dgl_sample_gather", {}).get("cpu_total_s") or None
    pod = {
        f"{name}_trainer_pod_cpu_vs_dgl": round(systems_[name]["trainer_pod_cpu_s"] / dgl_cpu, 3)
        for name in ("gf_e2e", "gf_embedded")
        if dgl_cpu and name in systems_
    }
    return {
        "preset": harness.dataset_name(args),
        "transport": args.transport,
        # edge minibatches (relation, negatives, exclusion) or node ones; "minibatches" count either
        "mode": "edges" if getattr(args, "edge_mode", None) else "nodes",
        **({"edges": args.edge_mode} if getattr(args, "edge_mode", None) else {}),
        "link": args.link or "loopback",
        "batch_size": args.batch_size,
        "fanouts": list(args.fanouts),
        "steps_per_run": args.steps,
        "repeats": args.repeats,
        "warmup_steps": args.warmup,
        "systems": systems_,
        "sample_ratio_vs_dgl": ratio("gf_sampler", "dgl_sample"),
        "e2e_ratio_vs_dgl": ratio("gf_e2e", "dgl_sample_gather"),
        "embedded_ratio_vs_dgl": ratio("gf_embedded", "dgl_sample_gather"),
        **pod,
        **(
            {
                "e2e_ratio_vs_distdgl": ratio("gf_e2e", "distdgl"),
                "embedded_ratio_vs_distdgl": ratio("gf_embedded", "distdgl"),
                "distdgl_ratio_vs_dgl": ratio("distdgl", "dgl_sample_gather"),
            }
            if "distdgl" in systems_
            else {}
        ),
        "machine": limits,
    }


def markdown(result: dict) -> str:
    m = result["machine"]
    e = result.get("edges")
    mode = (
        f"**edge minibatches** of `{e['relation']}` ({e['num_negatives']} {e['negative_sampler']} negatives per "
        f"positive, exclude {e['exclude']}, {e['train_edges']:,} train edges), "
        if e
        else ""
    )
    lines = [
        (
            f"{mode}preset `{result['preset']}`, transport {result['transport']}, graph-stores on {result['link']}, "
            f"batch {result['batch_size']}{' positive edges' if e else ''}, fanouts {result['fanouts']}, "
            f"{result['steps_per_run']} minibatches x {result['repeats']} runs per system "
            f"after {result['warmup_steps']} untimed"
        ),
        "",
        *runs.table(result["systems"]),
        "",
        (
            f"**sample_ratio_vs_dgl = {result['sample_ratio_vs_dgl']:.2f}**, "
            f"**e2e_ratio_vs_dgl = {result['e2e_ratio_vs_dgl']:.2f}** (two hops), "
            f"**embedded_ratio_vs_dgl = {result['embedded_ratio_vs_dgl']:.2f}** (one hop)"
            + (
                f"; machine: memcpy {m['memcpy_gbps']:.1f} GB/s, "
                f"random-row gather {m['random_row_gather_gbps']:.1f} GB/s, "
                f"gRPC loopback stream {m['grpc_loopback_stream_gbps']:.2f} GB/s"
                if m
                else ""
            )
        ),
    ]
    if "gf_e2e_trainer_pod_cpu_vs_dgl" in result:
        lines.append(
            "Trainer pod (trainer + loader sidecar) CPU seconds per minibatch over in-process DGL's whole job: "
            f"e2e {result['gf_e2e_trainer_pod_cpu_vs_dgl']:.2f}x, "
            f"embedded {result.get('gf_embedded_trainer_pod_cpu_vs_dgl', float('nan')):.2f}x"
        )
    if "distdgl_ratio_vs_dgl" in result:
        lines.append(
            f"DistDGL: {result['distdgl_ratio_vs_dgl']:.2f}x in-process DGL; graphfeed over DistDGL: "
            f"**e2e {result['e2e_ratio_vs_distdgl']:.2f}x**, **embedded {result['embedded_ratio_vs_distdgl']:.2f}x**"
            + (f" (DistDGL's exclusion: {e['distdgl_exclusion']})" if e and "distdgl_exclusion" in e else "")
        )
    return "\n".join(lines) + "\n"
