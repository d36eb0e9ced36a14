"""The ``graphfeed`` command: ingest, serve <service>, train, demo. ``--help`` on each."""

from __future__ import annotations

import argparse
import importlib
import logging
import os
import sys
from pathlib import Path

from graphfeed.common.config import add_settings_arguments, settings_from_args

# service name -> (settings class, module with main(settings))
SERVICES = {
    "graph-store": ("graphfeed.graph_store.config:GraphStoreSettings", "graphfeed.graph_store.server"),
    "sampler": ("graphfeed.sampler.config:SamplerSettings", "graphfeed.sampler.server"),
    "loader": ("graphfeed.loader.config:LoaderSettings", "graphfeed.loader.server"),
}
SERVICE_HELP = {
    "graph-store": "serve one partition: topology, node data, one-hop sampling",
    "sampler": "multi-hop sampling across graph-stores into DGL blocks",
    "loader": "epoch plans, look-ahead sampling, feature cache, minibatch stream",
}


def _load(ref: str):  # noqa: ANN202
    module, _, attr = ref.partition(":")
    return getattr(importlib.import_module(module), attr)


def _add_serve(sub: argparse._SubParsersAction) -> None:
    serve = sub.add_parser("serve", help="run one graphfeed service (gRPC + /metrics)", description="Run one graphfeed service.")
    services = serve.add_subparsers(dest="service", required=True, metavar="SERVICE")
    for name, (settings_ref, module) in SERVICES.items():
        p = services.add_parser(name, help=SERVICE_HELP[name], description=f"{SERVICE_HELP[name]}. Flags override GRAPHFEED_* env vars.")
        cls = _load(settings_ref)
        add_settings_arguments(p, cls)

        def run(args: argparse.Namespace, cls=cls, module=module) -> int:
            settings = settings_from_args(cls, args)
            importlib.import_module(module).main(settings)
            return 0

        p.set_defaults(func=run)


def _add_train(sub: argparse._SubParsersAction) -> None:
    p = sub.add_parser("train", help="example GraphSAGE job through RemoteDataLoader", description="Train GraphSAGE from a graphfeed loader; checkpoints and resumes.")
    src = p.add_mutually_exclusive_group(required=True)
    src.add_argument("--loader", help="host:port of the loader service")
    src.add_argument(
        "--graph-stores", type=lambda v: [a for a in v.split(",") if a],
        help="comma-separated host:port of every graph-store: run the loader inside this process "
        "(needs --sampler; with --device cuda, features are gathered on the GPU)",
    )  # fmt: skip
    p.add_argument("--sampler", default="", help="host:port of the sampler service (with --graph-stores)")
    p.add_argument("--cache-policy", default="static_degree", help="embedded loader's cache policy (default static_degree)")
    p.add_argument("--cache-bytes", type=int, default=64 << 20, help="embedded loader's host cache bytes (default 64 MiB)")
    p.add_argument(
        "--gpu-cache-bytes", type=int, default=-1,
        help="embedded loader's GPU cache tier bytes; 0 for none (default: a quarter of the GPU's free memory with a CUDA --device)",
    )  # fmt: skip
    p.add_argument("--epochs", type=int, default=10, help="epochs to train (default 10)")
    p.add_argument("--batch-size", type=int, default=256, help="seeds per minibatch (default 256)")
    p.add_argument("--fanouts", type=int, nargs="+", default=[10, 10], help="neighbors per layer, input layer first (default 10 10)")
    p.add_argument("--hidden", type=int, default=64, help="hidden units (default 64)")
    p.add_argument("--lr", type=float, default=0.01, help="Adam learning rate (default 0.01)")
    p.add_argument("--seed", type=int, default=0, help="job seed (default 0)")
    p.add_argument("--rank", type=int, default=None, help="trainer rank (default: $JOB_COMPLETION_INDEX or 0)")
    p.add_argument("--world-size", type=int, default=1, help="number of trainers (default 1)")
    p.add_argument("--job-id", default="graphsage", help="job name (default graphsage)")
    p.add_argument("--checkpoint", type=Path, default=None, help="checkpoint file; resumed from when it exists")
    p.add_argument("--checkpoint-every", type=int, default=1, help="steps between checkpoints (default 1)")
    p.add_argument("--device", default="cpu", help="torch device for the model and minibatches, e.g. cuda:0 (default cpu)")
    p.add_argument(
        "--shm-dir", default="/dev/shm",
        help="directory offered to the loader for minibatch tensors when it shares it (same host, same mount); "
        '"" for inline gRPC only (default /dev/shm)',
    )  # fmt: skip
    p.add_argument("--stop-after-steps", type=int, default=None, help=argparse.SUPPRESS)
    p.set_defaults(func=_run_train)


def _run_train(args: argparse.Namespace) -> int:
    from graphfeed.trainer.train import TrainConfig, Trainer, format_report

    rank = args.rank if args.rank is not None else int(os.environ.get("JOB_COMPLETION_INDEX", "0"))
    if args.graph_stores is not None and not args.sampler:
        raise SystemExit("graphfeed train: --graph-stores needs --sampler")
    cfg = TrainConfig(
        loader_address=args.loader or "",
        graph_stores=args.graph_stores or [],
        sampler_address=args.sampler,
        cache_policy=args.cache_policy,
        cache_bytes=args.cache_bytes,
        gpu_cache_bytes=args.gpu_cache_bytes,
        epochs=args.epochs,
        batch_size=args.batch_size,
        fanouts=args.fanouts,
        hidden=args.hidden,
        lr=args.lr,
        seed=args.seed,
        rank=rank,
        world_size=args.world_size,
        job_id=args.job_id,
        checkpoint=args.checkpoint,
        checkpoint_every=args.checkpoint_every,
        device=args.device,
        shm_dir=args.shm_dir,
        stop_after_steps=args.stop_after_steps,
    )
    if cfg.world_size > 1:
        import torch.distributed as dist

        dist.init_process_group("gloo", rank=rank, world_size=cfg.world_size)
    trainer = Trainer(cfg)
    try:
        trainer.fit(on_epoch=lambda r: print(format_report(r), flush=True))
        if args.stop_after_steps is None:
            print(f"test_acc {trainer.evaluate('test'):.4f}", flush=True)
    finally:
        trainer.close()
    return 0


def build_parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(prog="graphfeed", description="graphfeed: gRPC services that feed GNN training.")
    sub = parser.add_subparsers(dest="command", required=True, metavar="COMMAND")
    from graphfeed.bench.cli import register as register_bench
    from graphfeed.demo import register as register_demo
    from graphfeed.ingest.cli import register as register_ingest

    register_ingest(sub)
    _add_serve(sub)
    _add_train(sub)
    register_demo(sub)
    register_bench(sub)
    return parser


def main(argv: list[str] | None = None) -> int:
    args = build_parser().parse_args(argv)
    if not logging.getLogger().handlers:
        logging.basicConfig(level=logging.INFO, format="%(asctime)s %(levelname)s %(name)s: %(message)s", stream=sys.stderr)
    return int(args.func(args) or 0)


if __name__ == "__main__":
    sys.exit(main())
