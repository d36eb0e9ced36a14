"""``graphfeed bench throughput``: graphfeed's services beside in-process DGL, in one run.

Systems, alternated run by run so machine drift hits all of them:

- ``dgl_sample``: ``dgl.dataloading.NeighborSampler`` + ``DataLoader`` in this process.
- ``dgl_sample_gather``: the same plus ``feat[input_nodes]``.
- ``gf_sampler``: the graphfeed sampler service; blocks decoded in this process.
- ``gf_e2e``: minibatches (blocks + input features + labels) through ``RemoteDataLoader``:
  graph-stores -> loader service -> trainer (two hops for the features).
- ``gf_embedded``: the same minibatches through ``EmbeddedDataLoader``, a loader in the
  trainer's process over the graph-stores and the sampler service: one hop for the features.

Plus the machine's limits: sequential memcpy, random-row gather and gRPC loopback streaming.
Writes JSON and a markdown table; ratios compare graphfeed with DGL from the same run.
"""

from __future__ import annotations

import argparse
import contextlib
import logging
import statistics
import subprocess
import sys
import time
import urllib.request
from collections.abc import Callable
from dataclasses import asdict, dataclass, field
from functools import partial
from pathlib import Path
from typing import Any

import numpy as np

from graphfeed.bench import report

log = logging.getLogger(__name__)
SYSTEMS = ("dgl_sample", "dgl_sample_gather", "gf_sampler", "gf_e2e", "gf_embedded", "distdgl")


@dataclass
class Run:
    system: str
    minibatches: int
    seconds: float
    sampled_edges: int
    # bytes by "<process> <Method> <wire|shm>" during the run: gRPC request + response bytes
    # on the wire, and response tensor bytes sent through shared memory
    traffic: dict[str, int] = field(default_factory=dict)
    cpu_seconds: dict[str, float] = field(default_factory=dict)  # by process

    @property
    def wire_bytes(self) -> int:
        return sum(v for k, v in self.traffic.items() if k.endswith(" wire"))

    @property
    def minibatches_per_s(self) -> float:
        return self.minibatches / self.seconds


def register(sub: argparse._SubParsersAction) -> None:
    p = sub.add_parser(
        "throughput",
        help="minibatches/s of graphfeed vs in-process DGL",
        description=__doc__,
        formatter_class=argparse.RawDescriptionHelpFormatter,
    )
    p.add_argument("--preset", default="small", help="synthetic preset (tiny, small, medium, large; default small)")
    p.add_argument("--workdir", type=Path, default=Path("runs/bench"), help="datasets and logs (default runs/bench)")
    p.add_argument("--steps", type=int, default=30, help="minibatches per run (default 30)")
    p.add_argument("--repeats", type=int, default=3, help="runs per system; the median is reported (default 3)")
    p.add_argument("--batch-size", type=int, default=1024, help="seeds per minibatch (default 1024)")
    p.add_argument(
        "--fanouts", type=int, nargs="+", default=[15, 10, 5], help="DGL order, input layer first (default 15 10 5)"
    )
    p.add_argument("--cache-policy", default="none", help="loader cache policy (default none)")
    p.add_argument("--cache-bytes", type=int, default=0, help="loader cache bytes (default 0)")
    p.add_argument("--inflight", type=int, default=4, help="sampler calls outstanding in gf_sampler (default 4)")
    p.add_argument(
        "--transport",
        choices=("shm", "grpc"),
        default="shm",
        help="shm: bulk tensors through /dev/shm between same-host processes (gRPC carries references); "
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
        "--feature-wire-dtype",
        choices=("", "float16", "bfloat16"),
        default="",
        help="gf_e2e's and gf_embedded's job: features travel in this type (default \"\": the stored one)",
    )
    p.add_argument("--out", type=Path, default=None, help="JSON path (default bench/results/throughput-<preset>.json)")
    p.set_defaults(func=run)


def ensure_dataset(workdir: Path, preset: str) -> Path:
    """The preset in 2 METIS partitions under ``workdir`` (ingested on first use)."""
    from graphfeed.common.partition import MANIFEST

    root = workdir / f"synthetic-{preset}-metis-2"
    if not (root / MANIFEST).exists():
        from graphfeed.ingest.partition import write_partitioned
        from graphfeed.ingest.synthetic import generate_preset

        log.info("ingesting synthetic preset %s into %s", preset, root)
        write_partitioned(generate_preset(preset, seed=0, progress=True), root, 2, "metis", progress=True)
    return root


