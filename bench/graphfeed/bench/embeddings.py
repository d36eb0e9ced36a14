"""``graphfeed bench embeddings``: trainable node embeddings held by the graph-stores (issue 25).

Three parts, chosen with ``--parts`` (default all):

* **fidelity**: RGCN test accuracy with learnable embeddings for the featureless node types,
  per seed: graphfeed's job (``graphfeed train --model rgcn``: graph-store, sampler and loader
  processes over gRPC) with ``--embeddings server`` (tables and SparseAdam in the graph-stores)
  and with ``--embeddings local`` (``nn.Embedding(sparse=True)`` + ``torch.optim.SparseAdam`` in
  the trainer), and DGL in one process as the external reference (DGL's ``DataLoader``,
  ``dgl.nn.NodeEmbedding`` + ``dgl.optim.SparseAdam``). Same model class, seed, split, fanouts
  and hyper-parameters. On IMDB every type has features, so ``--featureless-types`` (default
  ``actor director``) makes those types learn an embedding and ignore their features.
* **durability**: kill -9 of a graph-store during pushes (:mod:`graphfeed.bench.embedding_kill`):
  applied steps per partition, retries, and rows + optimizer state byte-equal to an
  uninterrupted run.
* **throughput**: training steps/s end to end (minibatch wait included) of the RGCN on the
  MAG-like preset (authors, institutions, fields featureless), one rank, server-side vs
  trainer-side embeddings, runs alternated; both see the same minibatches (digests compared).
  With ``--distdgl`` also DistDGL's RGCN with ``DistEmbedding`` + ``SparseAdam`` on the same
  graph (:mod:`graphfeed.bench.distdgl_rgcn`, random labels). Every trainer gets
  ``--trainer-threads`` torch threads.

Durability and throughput use the dataset of ``--preset`` / ``--root``; fidelity ``--source``
(a MAG preset there shares the throughput part's dataset and processes).
"""

from __future__ import annotations

import argparse
import shutil
import statistics
import tempfile
import time
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from graphfeed.bench import harness

PARTS = ("fidelity", "durability", "throughput")
SYSTEMS = ("dgl", "local", "server")  # fidelity: DGL in-process, graphfeed local, graphfeed server


def register(sub: argparse._SubParsersAction) -> None:
    harness.register(
        sub,
        "embeddings",
        __doc__,
        "server-side embeddings: RGCN accuracy vs local and DGL, kill -9 durability, steps/s",
        add_arguments,
        run,
        preset="mag-small",
        workdir=Path("runs/bench"),
    )


def add_arguments(p: argparse.ArgumentParser) -> None:
    p.add_argument("--parts", nargs="+", choices=PARTS, default=list(PARTS), help="what to run (default all)")
    g = p.add_argument_group("fidelity")
    g.add_argument("--source", default="imdb", help="typed source or MAG preset (default imdb)")
    g.add_argument(
        "--featureless-types", nargs="*", default=None, help="types whose features are ignored (imdb: actor director)"
    )
    g.add_argument("--seeds", type=int, nargs="+", default=[0, 1, 2], help="seeds (default 0 1 2)")
    g.add_argument("--epochs", type=int, default=10, help="epochs (default 10)")
    g.add_argument("--fidelity-batch-size", type=int, default=128, help="seeds per minibatch (default 128)")
    g.add_argument("--no-dgl", action="store_true", help="skip the DGL NodeEmbedding reference")
    g = p.add_argument_group("durability")
    g.add_argument("--kill-trials", type=int, default=10, help="kill -9 / restart trials (default 10)")
    g = p.add_argument_group("throughput (on --preset / --root)")
    g.add_argument("--steps", type=int, default=50, help="timed steps per run (default 50)")
    g.add_argument("--warmup", type=int, default=5, help="untimed steps first (default 5)")
    g.add_argument("--repeats", type=int, default=2, help="runs per system, alternated (default 2)")
    g.add_argument("--batch-size", type=int, default=1024, help="seeds per minibatch (default 1024)")
    g.add_argument(
        "--trainer-threads",
        type=int,
        default=None,
        help="torch threads of the trainers, graphfeed's and DistDGL's alike (default: half the cores, "
        "DistDGL launch.py's default; 2 threads on a busy 2-core machine made a step 10x slower)",
    )
    g.add_argument(
        "--distdgl",
        action="store_true",
        help="also DistDGL: 2 servers + 1 trainer, the RGCN with DistEmbedding + SparseAdam (random labels)",
    )
    p.add_argument("--fanouts", type=int, nargs="+", default=[10, 10], help="per layer, per relation (default 10 10)")
    p.add_argument("--hidden", type=int, default=64, help="hidden units = embedding width (default 64)")
    p.add_argument("--lr", type=float, default=0.01, help="learning rate of every optimizer (default 0.01)")


