"""``graphfeed bench linkpred``: the same link predictor learns as well through graphfeed as with DGL.

For each seed, on one edge split of a real graph (default Cora's citations; ``--source
lastfm-hetero`` predicts LastFM's user ``listens_to`` artist, every type learned as embeddings):

* **DGL**: :func:`graphfeed.trainer.linkpred.baseline.train_linkpred_in_process`: DGL's own
  ``DataLoader`` with ``as_edge_prediction_sampler`` (seed edges and their reverse twins
  excluded, ``Uniform(k)`` negatives) on the graph in this process, then DGL's layer-wise
  inference of every node;
* **graphfeed**: the example job ``graphfeed train --task link`` (graph-store, sampler and loader
  processes over gRPC, the graph ingested into ``--partitions`` METIS partitions), then every
  node embedded layer by layer through the services.

Same model class, seed, split, fanouts, negatives and hyper-parameters. Both runs' embeddings
are scored by one function (:func:`graphfeed.trainer.linkpred.evaluate.evaluate_split`) in the
input's node ids, so each test edge is ranked against the very same seeded negatives: test MRR
(and for a user-item relation Recall@20 / NDCG@20 over all items) per seed, and the means.
"""

from __future__ import annotations

import argparse
import dataclasses
import statistics
import tempfile
import time
from pathlib import Path
from typing import Any

import numpy as np
import torch

from graphfeed.bench import harness

RELATIONS = {"cora": "_E", "lastfm-hetero": "listens_to"}
"""The relation each source predicts by default."""


def register(sub: argparse._SubParsersAction) -> None:
    harness.register(
        sub,
        "linkpred",
        __doc__,
        "link-prediction test MRR through graphfeed vs DGL's edge DataLoader",
        add_arguments,
        run,
    )


def add_arguments(p: argparse.ArgumentParser) -> None:
    p.add_argument("--source", default="cora", choices=sorted(RELATIONS), help="ingest source (default cora)")
    p.add_argument("--seeds", type=int, nargs="+", default=[0, 1, 2], help="seeds (default 0 1 2)")
    p.add_argument("--epochs", type=int, default=5, help="epochs (default 5)")
    p.add_argument("--batch-size", type=int, default=512, help="positive edges per minibatch (default 512)")
    p.add_argument("--fanouts", type=int, nargs="+", default=[10, 10], help="per layer (default 10 10)")
    p.add_argument("--hidden", type=int, default=64, help="hidden units (default 64)")
    p.add_argument("--lr", type=float, default=0.01, help="learning rate (default 0.01)")
    p.add_argument("--num-negatives", type=int, default=1, help="negatives per positive in training (default 1)")
    p.add_argument("--eval-negatives", type=int, default=100, help="negatives per test edge (default 100)")
    p.add_argument("--partitions", type=int, default=2, help="graphfeed partitions (default 2)")


def input_order(h: Any, orig: np.ndarray, schema: Any) -> Any:
    """Embeddings by graphfeed id -> by the input's node position (``orig``: the graph root's
    ``orig_ids.npy`` of a graph ingested without dataset ids, so its entries are input
    positions, type-wise per type), so both runs score the same pairs and negatives."""
    if not isinstance(h, dict):
        out = torch.empty_like(h)
        out[torch.from_numpy(orig)] = h
        return out
    res = {}
    for nt, rows in h.items():
        ids = orig[schema.to_gids(nt, np.arange(len(rows), dtype=np.int64))]
        res[nt] = torch.empty_like(rows)
        res[nt][torch.from_numpy(ids)] = rows
    return res