def load_global(root: Path):  # noqa: ANN201
    """The whole graph as one DGLGraph in gid space, its feature table and training ids."""
    import dgl
    import torch

    from graphfeed.common.partition import GraphManifest, PartitionReader, part_dir_name

    m = GraphManifest.load(root)
    readers = [PartitionReader(root / part_dir_name(p)) for p in range(m.num_partitions)]
    # Partitions own consecutive gid ranges, so their in-CSRs concatenate into the global one.
    edge_base = np.cumsum([0] + [len(r.indices) for r in readers])
    indptr = np.concatenate([readers[0].indptr[:1]] + [r.indptr[1:] + b for r, b in zip(readers, edge_base)])
    # int64 ids: DGL's default idtype (partitions may store int32), as a DGL user's graph has.
    indices = np.concatenate([r.indices for r in readers]).astype(np.int64, copy=False)
    eids = np.concatenate([r.edge_ids for r in readers]).astype(np.int64, copy=False)
    g = dgl.graph(
        ("csc", (torch.from_numpy(indptr), torch.from_numpy(indices), torch.from_numpy(eids))), num_nodes=m.num_nodes
    )
    feat = torch.from_numpy(np.concatenate([r.node_data("feat") for r in readers]))
    train = torch.from_numpy(np.concatenate([r.split("train") for r in readers]))
    for r in readers:
        r.close()
    return g, feat, train


class Meter:
    """CPU seconds of this process and the service processes, and bytes on the servers' wires."""

    def __init__(self, cluster) -> None:  # noqa: ANN001
        import psutil

        self.procs = {"client": psutil.Process()}
        self.metrics_urls = []
        if cluster is not None:
            for s in cluster.services:
                self.procs[s.name] = psutil.Process(s.proc.pid)
                self.metrics_urls.append((s.name, f"http://{s.metrics_address}/metrics"))

    def _cpu(self) -> dict[str, float]:
        return {k: sum(p.cpu_times()[:2]) for k, p in self.procs.items()}

    def _bytes(self) -> dict[str, float]:
        """Byte counters of every server, keyed "<process> <Method> <wire|shm>"."""
        kinds = {
            "graphfeed_rpc_response_bytes_total": "wire",
            "graphfeed_rpc_request_bytes_total": "wire",
            "graphfeed_rpc_response_shm_bytes_total": "shm",
        }
        out: dict[str, float] = {}
        for proc, url in self.metrics_urls:
            for line in urllib.request.urlopen(url, timeout=10).read().decode().splitlines():  # noqa: S310 - loopback
                name, _, rest = line.partition("{")
                if name in kinds:
                    method = rest.split('method="', 1)[1].split('"', 1)[0]
                    key = f"{proc} {method} {kinds[name]}"
                    out[key] = out.get(key, 0.0) + float(line.rsplit(" ", 1)[1])
        return out

    def add(self, name: str, service) -> None:  # noqa: ANN001 - a graphfeed.cluster.ServiceProcess
        """Also meters ``service`` (a process started besides the cluster's)."""
        import psutil

        self.procs[name] = psutil.Process(service.proc.pid)
        self.metrics_urls.append((name, f"http://{service.metrics_address}/metrics"))

    def start(self) -> tuple[dict[str, float], dict[str, float], float]:
        return self._cpu(), self._bytes(), time.perf_counter()

    def stop(self, system: str, started: tuple, minibatches: int, edges: int) -> Run:
        seconds = time.perf_counter() - started[2]
        cpu = {k: v - started[0][k] for k, v in self._cpu().items()}
        before = started[1]
        traffic = {k: int(v - before.get(k, 0.0)) for k, v in self._bytes().items() if v - before.get(k, 0.0) > 0}
        return Run(system, minibatches, seconds, edges, traffic, cpu)


def _steady(epoch_iter, per_batch=None):  # noqa: ANN001, ANN202
    """``run(steps) -> sampled edges``: ``steps`` minibatches of a new epoch (``epoch_iter(e)``
    starts epoch ``e``), its stream closed at the end of the run. A stream left open would keep
    working ahead (its look-ahead window) while the other systems run, charging them its CPU and
    the link its bytes; closed, a run pays for its own look-ahead, partly thrown away, so runs
    should be much longer than the window (``--steps``, default 30)."""
    epoch = [0]

    def run(steps: int) -> int:
        epoch[0] += 1
        it = iter(epoch_iter(epoch[0]))
        edges = 0
        try:
            for _ in range(steps):
                input_nodes, _out, blocks = next(it)
                edges += sum(b.num_edges() for b in blocks)
                if per_batch is not None:
                    per_batch(input_nodes)
        finally:
            close = getattr(it, "close", None)
            if close is not None:
                close()  # a graphfeed stream: cancelled now, not when collected
        return edges

    return run


