"""``graphfeed bench rgcn-fidelity``: the same RGCN learns as well through graphfeed as with DGL.

On a typed graph (default: IMDB from the graphdatascience wheel, movie genre of the movies that
have one), for each seed: DGL's own ``DataLoader`` on the heterograph in this process
(:func:`graphfeed.trainer.hetero_baseline.train_hetero_in_process`), and graphfeed's example job
(``graphfeed train --model rgcn``: graph-store, sampler and loader processes over gRPC, the
graph ingested into ``--partitions`` METIS partitions), both with DGL's ``rev_`` relations
added. Same model class, seed, split, fanouts and hyper-parameters; the table gives test
accuracy per seed and the means.
"""

from __future__ import annotations

import argparse
import statistics
import tempfile
import time
from pathlib import Path

from graphfeed.bench import harness


def register(sub: argparse._SubParsersAction) -> None:
    harness.register(
        sub, "rgcn-fidelity", __doc__, "RGCN test accuracy through graphfeed vs DGL's DataLoader", add_arguments, run
    )


def add_arguments(p: argparse.ArgumentParser) -> None:
    p.add_argument("--source", default="imdb", help="a typed ingest source (default imdb)")
    p.add_argument("--seeds", type=int, nargs="+", default=[0, 1, 2], help="seeds (default 0 1 2)")
    p.add_argument("--epochs", type=int, default=10, help="epochs (default 10)")
    p.add_argument("--batch-size", type=int, default=128, help="seeds per minibatch (default 128)")
    p.add_argument("--fanouts", type=int, nargs="+", default=[10, 10], help="per layer, per relation (default 10 10)")
    p.add_argument("--hidden", type=int, default=64, help="hidden units (default 64)")
    p.add_argument("--lr", type=float, default=0.01, help="learning rate (default 0.01)")
    p.add_argument("--partitions", type=int, default=2, help="graphfeed partitions (default 2)")


def accuracies(source: str, seeds: list[int], partitions: int = 2, **job: object) -> dict:
    """``{"dgl": [test acc per seed], "graphfeed": [...]}`` for the RGCN job ``job`` (TrainConfig fields)."""
    from graphfeed.cluster import LocalCluster
    from graphfeed.ingest.partition import write_partitioned
    from graphfeed.ingest.sources import load_source
    from graphfeed.trainer.hetero_baseline import train_hetero_in_process
    from graphfeed.trainer.train import TrainConfig, Trainer

    g = load_source(source, add_reverse=True)  # movie <- actor <- movie: two hops need the reverse relations
    out: dict[str, list[float]] = {"dgl": [], "graphfeed": [], "dgl_s": [], "graphfeed_s": []}
    with tempfile.TemporaryDirectory(prefix="rgcn-fidelity-") as tmp:
        root = Path(tmp) / source
        write_partitioned(g, root, partitions, "metis")
        cluster = LocalCluster.start(root, Path(tmp) / "logs")
        try:
            assert cluster.loader is not None  # LocalCluster.start starts one
            for seed in seeds:
                cfg = TrainConfig(
                    loader_address=cluster.loader.address,
                    model="rgcn",
                    seed=seed,
                    job_id=f"rgcn-fidelity-{seed}",
                    progress=False,
                    metrics_port=0,
                    **job,  # type: ignore[arg-type]
                )
                t0 = time.perf_counter()
                out["dgl"].append(train_hetero_in_process(g, cfg)["test_acc"])
                out["dgl_s"].append(time.perf_counter() - t0)
                t0 = time.perf_counter()
                trainer = Trainer(cfg)
                try:
                    trainer.fit()
                    out["graphfeed"].append(trainer.evaluate("test"))
                finally:
                    trainer.close()
                out["graphfeed_s"].append(time.perf_counter() - t0)
        finally:
            cluster.stop()
    return out


def run(args: argparse.Namespace) -> int:
    job = {
        "epochs": args.epochs,
        "batch_size": args.batch_size,
        "fanouts": args.fanouts,
        "hidden": args.hidden,
        "lr": args.lr,
    }
    acc = accuracies(args.source, args.seeds, args.partitions, **job)
    mean = {k: statistics.fmean(v) for k, v in acc.items()}
    result = {"source": args.source, "seeds": args.seeds, "job": job, "test_acc": acc, "mean": mean}
    result["graphfeed_minus_dgl_points"] = round(100 * (mean["graphfeed"] - mean["dgl"]), 2)
    lines = [
        f"RGCN on `{args.source}`, {job}, {args.partitions} graphfeed partitions",
        "",
        "| seed | DGL DataLoader test acc | graphfeed test acc | DGL s | graphfeed s |",
        "|---:|---:|---:|---:|---:|",
        *(
            f"| {s} | {d:.4f} | {f:.4f} | {ds:.1f} | {fs:.1f} |"
            for s, d, f, ds, fs in zip(args.seeds, acc["dgl"], acc["graphfeed"], acc["dgl_s"], acc["graphfeed_s"])
        ),
        f"| mean | {mean['dgl']:.4f} | {mean['graphfeed']:.4f} | {mean['dgl_s']:.1f} | {mean['graphfeed_s']:.1f} |",
        "",
        f"graphfeed - DGL: **{result['graphfeed_minus_dgl_points']:+.2f} points** (mean of {len(args.seeds)} seeds)",
    ]
    harness.write(args, result, "\n".join(lines) + "\n", f"rgcn-fidelity-{args.source}")
    return 0