def metrics(source: str, seeds: list[int], partitions: int = 2, **job: Any) -> dict[str, list[Any]]:
    """``{"dgl": [test metrics per seed], "graphfeed": [...], "*_s": [seconds]}`` for ``job``."""
    from graphfeed.cluster import LocalCluster
    from graphfeed.ingest.edge_split import split_edges
    from graphfeed.ingest.partition import write_partitioned
    from graphfeed.ingest.sources import load_source
    from graphfeed.trainer.linkpred.baseline import train_linkpred_in_process
    from graphfeed.trainer.linkpred.config import LinkPredConfig
    from graphfeed.trainer.linkpred.evaluate import evaluate_split
    from graphfeed.trainer.train import TrainConfig, Trainer

    typed = source in ("lastfm-hetero",)
    g = split_edges(load_source(source, **({"add_reverse": True} if typed else {})), RELATIONS[source], seed=0)
    out: dict[str, list] = {"dgl": [], "graphfeed": [], "dgl_s": [], "graphfeed_s": []}
    with tempfile.TemporaryDirectory(prefix="linkpred-") as tmp:
        root = Path(tmp) / source
        # without the dataset's own ids, orig_ids.npy maps each gid to its input position (type-wise)
        write_partitioned(dataclasses.replace(g, orig_ids=None), root, partitions, "metis")
        orig = np.load(root / "orig_ids.npy")
        cluster = LocalCluster.start(root, Path(tmp) / "logs")
        try:
            assert cluster.loader is not None  # LocalCluster.start starts one
            for seed in seeds:
                lp = LinkPredConfig(
                    seed=seed, **{k: v for k, v in job.items() if k in LinkPredConfig.__dataclass_fields__}
                )
                t0 = time.perf_counter()
                out["dgl"].append(train_linkpred_in_process(g, lp)["test"])
                out["dgl_s"].append(time.perf_counter() - t0)
                cfg = TrainConfig(
                    loader_address=cluster.loader.address,
                    task="link",
                    model="rgcn" if typed else "sage",
                    seed=seed,
                    job_id=f"linkpred-{seed}",
                    progress=False,
                    metrics_port=0,
                    **{k: v for k, v in job.items() if k in TrainConfig.model_fields},
                )
                t0 = time.perf_counter()
                trainer = Trainer(cfg)
                try:
                    trainer.fit()
                    h = input_order(trainer.node_embeddings(), orig, trainer.train_loader.schema)
                    out["graphfeed"].append(evaluate_split(g, "test", h, trainer.link_predictor().scorer, lp))
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
        "num_negatives": args.num_negatives,
        "eval_negatives": args.eval_negatives,
        "dropout": 0.0,
        "weight_decay": 0.0,
    }
    res = metrics(args.source, args.seeds, args.partitions, **job)
    keys = [k for k in ("mrr", "hits@10", "recall@20", "ndcg@20") if k in res["dgl"][0]]
    mean = {system: {k: statistics.fmean(m[k] for m in res[system]) for k in keys} for system in ("dgl", "graphfeed")}
    result = {"source": args.source, "seeds": args.seeds, "job": job, "test": res, "mean": mean}
    result["graphfeed_minus_dgl_points"] = {k: round(100 * (mean["graphfeed"][k] - mean["dgl"][k]), 2) for k in keys}
    head = " | ".join(f"DGL {k} | graphfeed {k}" for k in keys)
    lines = [
        f"link prediction on `{args.source}` ({RELATIONS[args.source]}), {job}, {args.partitions} graphfeed partitions",
        "",
        f"| seed | {head} | DGL s | graphfeed s |",
        "|---:|" + "---:|" * (2 * len(keys) + 2),
        *(
            f"| {s} | " + " | ".join(f"{d[k]:.4f} | {f[k]:.4f}" for k in keys) + f" | {ds:.1f} | {fs:.1f} |"
            for s, d, f, ds, fs in zip(args.seeds, res["dgl"], res["graphfeed"], res["dgl_s"], res["graphfeed_s"])
        ),
        "| mean | "
        + " | ".join(f"{mean['dgl'][k]:.4f} | {mean['graphfeed'][k]:.4f}" for k in keys)
        + f" | {statistics.fmean(res['dgl_s']):.1f} | {statistics.fmean(res['graphfeed_s']):.1f} |",
        "",
        "graphfeed - DGL (points, mean of "
        f"{len(args.seeds)} seeds): "
        + ", ".join(f"{k} **{v:+.2f}**" for k, v in result["graphfeed_minus_dgl_points"].items()),
    ]
    harness.write(args, result, "\n".join(lines) + "\n", f"linkpred-{args.source}")
    return 0
