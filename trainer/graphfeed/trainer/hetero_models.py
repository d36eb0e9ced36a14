"""An RGCN for heterographs over DGL blocks, as DGL's ``examples/pytorch/rgcn-hetero`` and the
ogbn-mag RGCN build it: one ``GraphConv`` per relation summed by ``HeteroGraphConv``, plus a
self-loop, per layer; types with features projected by a ``Linear``, featureless types
embedded by a learnable ``nn.Embedding`` indexed by type-wise node ids.

The model reads only what both ``dgl.dataloading.DataLoader`` (with prefetched features) and
graphfeed's :func:`~graphfeed.trainer.hetero.hetero_dgl_blocks` put in blocks: the input
features ``blocks[0].srcnodes[nt].data[name]`` and type-wise ids ``blocks[0].srcnodes[nt].data[dgl.NID]``.

Relations are keyed by canonical edge type, so two relations with one name and different
endpoints (``("a", "cites", "b")`` and ``("b", "cites", "a")``) are distinct: DGL 2.1's
``HeteroGraphConv`` accepts canonical keys (it stores them as ``str(tuple)``). Type and
relation names must not contain ``.`` (torch module names cannot).
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence

import dgl
import dgl.nn as dglnn
import torch
import torch.nn.functional as F
from torch import nn

from graphfeed.common.schema import CanonicalEtype

__all__ = ["RGCN", "input_features", "rgcn_optimizers"]


def input_features(block: dgl.DGLGraph, name: str) -> dict[str, torch.Tensor]:
    """``{ntype: features}`` of the src node types of ``block`` that have data ``name``."""
    return {nt: block.srcnodes[nt].data[name] for nt in block.srctypes if name in block.srcnodes[nt].data}


class RGCN(nn.Module):
    """L-layer RGCN over a list of heterogeneous DGL blocks, input layer first.

    Args:
        etypes: the canonical edge types (every relation a block may have).
        in_feats: per node type with features, their width; the other node types in
            ``num_nodes`` are featureless and get a learnable embedding of ``embed_dim``.
        num_nodes: nodes per node type (the embedding tables' sizes).
        hidden, num_classes, num_layers, dropout: as :class:`~graphfeed.trainer.models.GraphSAGE`.
        embed_dim: width of the embeddings and the projected features (default ``hidden``).
        embeddings: modules that embed some featureless types instead of a local
            ``nn.Embedding`` (e.g. :class:`~graphfeed.trainer.remote_embedding.RemoteEmbedding`:
            the table lives in the graph-stores); called with type-wise ids like it.
    """

    def __init__(
        self,
        etypes: Sequence[CanonicalEtype],
        in_feats: Mapping[str, int],
        num_nodes: Mapping[str, int],
        hidden: int,
        num_classes: int,
        num_layers: int = 2,
        dropout: float = 0.5,
        embed_dim: int | None = None,
        embeddings: Mapping[str, nn.Module] | None = None,
    ) -> None:
        super().__init__()
        embed_dim = embed_dim or hidden
        self.ntypes = list(num_nodes)
        # Module names cannot hold ".": _key() maps a type name to its (unique) module key.
        self.project = nn.ModuleDict({_key(nt): nn.Linear(in_feats[nt], embed_dim) for nt in in_feats})
        given = dict(embeddings or {})
        self.embed = nn.ModuleDict(
            {
                _key(nt): given.get(nt) or nn.Embedding(n, embed_dim, sparse=True)
                for nt, n in num_nodes.items()
                if nt not in in_feats
            }
        )
        for emb in self.embed.values():
            if isinstance(emb, nn.Embedding):
                nn.init.xavier_uniform_(emb.weight)  # as RelGraphEmbed in DGL's examples
        dims = [embed_dim] + [hidden] * (num_layers - 1) + [num_classes]
        self.convs = nn.ModuleList(
            dglnn.HeteroGraphConv(
                {
                    tuple(e): dglnn.GraphConv(dims[i], dims[i + 1], norm="right", allow_zero_in_degree=True)
                    for e in etypes
                },
                aggregate="sum",
            )
            for i in range(num_layers)
        )
        self.loops = nn.ModuleList(
            nn.ModuleDict({_key(nt): nn.Linear(dims[i], dims[i + 1]) for nt in self.ntypes}) for i in range(num_layers)
        )
        self.dropout = nn.Dropout(dropout)

    def embed_inputs(self, block: dgl.DGLGraph, feats: Mapping[str, torch.Tensor]) -> dict[str, torch.Tensor]:
        """The first layer's input: projected features, or embeddings of the type-wise ids."""
        h = {}
        for nt in block.srctypes:
            if not block.num_src_nodes(nt):
                continue  # nor in any later block: each block's src nodes are a prefix of the first's
            if (x := self._embed_type(nt, feats, block.srcnodes[nt].data.get(dgl.NID))) is not None:
                h[nt] = x
        return h

    def embed_all(self, feats: Mapping[str, torch.Tensor], num_nodes: Mapping[str, int]) -> dict[str, torch.Tensor]:
        """:meth:`embed_inputs` of every node (``feats`` cover all nodes of their types): the
        first layer's input of layer-wise inference."""
        h = {}
        for nt, n in num_nodes.items():
            if (x := self._embed_type(nt, feats, torch.arange(n))) is not None:
                h[nt] = x
        return h

    def _embed_type(self, nt: str, feats: Mapping[str, torch.Tensor], ids: torch.Tensor | None) -> torch.Tensor | None:
        """Type ``nt``'s input rows: its projected features, or the embeddings of the type-wise
        ``ids`` (needed only for embedded types: blocks need not carry ids of the others)."""
        if _key(nt) in self.project:
            if nt not in feats:
                raise KeyError(f"no input features of node type {nt!r} (it has {list(feats)})")
            return self.project[_key(nt)](feats[nt].float())
        if _key(nt) in self.embed:
            if ids is None:
                raise KeyError(f"no type-wise ids (dgl.NID) of the embedded node type {nt!r}")
            return self.embed[_key(nt)](ids)
        return None

    def forward(self, blocks: list, feats: Mapping[str, torch.Tensor]) -> dict[str, torch.Tensor]:
        """Logits per dst node type of the last block; ``feats`` as :func:`input_features`."""
        h = self.embed_inputs(blocks[0], feats)
        for i, block in enumerate(blocks):
            h = self.layer(i, block, h)
        return h

    @property
    def num_layers(self) -> int:
        return len(self.convs)

    def layer(self, i: int, block: dgl.DGLGraph, h: Mapping[str, torch.Tensor]) -> dict[str, torch.Tensor]:
        """Layer ``i`` on one block, ``h`` per src node type (activation and dropout after all
        but the last): the step layer-wise inference repeats over all nodes."""
        msgs = self.convs[i](block, dict(h))
        out = {}
        for nt, x in h.items():  # a type's dst nodes are the prefix of its src nodes
            self_loop = self.loops[i][_key(nt)](x[: block.num_dst_nodes(nt)])
            out[nt] = self_loop + msgs[nt] if nt in msgs else self_loop
        return out if i == len(self.convs) - 1 else {nt: self.dropout(F.relu(x)) for nt, x in out.items()}


def _key(ntype: str) -> str:
    return ntype.replace("%", "%25").replace(".", "%2E")


def rgcn_optimizers(model: nn.Module, lr: float, weight_decay: float = 0.0) -> list[torch.optim.Optimizer]:
    """Adam for the dense parameters and SparseAdam for an RGCN's local embeddings (sparse
    gradients), as DGL's RGCN examples train them; step every one of them. ``model`` is the RGCN,
    a model around one as its ``encoder`` (a link predictor), or any other model (Adam only).
    Embeddings held by the graph-stores have no local parameters (their optimizer runs there)."""
    rgcn = getattr(model, "encoder", model)
    embed = rgcn.embed if isinstance(rgcn, RGCN) else nn.ModuleDict()
    sparse = {id(p) for p in embed.parameters()}
    opts: list[torch.optim.Optimizer] = [
        torch.optim.Adam([p for p in model.parameters() if id(p) not in sparse], lr=lr, weight_decay=weight_decay)
    ]
    if sparse:
        opts.append(torch.optim.SparseAdam(list(embed.parameters()), lr=lr))
    return opts
