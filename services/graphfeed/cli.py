"""The ``graphfeed`` command: ingest, serve <service>, train, demo, pack, append, bench. ``--help`` on each."""

from __future__ import annotations

import argparse
import importlib
import logging
import sys

from graphfeed.common.config import ServiceSettings, add_settings_argument, add_settings_arguments, settings_from_args

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


def _load(ref: str) -> type[ServiceSettings]:
    module, _, attr = ref.partition(":")
    cls = getattr(importlib.import_module(module), attr)
    if not (isinstance(cls, type) and issubclass(cls, ServiceSettings)):
        raise TypeError(f"{ref} is not a ServiceSettings class")
    return cls


def _add_serve(sub: argparse._SubParsersAction) -> None:
    serve = sub.add_parser(
        "serve", help="run one graphfeed service (gRPC + /metrics)", description="Run one graphfeed service."
    )
    services = serve.add_subparsers(dest="service", required=True, metavar="SERVICE")
    for name, (settings_ref, module) in SERVICES.items():
        p = services.add_parser(
            name, help=SERVICE_HELP[name], description=f"{SERVICE_HELP[name]}. Flags override GRAPHFEED_* env vars."
        )
        cls = _load(settings_ref)
        add_settings_arguments(p, cls)

        def run(args: argparse.Namespace, cls: type[ServiceSettings] = cls, module: str = module) -> int:
            settings = settings_from_args(cls, args)
            importlib.import_module(module).main(settings)
            return 0

        p.set_defaults(func=run)


def _add_train(sub: argparse._SubParsersAction) -> None:
    from graphfeed.trainer.config import TrainConfig  # noqa: PLC0415 - imported with the parser, not with graphfeed

    p = sub.add_parser(
        "train",
        help="example GraphSAGE job through RemoteDataLoader",
        description="Train GraphSAGE from a graphfeed loader; checkpoints and resumes. "
        "Flags override GRAPHFEED_TRAIN_* env vars.",
    )
    # --loader, or --graph-stores with --sampler (an embedded loader); both: a loader service plus
    # the graph-stores for --embeddings server. Checked in _run_train.
    add_settings_argument(p, TrainConfig, "loader_address", flag="--loader")
    add_settings_argument(p, TrainConfig, "graph_stores")
    add_settings_argument(p, TrainConfig, "sampler_address", flag="--sampler")
    # weight_decay and dropout have no flag (as before): the library's to set.
    apart = {
        "loader_address",
        "graph_stores",
        "sampler_address",
        "stop_after_steps",
        "weight_decay",
        "dropout",
    }
    add_settings_arguments(p, TrainConfig, skip=apart)
    add_settings_argument(p, TrainConfig, "stop_after_steps", hidden=True)
    p.set_defaults(func=_run_train)


def _add_train_temporal(sub: argparse._SubParsersAction) -> None:
    """``graphfeed train-temporal``: the TGN job (``python -m graphfeed.trainer.temporal``)."""
    from graphfeed.trainer.temporal.__main__ import build_parser, run  # noqa: PLC0415 - imported with the parser

    p = sub.add_parser(
        "train-temporal",
        parents=[build_parser(add_help=False)],
        description=build_parser().description,
        help="train a TGN on a temporal graph, in process or through graph-stores (--graph-stores)",
    )
    p.set_defaults(func=run)


def _run_train(args: argparse.Namespace) -> int:
    from graphfeed.common.security import ClientSecurity, configure_clients  # noqa: PLC0415
    from graphfeed.trainer.config import TrainConfig  # noqa: PLC0415 - imported with the parser, not with graphfeed
    from graphfeed.trainer.connect import PeerTimeout  # noqa: PLC0415 - imported with the command
    from graphfeed.trainer.metrics import TrainerMetrics  # noqa: PLC0415
    from graphfeed.trainer.train import Trainer, format_report, init_distributed  # noqa: PLC0415 - torch and DGL, for `train` only

    if args.loader_address is None and args.graph_stores is None:
        raise SystemExit("graphfeed train: give --loader, or --graph-stores and --sampler")
    if args.loader_address is None and not args.sampler_address:
        raise SystemExit("graphfeed train: --graph-stores needs --sampler (or --loader)")
    cfg = settings_from_args(TrainConfig, args)
    if args.loader_address is not None and args.graph_stores is not None and cfg.embeddings != "server":
        raise SystemExit(
            "graphfeed train: --loader with --graph-stores is for --embeddings server (the graph-stores holding the "
            "embedding tables); otherwise give one of them"
        )
    configure_clients(ClientSecurity.of(cfg.tls_ca, cfg.tls_client_cert, cfg.tls_client_key, cfg.token_file))
    metrics = TrainerMetrics.create(cfg.job_id, cfg.rank)
    if cfg.metrics_port:  # up while the trainer waits for its peers, too
        try:
            metrics.serve(cfg.metrics_host, cfg.metrics_port + cfg.local_rank)
        except OSError as exc:  # e.g. several trainers on one host: training matters more than its metrics
            logging.getLogger("graphfeed.trainer").warning(
                "no /metrics: port %d: %s", cfg.metrics_port + cfg.local_rank, exc
            )
    init_distributed(cfg)
    try:
        trainer = Trainer(cfg, metrics)
    except PeerTimeout as exc:  # the peers never came up: one line, no traceback
        print(f"graphfeed train: {exc}", file=sys.stderr, flush=True)
        return 2
    try:
        trainer.fit(on_epoch=lambda r: print(format_report(r), flush=True))
        if cfg.stop_after_steps is None and cfg.task == "link":
            # one inference pass serves the test metrics and the written embeddings
            h = trainer.node_embeddings(cfg.embeddings_out)
            test = trainer.link_metrics("test", h)
            print("test " + "  ".join(f"{k} {v:.4f}" for k, v in test.items()), flush=True)
            if cfg.embeddings_out is not None:
                print(f"embeddings of every node in {cfg.embeddings_out}", flush=True)
        elif cfg.stop_after_steps is None:
            print(f"test_acc {trainer.evaluate('test'):.4f}", flush=True)
    finally:
        trainer.close()
    return 0


def build_parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(prog="graphfeed", description="graphfeed: gRPC services that feed GNN training.")
    sub = parser.add_subparsers(dest="command", required=True, metavar="COMMAND")
    # Each command's module is imported when the parser is built, not when graphfeed is.
    from graphfeed.bench.cli import register as register_bench  # noqa: PLC0415
    from graphfeed.demo import register as register_demo  # noqa: PLC0415
    from graphfeed.graph_store.temporal.replay import register as register_append  # noqa: PLC0415
    from graphfeed.ingest.cli import register as register_ingest  # noqa: PLC0415
    from graphfeed.pack.cli import register as register_pack  # noqa: PLC0415

    register_ingest(sub)
    _add_serve(sub)
    _add_train(sub)
    register_demo(sub)
    register_pack(sub)
    register_append(sub)
    _add_train_temporal(sub)
    register_bench(sub)
    return parser


def main(argv: list[str] | None = None) -> int:
    args = build_parser().parse_args(argv)
    if not logging.getLogger().handlers:
        logging.basicConfig(
            level=logging.INFO, format="%(asctime)s %(levelname)s %(name)s: %(message)s", stream=sys.stderr
        )
    return int(args.func(args) or 0)


if __name__ == "__main__":
    sys.exit(main())