# --- fidelity --------------------------------------------------------------------------------


def _typed_graph(source: str) -> Any:
    from graphfeed.ingest.sources import load_source
    from graphfeed.ingest.synthetic_hetero import HETERO_PRESETS, generate_mag

    if source in HETERO_PRESETS:
        return generate_mag(source, add_reverse=True)
    return load_source(source, add_reverse=True)  # movie <- actor <- movie needs the rev_ relations


def fidelity(args: argparse.Namespace, clusters: Clusters) -> dict:
    """Test accuracy per system and seed (``SYSTEMS``), their mean and std, the seconds each took."""
    import os

    from graphfeed.ingest.synthetic_hetero import HETERO_PRESETS
    from graphfeed.trainer.hetero_baseline import train_hetero_in_process
    from graphfeed.trainer.train import TrainConfig, Trainer

    featureless = args.featureless_types
    if featureless is None:
        featureless = ["actor", "director"] if args.source == "imdb" else []
    g = _typed_graph(args.source)
    job = {"epochs": args.epochs, "batch_size": args.fidelity_batch_size, "fanouts": args.fanouts}
    job |= {"hidden": args.hidden, "lr": args.lr, "featureless_types": featureless}
    acc: dict[str, list[float]] = {s: [] for s in SYSTEMS}
    secs: dict[str, list[float]] = {s: [] for s in SYSTEMS}
    # a MAG preset: the dataset (and cluster) of the throughput part; another source: its own
    name = f"synthetic-{args.source}" if args.source in HETERO_PRESETS else args.source
    cluster = clusters.get(harness.dataset(args.workdir, name, make=lambda: g))
    assert cluster.loader is not None  # LocalCluster.start starts one
    stores = [s.address for s in cluster.graph_stores]
    for seed in args.seeds:
        for system in SYSTEMS:
            cfg = TrainConfig(
                loader_address=cluster.loader.address,
                model="rgcn",
                seed=seed,
                job_id=f"emb-fidelity-{system}-{seed}",
                progress=False,
                metrics_port=0,
                embeddings="server" if system == "server" else "local",
                graph_stores=stores if system == "server" else [],
                **job,
            )
            t0 = time.perf_counter()
            if system == "dgl":
                if args.no_dgl:
                    continue
                tables = f"gf-emb-{os.getpid()}-{seed}"  # NodeEmbedding's shared-memory tables
                acc[system].append(train_hetero_in_process(g, cfg, dgl_embedding_name=tables)["test_acc"])
            else:
                trainer = Trainer(cfg)
                try:
                    trainer.fit()
                    acc[system].append(trainer.evaluate("test"))
                finally:
                    trainer.close()
            secs[system].append(time.perf_counter() - t0)
    return _accuracy_summary(args, job, acc, secs)


