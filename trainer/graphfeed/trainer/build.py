"""The example job's model, sized for the graph a data loader reads: GraphSAGE
or an RGCN (learnable embeddings for featureless types), with ``--task link`` as the encoder of
a link predictor (:mod:`graphfeed.trainer.linkpred`)."""

from __future__ import annotations

import torch

from graphfeed.trainer.config import TrainConfig
from graphfeed.trainer.dataloader import EmbeddedDataLoader, RemoteDataLoader
from graphfeed.trainer.hetero_models import RGCN, input_features
from graphfeed.trainer.linkpred.task import link_model
from graphfeed.trainer.models import GraphSAGE

__all__ = ["encoder", "example_model", "predict"]


def example_model(
    cfg: TrainConfig, loader: RemoteDataLoader | EmbeddedDataLoader, embeddings: dict | None = None
) -> torch.nn.Module:
    """The example model ``cfg.model`` sized for the graph ``loader`` reads; ``embeddings``:
    modules for featureless types held elsewhere (the graph-stores)."""
    enc = encoder(cfg, loader, embeddings)
    return link_model(enc, cfg.scorer, cfg.hidden, loader.seed_etype) if cfg.task == "link" else enc


def encoder(
    cfg: TrainConfig, loader: RemoteDataLoader | EmbeddedDataLoader, embeddings: dict | None
) -> GraphSAGE | RGCN:
    """GraphSAGE or an RGCN; with ``--task link`` its last layer is the ``hidden``-wide embedding
    the scorer reads, else the classes' logits."""
    depth, classes = len(cfg.fanouts), cfg.hidden if cfg.task == "link" else loader.num_classes
    if cfg.model == "sage":
        if loader.schema is not None and loader.schema.is_hetero:
            raise ValueError("the graph has several node or edge types: train it with --model rgcn")
        return GraphSAGE(int(torch.tensor(loader.feature_shape).prod()), cfg.hidden, classes, depth, cfg.dropout)
    schema = loader.schema
    if schema is None:
        raise ValueError("the data loader does not know the graph's node and edge types")
    shapes = loader.typed_feature_shapes if schema.is_hetero else {schema.ntypes[0]: loader.feature_shape}
    unknown = set(cfg.featureless_types) - set(schema.ntypes)
    if unknown:
        raise ValueError(f"featureless_types {sorted(unknown)} are not node types of the graph {schema.ntypes}")
    widths = {t: int(torch.tensor(shape).prod()) for t, shape in shapes.items() if t not in cfg.featureless_types}
    num_nodes = {t: schema.num_nodes(t) for t in schema.ntypes}
    return RGCN(schema.etypes, widths, num_nodes, cfg.hidden, classes, depth, cfg.dropout, embeddings=embeddings)


def predict(model: torch.nn.Module, output_nodes: object, blocks: list) -> tuple[torch.Tensor, torch.Tensor]:
    """``(logits, labels)`` of a minibatch's output nodes: GraphSAGE on the features, or an RGCN
    over every node type of the seeds that has labels (their logits and labels concatenated)."""
    if not isinstance(output_nodes, dict):
        return model(blocks, blocks[0].srcdata["feat"]), blocks[-1].dstdata["label"]
    logits = model(blocks, input_features(blocks[0], "feat"))
    last = blocks[-1]
    types = [t for t in sorted(output_nodes) if "label" in last.dstnodes[t].data]
    return (
        torch.cat([logits[t] for t in types]),
        torch.cat([last.dstnodes[t].data["label"].long() for t in types]),
    )
