"""Link predictors: an encoder that embeds nodes over DGL blocks and a scorer of node pairs.

The encoders are the node-classification models with no class head (their last layer is
``hidden`` wide): :class:`~graphfeed.trainer.models.GraphSAGE` for a homogeneous graph and
:class:`~graphfeed.trainer.hetero_models.RGCN` for a heterograph (learnable embeddings for
featureless types). Both have ``layer(i, block, h)``, which :mod:`.inference` repeats over all
nodes. A minibatch is what ``dgl.dataloading.as_edge_prediction_sampler`` gives: ``(input_nodes,
pair_graph, neg_pair_graph, blocks)``; the pair graphs' nodes are the last block's dst nodes,
so the encoder's output embeds exactly them. The losses are those of DGL's link-prediction
examples (``examples/pytorch/graphsage/link_pred.py``, ``examples/pytorch/ogb/ogbl-*``).
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import TypeAlias

import dgl
import dgl.function as fn
import numpy as np
import torch
import torch.nn.functional as F
from torch import nn

from graphfeed.common.errors import InvalidArgument
from graphfeed.common.schema import CanonicalEtype
from graphfeed.ingest.graph import GraphData
from graphfeed.trainer.hetero_models import RGCN, input_features
from graphfeed.trainer.linkpred.config import LinkPredConfig
from graphfeed.trainer.models import GraphSAGE

__all__ = [
    "LOSSES",
    "DotScorer",
    "Embeddings",
    "LinkPredictor",
    "MLPScorer",
    "bce_loss",
    "build_link_predictor",
    "margin_loss",
]

Embeddings: TypeAlias = torch.Tensor | dict[str, torch.Tensor]  # [N, hidden], or that per node type


class DotScorer(nn.Module):
    """Score of ``u -> v``: the dot product of their embeddings."""

    def forward(self, pair_graph: dgl.DGLGraph, h: Embeddings, etype: CanonicalEtype | None = None) -> torch.Tensor:
        """Scores [E] of ``pair_graph``'s edges (of ``etype`` in a heterograph); ``h`` embeds its nodes."""
        with pair_graph.local_scope():
            _set_node_data(pair_graph, h)
            pair_graph.apply_edges(fn.u_dot_v("h", "h", "score"), etype=etype)
            return _edge_data(pair_graph, etype)[:, 0]

    def pairs(self, h_u: torch.Tensor, h_v: torch.Tensor) -> torch.Tensor:
        """Scores of the pairs ``(h_u[i], h_v[i])`` (any leading shape, broadcast)."""
        return (h_u * h_v).sum(-1)


class MLPScorer(nn.Module):
    """Score of ``u -> v``: an MLP on ``h_u * h_v`` (``combine="hadamard"``, as DGL's ogbl
    examples) or on ``[h_u, h_v]`` (``"cat"``, which can tell the direction apart).

    Args:
        hidden: width of the embeddings and of the MLP's hidden layers.
        num_layers: linear layers (ReLU between them), the last one to a single logit.
        combine: ``"hadamard"`` (default) or ``"cat"``.
    """

    def __init__(self, hidden: int, num_layers: int = 3, combine: str = "hadamard") -> None:
        super().__init__()
        if combine not in ("hadamard", "cat"):
            raise InvalidArgument(f"combine must be 'hadamard' or 'cat', not {combine!r}")
        self.combine = combine
        dims = [hidden * (2 if combine == "cat" else 1)] + [hidden] * (num_layers - 1) + [1]
        layers: list[nn.Module] = []
        for i in range(num_layers):
            layers += [nn.Linear(dims[i], dims[i + 1]), nn.ReLU()]
        self.mlp = nn.Sequential(*layers[:-1])  # no ReLU on the logit

    def forward(self, pair_graph: dgl.DGLGraph, h: Embeddings, etype: CanonicalEtype | None = None) -> torch.Tensor:
        """Scores [E] of ``pair_graph``'s edges (of ``etype`` in a heterograph); ``h`` embeds its nodes."""
        with pair_graph.local_scope():
            _set_node_data(pair_graph, h)
            pair_graph.apply_edges(lambda edges: {"score": self.pairs(edges.src["h"], edges.dst["h"])}, etype=etype)
            return _edge_data(pair_graph, etype)

    def pairs(self, h_u: torch.Tensor, h_v: torch.Tensor) -> torch.Tensor:
        """Scores of the pairs ``(h_u[i], h_v[i])`` (any leading shape, broadcast)."""
        if self.combine == "cat":
            h_u, h_v = torch.broadcast_tensors(h_u, h_v)
            return self.mlp(torch.cat([h_u, h_v], -1))[..., 0]
        return self.mlp(h_u * h_v)[..., 0]