def _accuracy_summary(args: argparse.Namespace, job: dict, acc: dict, secs: dict) -> dict:
    ran = [s for s in SYSTEMS if acc[s]]
    mean = {s: statistics.fmean(acc[s]) for s in ran}
    std = {s: statistics.stdev(acc[s]) if len(acc[s]) > 1 else 0.0 for s in ran}
    gaps = {f"server_minus_{s}_points": round(100 * (mean["server"] - mean[s]), 2) for s in ran if s != "server"}
    return {
        "source": args.source,
        "seeds": args.seeds,
        "job": job,
        "test_acc": acc,
        "seconds": secs,
        "mean": mean,
        "std": std,
        **gaps,
        "within_1_point": all(abs(v) <= 1.0 for v in gaps.values()),
    }


# --- throughput ------------------------------------------------------------------------------


def _step_clock() -> Any:  # a class defined on first use: the trainer package imports torch
    from graphfeed.trainer.metrics import TrainerMetrics

    @dataclass
    class StepClock(TrainerMetrics):
        """The trainer's metrics, plus when each step ended."""

        times: list[float] = field(default_factory=list)

        def record(self, wait_s: float, step_s: float) -> None:
            super().record(wait_s, step_s)
            self.times.append(time.perf_counter())

    return StepClock


def _timed_run(cfg: Any, warmup: int, steps: int) -> tuple[float, list[str]]:
    """Steps/s of ``steps`` steps after ``warmup`` (one Trainer, epochs as needed); the digests."""
    from graphfeed.trainer.train import Trainer

    clock = _step_clock().create(cfg.job_id, 0)
    trainer = Trainer(cfg, metrics=clock)
    try:
        while len(trainer.applied) < warmup + steps:
            trainer.train_epoch()
    finally:
        trainer.close()
    t = clock.times
    return steps / (t[warmup + steps - 1] - t[warmup - 1]), [d for *_, d in trainer.applied]