def _epoch_of(loader, epoch: int):  # noqa: ANN001, ANN202
    """``loader`` positioned at the start of ``epoch`` (a graphfeed data loader)."""
    loader.set_epoch(epoch)
    return loader


def _dgl_runner(g, feat, train, fanouts, batch_size, gather: bool):  # noqa: ANN001, ANN202
    import dgl

    sampler = dgl.dataloading.NeighborSampler(fanouts)
    loader = dgl.dataloading.DataLoader(g, train, sampler, batch_size=batch_size, shuffle=True, drop_last=False)
    return _steady(lambda _epoch: loader, (lambda input_nodes: feat[input_nodes]) if gather else None)


def _gf_sampler_runner(
    address: str, train: np.ndarray, fanouts: list[int], batch_size: int, inflight: int, shm_dir: str | None
) -> Callable[[int], int]:
    """Blocks delivered into this process, ``inflight`` sampler calls outstanding (as the
    loader's look-ahead keeps them), taken in step order."""
    from concurrent.futures import ThreadPoolExecutor

    from graphfeed.sampler.client import SamplerClient

    client = SamplerClient(address, shm_dir=shm_dir)
    pool = ThreadPoolExecutor(max_workers=inflight, thread_name_prefix="bench-sample")
    epoch = [0]

    def run(steps: int) -> int:
        epoch[0] += 1
        perm = np.random.default_rng(epoch[0]).permutation(train)
        seeds = lambda s: perm[s * batch_size : (s + 1) * batch_size]  # noqa: E731
        # step -> its call; a step's entry is dropped once taken, releasing its blocks
        calls = {
            s: pool.submit(client.sample, seeds(s), fanouts, False, 0, epoch[0], s) for s in range(min(inflight, steps))
        }
        edges = 0
        for step in range(steps):
            sb = calls.pop(step).result()
            if step + inflight < steps:
                calls[step + inflight] = pool.submit(
                    client.sample, seeds(step + inflight), fanouts, False, 0, epoch[0], step + inflight
                )
            edges += sb.num_sampled_edges
        return edges

    return run


def _gf_e2e_runner(address: str, fanouts: list[int], batch_size: int, shm_dir: str | None, wire_dtype: str = ""):  # noqa: ANN202
    from graphfeed.trainer import RemoteDataLoader

    loader = RemoteDataLoader(
        address,
        "train",
        fanouts=fanouts,
        batch_size=batch_size,
        shuffle=True,
        job_id="bench",
        shm_dir=shm_dir,
        feature_wire_dtype=wire_dtype,
    )
    return _steady(partial(_epoch_of, loader))


def _gf_embedded_runner(
    cluster,  # noqa: ANN001
    fanouts: list[int],
    batch_size: int,
    shm_dir: str | None,
    cache_policy: str,
    cache_bytes: int,
    wire_dtype: str = "",
) -> Callable[[int], int]:
    """Minibatches from a loader in this process (the trainer's): features graph-stores -> here."""
    from graphfeed.graph_store.partitions import RemotePartitionSet
    from graphfeed.loader.core import Loader
    from graphfeed.sampler.client import SamplerClient
    from graphfeed.trainer import EmbeddedDataLoader

    partitions = RemotePartitionSet([s.address for s in cluster.graph_stores], shm_dir=shm_dir or None)
    sampler = SamplerClient(cluster.sampler.address, shm_dir=shm_dir or None)
    core = Loader(partitions, sampler, cache_policy=cache_policy, cache_bytes=cache_bytes)
    loader = EmbeddedDataLoader(
        core,
        "train",
        fanouts=fanouts,
        batch_size=batch_size,
        shuffle=True,
        job_id="bench-embedded",
        feature_wire_dtype=wire_dtype,
    )
    return _steady(partial(_epoch_of, loader))


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
    proc = subprocess.Popen([sys.executable, "-m", "graphfeed.bench.loopback"], stdout=subprocess.PIPE, text=True)
    try:
        assert proc.stdout is not None  # stdout=PIPE
        line = proc.stdout.readline()
        address = line.split("grpc=")[1].strip()
        grpc_gbps = statistics.median(measure(address) for _ in range(3))
    finally:
        proc.kill()
        proc.wait()
    return {"memcpy_gbps": memcpy, "random_row_gather_gbps": gather, "grpc_loopback_stream_gbps": grpc_gbps}