def _set_node_data(g: dgl.DGLGraph, h: Embeddings) -> None:
    if isinstance(h, Mapping):
        for nt, x in h.items():
            if nt in g.ntypes:
                g.nodes[nt].data["h"] = x
    else:
        g.ndata["h"] = h


def _edge_data(g: dgl.DGLGraph, etype: CanonicalEtype | None) -> torch.Tensor:
    return g.edata["score"] if etype is None else g.edges[etype].data["score"]


def bce_loss(pos: torch.Tensor, neg: torch.Tensor) -> torch.Tensor:
    """Binary cross-entropy of logits: positives labelled 1, negatives 0, all weighted alike."""
    logits = torch.cat([pos, neg.reshape(-1)])
    labels = torch.cat([torch.ones_like(pos), torch.zeros_like(neg.reshape(-1))])
    return F.binary_cross_entropy_with_logits(logits, labels)


def margin_loss(pos: torch.Tensor, neg: torch.Tensor, margin: float = 1.0) -> torch.Tensor:
    """Mean hinge ``max(0, margin - pos + neg)`` of each negative against its positive; ``neg``
    holds ``k`` negatives per positive in a row (``[n * k]`` or ``[n, k]``), as DGL's uniform
    negative sampler lays them out."""
    return (margin - pos[:, None] + neg.reshape(len(pos), -1)).clamp(min=0).mean()


LOSSES = {"bce": bce_loss, "margin": margin_loss}  # LinkPredConfig.loss -> the loss


class LinkPredictor(nn.Module):
    """An encoder (GraphSAGE or RGCN, ``hidden`` wide) and a scorer of pairs.

    Args:
        encoder: embeds the last block's dst nodes from ``(blocks, inputs)``.
        scorer: a :class:`DotScorer` or :class:`MLPScorer`.
        etype: the predicted relation in a heterograph; None in a homogeneous graph.
    """

    def __init__(self, encoder: GraphSAGE | RGCN, scorer: DotScorer | MLPScorer, etype: CanonicalEtype | None) -> None:
        super().__init__()
        self.encoder = encoder
        self.scorer = scorer
        self.etype = tuple(etype) if etype is not None else None

    def inputs(self, blocks: list) -> Embeddings:
        """The encoder's input of a minibatch: ``feat`` of the first block's src nodes (per type)."""
        if isinstance(self.encoder, RGCN):
            return input_features(blocks[0], "feat")
        return blocks[0].srcdata["feat"]

    def forward(
        self, blocks: list, pair_graph: dgl.DGLGraph, neg_pair_graph: dgl.DGLGraph
    ) -> tuple[torch.Tensor, torch.Tensor]:
        """Scores (logits) of the positive and the negative pairs of a minibatch."""
        h = self.encoder(blocks, self.inputs(blocks))
        return self.scorer(pair_graph, h, self.etype), self.scorer(neg_pair_graph, h, self.etype)


def build_link_predictor(
    g: GraphData,
    cfg: LinkPredConfig,
    etype: CanonicalEtype | None = None,
    embeddings: dict[str, nn.Module] | None = None,
) -> LinkPredictor:
    """The link predictor of ``g``: GraphSAGE over its ``"feat"`` table when it is homogeneous,
    else an RGCN over every relation (types with a ``"<ntype>/feat"`` table project it, the
    others embed: ``embeddings``' modules, else an ``nn.Embedding``), then ``cfg.scorer``.

    Args:
        g: the graph (its held-out edges already removed).
        cfg: ``hidden``, ``num_layers`` (``len(fanouts)``), ``dropout`` and ``scorer`` are read.
        etype: the predicted relation (needed in a heterograph).
        embeddings: as :class:`~graphfeed.trainer.hetero_models.RGCN`'s.
    """
    encoder: GraphSAGE | RGCN
    if not g.is_hetero:
        if "feat" not in g.node_data:
            raise InvalidArgument(f"{g.name}: a homogeneous graph needs a 'feat' table for GraphSAGE")
        width = int(np.prod(g.node_data["feat"].shape[1:]))
        encoder = GraphSAGE(width, cfg.hidden, cfg.hidden, cfg.num_layers, cfg.dropout)
        etype = None
    else:
        if etype is None:
            raise InvalidArgument(f"{g.name}: name the predicted relation of a heterograph")
        in_feats = {g.table_ntype(k): int(np.prod(t.shape[1:])) for k, t in g.node_data.items() if k.endswith("/feat")}
        num_nodes = dict(zip(g.ntypes, (int(n) for n in g.node_counts())))
        encoder = RGCN(
            g.etypes, in_feats, num_nodes, cfg.hidden, cfg.hidden, cfg.num_layers, cfg.dropout, embeddings=embeddings
        )
    scorer = DotScorer() if cfg.scorer == "dot" else MLPScorer(cfg.hidden)
    return LinkPredictor(encoder, scorer, etype)