def throughput(args: argparse.Namespace, clusters: Clusters) -> dict:
    """Steps/s per system (``local``, ``server``), runs alternated, on the dataset the common flags name."""
    import os

    import torch

    from graphfeed.trainer.train import TrainConfig

    threads = args.trainer_threads or max((os.cpu_count() or 1) // 2, 1)
    torch.set_num_threads(threads)  # this process is graphfeed's trainer
    total = args.warmup + args.steps
    rates: dict[str, list[float]] = {"local": [], "server": []}
    digests: dict[str, list[str]] = {}
    cluster = clusters.get(harness.ensure_dataset(args))
    assert cluster.loader is not None
    stores = [s.address for s in cluster.graph_stores]
    for r in range(args.repeats):
        for system in ("local", "server") if r % 2 == 0 else ("server", "local"):
            cfg = TrainConfig(
                loader_address=cluster.loader.address,
                model="rgcn",
                seed=args.seed,
                job_id=f"emb-throughput-{system}",  # the same table each repeat, restored to its seeded rows
                progress=False,
                metrics_port=0,
                embeddings=system,
                graph_stores=stores if system == "server" else [],
                epochs=1 << 20,
                stop_after_steps=total,
                batch_size=args.batch_size,
                fanouts=args.fanouts,
                hidden=args.hidden,
                lr=args.lr,
            )
            rate, digests[system] = _timed_run(cfg, args.warmup, args.steps)
            rates[system].append(rate)
            print(f"throughput {system} run {r}: {rate:.2f} steps/s", flush=True)
    if args.distdgl:
        rates["distdgl"] = _distdgl_rates(args, harness.ensure_dataset(args), clusters.work / "distdgl", threads)
    median = {s: statistics.median(v) for s, v in rates.items()}
    return {
        "dataset": harness.dataset_name(args),
        "steps": args.steps,
        "warmup": args.warmup,
        "batch_size": args.batch_size,
        "trainer_threads": threads,
        "steps_per_s": rates,
        "median_steps_per_s": median,
        "server_over_local": round(median["server"] / median["local"], 3),
        "same_minibatches": digests["local"] == digests["server"],
        **(
            {"server_over_distdgl": round(median["server"] / median["distdgl"], 3)}
            if "distdgl" in median
            else {"distdgl": "not run (--distdgl)"}
        ),
    }


def _distdgl_rates(args: argparse.Namespace, root: Path, logs: Path, threads: int) -> list[float]:
    """Steps/s of DistDGL's RGCN (``DistEmbedding`` + ``SparseAdam``) per repeat, its processes
    kept between repeats (the warm-up run first); partitions cached under ``--workdir``."""
    from graphfeed.bench.distdgl import DistDGLSystem, ensure_partitions
    from graphfeed.common.partition import GraphManifest

    config = ensure_partitions(root, args.workdir, harness.load_global)
    classes = GraphManifest.load(root).num_classes
    flags = ("--rgcn", "--hidden", str(args.hidden), "--lr", str(args.lr), "--num-classes", str(classes))
    rates = []
    system = DistDGLSystem(config, logs, args.fanouts, args.batch_size, trainer_threads=threads, trainer_args=flags)
    with system:
        system.run(args.warmup)
        for r in range(args.repeats):
            run = system.run(args.steps)
            rates.append(args.steps / run.seconds)
            print(f"throughput distdgl run {r}: {rates[-1]:.2f} steps/s", flush=True)
    return rates


# --- report ----------------------------------------------------------------------------------


def durability(args: argparse.Namespace, clusters: Clusters) -> dict:
    from graphfeed.bench.embedding_kill import kill_trials

    root = harness.ensure_dataset(args)
    ntype = "author" if "mag" in harness.dataset_name(args) else _first_featureless(root)
    trials = kill_trials(root, clusters.work / "kill", args.kill_trials, ntype, on_trial=lambda r: print(r, flush=True))
    keys = ("rows_equal", "state_equal", "history_equal")
    return {
        "dataset": harness.dataset_name(args),
        "ntype": ntype,
        "trials": trials,
        "retries": sum(t["retries"] for t in trials),
        "duplicate_acks": sum(t["duplicate_acks"] for t in trials),
        "lost_or_twice": sum(t["lost_or_twice"] for t in trials),
        "pulled_rows_differ": trials[-1]["pulled_rows_differ"] if trials else 0,
        "equal": all(t[k] for t in trials for k in keys),
    }


def _first_featureless(root: Path) -> str:
    from graphfeed.common.partition import GraphManifest

    m = GraphManifest.load(root)
    schema = m.schema()
    return next(t for t in schema.ntypes if schema.data_key(t, "feat") not in m.node_data)


class Clusters:
    """One graph-store/sampler/loader cluster per dataset, started on first use, tables in
    ``work`` (never in the dataset: the shared MAG dataset is read-only); :meth:`stop` ends them."""

    def __init__(self, work: Path) -> None:
        self.work = work
        self._started: dict[Path, Any] = {}

    def get(self, root: Path) -> Any:
        from graphfeed.cluster import LocalCluster

        if root not in self._started:
            where = self.work / f"cluster-{len(self._started)}"
            self._started[root] = LocalCluster.start(root, where / "logs", embeddings_dir=where / "tables")
        return self._started[root]

    def stop(self) -> None:
        for c in self._started.values():
            c.stop()


def run(args: argparse.Namespace) -> int:
    args.workdir.mkdir(parents=True, exist_ok=True)
    work = Path(tempfile.mkdtemp(prefix="embeddings-", dir=args.workdir))  # tables of GBs on the full MAG
    result: dict[str, Any] = {"parts": args.parts, "part_seconds": {}}
    clusters = Clusters(work)
    try:
        for part, fn in (("fidelity", fidelity), ("durability", durability), ("throughput", throughput)):
            if part in args.parts:
                t0 = time.perf_counter()
                result[part] = fn(args, clusters)
                result["part_seconds"][part] = round(time.perf_counter() - t0, 1)
    finally:
        clusters.stop()
        shutil.rmtree(work, ignore_errors=True)
    harness.write(args, result, _table(result), "embeddings")
    return 0


def _table(r: dict) -> str:
    from graphfeed.bench.embedding_report import table

    return table(r)