def run(args: argparse.Namespace) -> int:
    import torch

    from graphfeed.cluster import LOOPBACK, LocalCluster

    if args.dgl_threads:
        torch.set_num_threads(args.dgl_threads)
    fanouts, bs = list(args.fanouts), args.batch_size
    root = ensure_dataset(args.workdir.resolve(), args.preset)
    g, feat, train = load_global(root)
    loader_args = ["--cache-policy", args.cache_policy, "--cache-bytes", str(args.cache_bytes)]
    shm_dir = "/dev/shm" if args.transport == "shm" else ""
    with contextlib.ExitStack() as stack:
        # DistDGL's processes first: forking once this process has gRPC channels aborts the child
        distdgl = (
            _distdgl_runner(stack, root, args.workdir.resolve(), (g, feat, train), fanouts, bs)
            if args.distdgl
            else None
        )
        placement = LOOPBACK
        if args.link:  # the graph-stores on "another machine": a namespace behind a shaped veth
            from graphfeed.bench.links import ShapedLink

            placement = stack.enter_context(ShapedLink(None if args.link == "unlimited" else args.link)).placement()
        cluster = LocalCluster.start(
            root, args.workdir.resolve() / "logs", loader_args, shm_dir=shm_dir, store_placement=placement
        )
        stack.callback(cluster.stop)
        assert cluster.sampler is not None and cluster.loader is not None, "LocalCluster.start starts both"
        runners: dict[str, Callable[[int], int | Run]] = {
            "dgl_sample": _dgl_runner(g, feat, train, fanouts, bs, gather=False),
            "dgl_sample_gather": _dgl_runner(g, feat, train, fanouts, bs, gather=True),
            "gf_sampler": _gf_sampler_runner(
                cluster.sampler.address, train.numpy(), fanouts, bs, args.inflight, shm_dir
            ),
            "gf_e2e": _gf_e2e_runner(cluster.loader.address, fanouts, bs, shm_dir, args.feature_wire_dtype),
            "gf_embedded": _gf_embedded_runner(
                cluster, fanouts, bs, shm_dir, args.cache_policy, args.cache_bytes, args.feature_wire_dtype
            ),
        }
        if distdgl is not None:
            runners["distdgl"] = distdgl
        runs = _alternate(runners, Meter(cluster), args.steps, args.repeats)
        limits = machine_limits(int(feat.shape[1]), 222_000)
    result = summarize(runs, limits, args)
    report.write(args.out or Path("bench/results") / f"throughput-{args.preset}.json", result, markdown(result))
    return 0


def _alternate(runners: dict[str, Callable[[int], int | Run]], meter: Meter, steps: int, repeats: int) -> list[Run]:
    """Warms every system up, then runs them in turn ``repeats`` times (machine drift hits all)."""
    for fn in runners.values():  # imports, connections, caches
        fn(2)
    runs: list[Run] = []
    for r in range(repeats):
        for name, fn in runners.items():
            started = meter.start()
            got = fn(steps)
            # a system that measures itself (DistDGL: its own processes) returns its Run
            runs.append(
                Run(**{**asdict(got), "system": name})
                if isinstance(got, Run)
                else meter.stop(name, started, steps, got)
            )
            log.info("repeat %d %-18s %6.2f minibatches/s", r, name, runs[-1].minibatches_per_s)
    return runs


def _distdgl_runner(
    stack: contextlib.ExitStack, root: Path, workdir: Path, data: tuple, fanouts: list[int], batch_size: int
) -> Callable[[int], Run]:
    """DistDGL (2 servers, 1 trainer, each emulated machine in its own mount namespace) on the
    same graph: ``run(steps) -> Run`` measured by its own processes."""
    import torch

    from graphfeed.bench.distdgl import DistDGLSystem, ensure_partitions

    config = ensure_partitions(root, workdir, lambda _root: data)
    system = stack.enter_context(
        DistDGLSystem(config, workdir / "logs", fanouts, batch_size, trainer_threads=torch.get_num_threads())
    )
    return lambda steps: Run("distdgl", **asdict(system.run(steps)))


