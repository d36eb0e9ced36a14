"""``graphfeed bench inference``: every node's embedding through graphfeed vs in-process DGL.

All-node inference as a user runs it after training a link predictor (DGL's ``inference``
pattern: one layer at a time over every node with one-layer full-neighbour blocks): the same
GraphSAGE encoder (seeded weights, ``--hidden`` wide, ``--layers`` layers) over the same graph,

* **dgl**: :func:`graphfeed.trainer.linkpred.inference.dgl_inference` on the whole graph in
  this process (``MultiLayerFullNeighborSampler(1)`` + ``DataLoader``, features in memory);
* **graphfeed**: :func:`graphfeed.trainer.linkpred.task.service_embeddings`: the loader streams
  all nodes (split ``"*"``) from graph-store and sampler processes (``--transport``), a
  ``RemoteDataLoader`` in this process, as ``graphfeed train --task link --embeddings-out`` does.

Reports both times (graphfeed's twice: its graph-stores' first read of their rows, then warm;
DGL's features are in memory before it is timed), their ratio, and the largest difference between the two results (they
compute the same function: float32 rounding apart, they must agree).
"""

from __future__ import annotations

import argparse
import time
from typing import Any

from graphfeed.bench import harness, systems


def register(sub: argparse._SubParsersAction) -> None:
    harness.register(
        sub,
        "inference",
        __doc__,
        "all-node layer-wise inference through graphfeed vs in-process DGL",
        add_arguments,
        run,
        batch_size=4096,
        **{k: v for k, v in harness.DATASET.items() if k != "batch_size"},
    )


def add_arguments(p: argparse.ArgumentParser) -> None:
    p.add_argument("--hidden", type=int, default=64, help="encoder width (default 64)")
    p.add_argument("--layers", type=int, default=2, help="encoder layers (default 2)")
    p.add_argument("--transport", choices=tuple(systems.LAYOUTS), default="kubernetes", help="(default kubernetes)")
    p.add_argument("--edges", default="", help="use the preset's dataset ingested with this edge split (default none)")


def run(args: argparse.Namespace) -> int:
    import torch

    from graphfeed.cluster import LOOPBACK
    from graphfeed.trainer.dataloader import RemoteDataLoader
    from graphfeed.trainer.linkpred.inference import dgl_inference
    from graphfeed.trainer.linkpred.task import service_embeddings
    from graphfeed.trainer.models import GraphSAGE

    root = harness.ensure_dataset(args)
    g, feat, _ = harness.load_global(root)
    g.ndata["feat"] = feat
    torch.manual_seed(0)
    encoder = GraphSAGE(feat.shape[1], args.hidden, args.hidden, args.layers, dropout=0.0)
    t0 = time.perf_counter()
    want = dgl_inference(encoder, g, batch_size=args.batch_size)
    dgl_s = time.perf_counter() - t0
    del g
    with systems.Cluster.start(root, args.workdir.resolve() / "logs", (), args.transport, LOOPBACK) as cluster:

        def make(split: str, fanouts: list[int], batch_size: int, **job: Any) -> RemoteDataLoader:
            address = cluster.loader.address  # type: ignore[union-attr]
            return RemoteDataLoader(
                address,
                split,
                shm_dir=cluster.shm_dir,
                fanouts=fanouts,
                batch_size=batch_size,
                shuffle=False,
                label_name="",
                job_id="inference",
                **job,
            )

        t0 = time.perf_counter()
        got = service_embeddings(make, encoder, None, args.batch_size)
        gf_cold_s = time.perf_counter() - t0  # the graph-stores' first read of their rows (page cache cold)
        t0 = time.perf_counter()
        got = service_embeddings(make, encoder, None, args.batch_size)
        gf_s = time.perf_counter() - t0
    diff = float((got - want).abs().max())
    result = {
        "preset": args.preset,
        "transport": args.transport,
        "nodes": int(want.shape[0]),
        "layers": args.layers,
        "hidden": args.hidden,
        "batch_size": args.batch_size,
        "dgl_s": dgl_s,
        "graphfeed_s": gf_s,
        "graphfeed_first_run_s": gf_cold_s,
        "graphfeed_over_dgl_time": gf_s / dgl_s,
        "max_abs_diff": diff,
    }
    title = (
        f"all-node inference, preset `{args.preset}` ({result['nodes']:,} nodes), GraphSAGE {args.layers} layers x "
        f"{args.hidden}, {args.batch_size} nodes per block, graphfeed transport {args.transport}"
    )
    lines = [
        title,
        "",
        "| system | seconds |",
        "|---|---:|",
        f"| DGL in process (dgl_inference) | {dgl_s:.1f} |",
        f"| graphfeed through the services (service_embeddings), first run | {gf_cold_s:.1f} |",
        f"| graphfeed through the services, second run | {gf_s:.1f} |",
        "",
        (
            f"graphfeed / DGL time: **{gf_s / dgl_s:.2f}x** (first run {gf_cold_s / dgl_s:.2f}x: DGL's features were "
            f"loaded into memory before its timing); largest difference of the embeddings: {diff:.2e}"
        ),
    ]
    harness.write(args, result, "\n".join(lines) + "\n", f"inference-{args.preset}")
    return 0
