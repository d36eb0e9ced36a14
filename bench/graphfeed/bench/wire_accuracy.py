"""Accuracy cost of a reduced-precision feature wire (loader.proto's ``JobSpec.feature_wire_dtype``)
on a synthetic preset.

Starts a local cluster over the preset (a graph-store process per partition, a sampler and a
loader; every tensor inline on gRPC) and trains the example GraphSAGE job through it once per
wire dtype and seed, with the same hyper-parameters; reports test accuracy per run and the mean
per wire dtype, and the difference from the stored type's mean. The Cora side of the same
question is ``tests/integration/test_fidelity.py``; bytes per minibatch are
``graphfeed bench throughput --transport grpc --feature-wire-dtype ...``.

    python -m graphfeed.bench.wire_accuracy --preset large --epochs 3 --seeds 0 1 2
"""

from __future__ import annotations

import argparse
import logging
import statistics
import sys
import time
from pathlib import Path
from typing import Any

from graphfeed.bench import harness, systems

log = logging.getLogger(__name__)
STORED = "stored"  # the command line's name for "" (the stored dtype)


def register(sub: argparse._SubParsersAction) -> None:
    """Adds ``wire-accuracy`` to ``graphfeed bench``."""
    harness.register(
        sub, "wire-accuracy", __doc__, "accuracy cost of a float16/bfloat16 feature wire", add_arguments, run, **COMMON
    )


COMMON = {"preset": "large", "workdir": Path("runs/bench"), "batch_size": 1024, "fanouts": (10, 10)}


def add_arguments(p: argparse.ArgumentParser) -> None:
    p.add_argument("--epochs", type=int, default=3, help="training epochs per run (default 3)")
    p.add_argument(
        "--seeds", type=int, nargs="+", default=[0, 1, 2], help="job seeds; the mean is reported (default 0 1 2)"
    )
    p.add_argument(
        "--eval-fanouts", type=int, nargs="+", default=[10, 10], help="fanouts when evaluating (default 10 10)"
    )
    p.add_argument(
        "--wire-dtypes",
        nargs="+",
        choices=(STORED, "float16", "bfloat16"),
        default=[STORED, "float16", "bfloat16"],
        help="feature wire dtypes to train with (default: all three)",
    )


def train_once(address: str, args: argparse.Namespace, seed: int, wire: str) -> tuple[float, float]:
    """Test accuracy and training seconds of one run."""
    from graphfeed.trainer.train import TrainConfig, Trainer

    cfg = TrainConfig(
        loader_address=address,
        epochs=args.epochs,
        batch_size=args.batch_size,
        fanouts=list(args.fanouts),
        eval_fanouts=list(args.eval_fanouts),
        seed=seed,
        job_id=f"wire-{wire}-{seed}",
        shm_dir="",
        feature_wire_dtype="" if wire == STORED else wire,
    )
    trainer = Trainer(cfg)
    try:
        t0 = time.perf_counter()
        trainer.fit()
        seconds = time.perf_counter() - t0
        return trainer.evaluate("test"), seconds
    finally:
        trainer.close()


def run(args: argparse.Namespace) -> int:
    root = harness.ensure_dataset(args)
    runs: dict[str, list[dict[str, float]]] = {}
    with systems.Cluster.start(root, args.workdir.resolve() / "logs", ["--cache-policy", "none"], "grpc") as cluster:
        assert cluster.loader is not None
        for wire in args.wire_dtypes:
            for seed in args.seeds:
                acc, seconds = train_once(cluster.loader.address, args, seed, wire)
                runs.setdefault(wire, []).append({"seed": seed, "test_acc": acc, "train_seconds": seconds})
                log.info("%s seed %d: test acc %.4f (%.0f s)", wire, seed, acc, seconds)
    result = summarize(runs, args)
    harness.write(args, result, markdown(result), f"wire-accuracy-{args.preset}")
    return 0


def summarize(runs: dict[str, list[dict[str, float]]], args: argparse.Namespace) -> dict[str, Any]:
    means = {wire: statistics.mean(r["test_acc"] for r in rs) for wire, rs in runs.items()}
    base = means.get(STORED)
    return {
        "preset": harness.dataset_name(args),
        "epochs": args.epochs,
        "batch_size": args.batch_size,
        "fanouts": list(args.fanouts),
        "eval_fanouts": list(args.eval_fanouts),
        "wire_dtypes": {
            wire: {"runs": rs, "mean_test_acc": means[wire], "vs_stored": None if base is None else means[wire] - base}
            for wire, rs in runs.items()
        },
    }


def markdown(result: dict[str, Any]) -> str:
    head = (
        f"preset `{result['preset']}`, {result['epochs']} epochs, batch {result['batch_size']}, "
        f"fanouts {result['fanouts']} (eval {result['eval_fanouts']}); test accuracy per feature wire dtype"
    )
    lines = [
        head,
        "",
        "| feature wire dtype | test acc per seed | mean | vs stored |",
        "|---|---|---:|---:|",
    ]
    for wire, w in result["wire_dtypes"].items():
        accs = ", ".join(f"{r['test_acc']:.4f}" for r in w["runs"])
        delta = "" if w["vs_stored"] is None else f"{w['vs_stored']:+.4f}"
        lines.append(f"| {wire} | {accs} | {w['mean_test_acc']:.4f} | {delta} |")
    return "\n".join(lines) + "\n"


def main(argv: list[str] | None = None) -> int:
    return harness.main(__doc__, add_arguments, run, argv, **COMMON)


if __name__ == "__main__":
    sys.exit(main())