def summarize(
    runs: list[Run], limits: dict[str, float], args: argparse.Namespace, systems_order: list[str] | None = None
) -> dict:
    """Medians and per-minibatch bytes and CPU per system (``systems_order``: default SYSTEMS)."""
    systems: dict[str, dict[str, Any]] = {}
    for name in systems_order or SYSTEMS:
        rs = [r for r in runs if r.system == name]
        if not rs:
            continue
        mb = sum(r.minibatches for r in rs)
        procs = sorted({k for r in rs for k in r.cpu_seconds})
        routes = sorted({k for r in rs for k in r.traffic})
        systems[name] = {
            "minibatches_per_s": statistics.median(r.minibatches_per_s for r in rs),
            "runs_minibatches_per_s": [r.minibatches_per_s for r in rs],
            "sampled_edges_per_s": statistics.median(r.sampled_edges / r.seconds for r in rs),
            "wire_bytes_per_minibatch": sum(r.wire_bytes for r in rs) / mb,
            "shm_bytes_per_minibatch": sum(r.traffic.get(k, 0) for r in rs for k in routes if k.endswith(" shm")) / mb,
            # "<server process> <RPC> <wire|shm>": graph-store-<p> is partition p
            "bytes_per_minibatch_by_rpc": {k: sum(r.traffic.get(k, 0) for r in rs) / mb for k in routes},
            "cpu_seconds_per_minibatch": {k: sum(r.cpu_seconds.get(k, 0.0) for r in rs) / mb for k in procs},
        }
    ratio = lambda a, b: (  # noqa: E731
        systems[a]["minibatches_per_s"] / systems[b]["minibatches_per_s"] if a in systems and b in systems else None
    )
    return {
        "command": "graphfeed bench throughput " + " ".join(sys.argv[3:]),
        "preset": args.preset,
        "transport": getattr(args, "transport", "grpc"),
        "link": getattr(args, "link", "") or "loopback",
        "batch_size": args.batch_size,
        "fanouts": list(args.fanouts),
        "steps_per_run": args.steps,
        "repeats": args.repeats,
        "systems": systems,
        "sample_ratio_vs_dgl": ratio("gf_sampler", "dgl_sample"),
        "e2e_ratio_vs_dgl": ratio("gf_e2e", "dgl_sample_gather"),
        "embedded_ratio_vs_dgl": ratio("gf_embedded", "dgl_sample_gather"),
        **(
            {
                "e2e_ratio_vs_distdgl": ratio("gf_e2e", "distdgl"),
                "embedded_ratio_vs_distdgl": ratio("gf_embedded", "distdgl"),
                "distdgl_ratio_vs_dgl": ratio("distdgl", "dgl_sample_gather"),
            }
            if "distdgl" in systems
            else {}
        ),
        "machine": limits,
    }


def markdown(result: dict) -> str:
    lines = [
        (
            f"preset `{result['preset']}`, transport {result['transport']}, graph-stores on {result['link']}, "
            f"batch {result['batch_size']}, fanouts {result['fanouts']}, "
            f"{result['steps_per_run']} minibatches x {result['repeats']} runs per system (median)"
        ),
        "",
        "| system | minibatches/s | sampled edges/s | wire MB/minibatch | CPU s/minibatch (by process) |",
        "|---|---:|---:|---:|---|",
    ]
    for name, s in result["systems"].items():
        cpu = ", ".join(f"{k} {v:.3f}" for k, v in s["cpu_seconds_per_minibatch"].items() if v > 0.0005)
        lines.append(
            f"| {name} | {s['minibatches_per_s']:.2f} | {s['sampled_edges_per_s'] / 1e6:.2f} M | "
            f"{s['wire_bytes_per_minibatch'] / 1e6:.1f} | {cpu} |"
        )
    m = result["machine"]
    lines += [
        "",
        (
            f"**sample_ratio_vs_dgl = {result['sample_ratio_vs_dgl']:.2f}**, "
            f"**e2e_ratio_vs_dgl = {result['e2e_ratio_vs_dgl']:.2f}** (two hops), "
            f"**embedded_ratio_vs_dgl = {result['embedded_ratio_vs_dgl']:.2f}** (one hop); "
            f"machine: memcpy {m['memcpy_gbps']:.1f} GB/s, random-row gather {m['random_row_gather_gbps']:.1f} GB/s, "
            f"gRPC loopback stream {m['grpc_loopback_stream_gbps']:.2f} GB/s"
        ),
    ]
    if "distdgl_ratio_vs_dgl" in result:
        lines.append(
            f"DistDGL: {result['distdgl_ratio_vs_dgl']:.2f}x in-process DGL; graphfeed over DistDGL: "
            f"**e2e {result['e2e_ratio_vs_distdgl']:.2f}x**, **embedded {result['embedded_ratio_vs_distdgl']:.2f}x**"
        )
    return "\n".join(lines) + "\n"
