"""Layer-wise full-neighbor inference: every node's embedding, one layer at a time.

DGL's ``inference`` pattern (``examples/pytorch/graphsage``): layer ``i`` runs once over all
nodes in batches of one-layer full-neighbor blocks, reading the previous layer's output of
every node, so a node's L-hop neighborhood is never expanded and each embedding is computed
once. :func:`layerwise` is the loop over any source of such blocks (DGL's DataLoader here,
graphfeed's services elsewhere); :func:`dgl_inference` feeds it from an in-process DGL graph.
"""

from __future__ import annotations

from collections.abc import Callable, Iterable, Mapping
from typing import Any, Protocol, cast, overload

import dgl
import torch

from graphfeed.trainer.hetero_models import RGCN
from graphfeed.trainer.linkpred.models import Embeddings
from graphfeed.trainer.models import GraphSAGE

__all__ = ["LayerwiseEncoder", "dgl_inference", "layerwise"]

TypedIds = Mapping[str, torch.Tensor]  # type-wise ids per node type
NodeIds = torch.Tensor | TypedIds
LayerBatch = tuple[NodeIds, NodeIds, dgl.DGLGraph]  # (input_nodes, output_nodes, one-layer block)


class LayerwiseEncoder(Protocol):
    """An encoder that runs one layer at a time (GraphSAGE and RGCN do)."""

    @property
    def num_layers(self) -> int: ...

    def layer(self, i: int, block: dgl.DGLGraph, h: Any) -> Any: ...

    def train(self, mode: bool = True) -> Any: ...

    @property
    def training(self) -> bool: ...


@torch.no_grad()
def layerwise(
    encoder: LayerwiseEncoder, batches_for_layer: Callable[[int], Iterable[LayerBatch]], inputs: Embeddings
) -> Embeddings:
    """Runs ``encoder`` layer by layer over all nodes; returns every node's output embedding.

    Evaluates (no dropout, no gradients); the encoder's train/eval mode is restored after.

    Args:
        encoder: has ``num_layers`` and ``layer(i, block, h)``.
        batches_for_layer: for layer ``i``, batches ``(input_nodes, output_nodes, block)`` of
            one-layer full-neighbor blocks whose output nodes together cover every node once;
            ids index ``inputs`` (per type for a heterograph). Called once per layer.
        inputs: the first layer's input of every node: [N, F], or per node type.

    Returns:
        The last layer's output of every node ([N, hidden], or per node type), on ``inputs``' device.
    """
    was_training = encoder.training
    encoder.train(False)
    try:
        h = inputs
        for i in range(encoder.num_layers):
            out: Embeddings | None = None
            for input_nodes, output_nodes, block in batches_for_layer(i):
                y = encoder.layer(i, block, _gather(h, input_nodes, block.device))
                out = _scatter(out, h, output_nodes, y)
            if out is None:
                raise ValueError(f"layer {i}: batches_for_layer gave no batch")
            h = out
        return h
    finally:
        encoder.train(was_training)


def _gather(h: Embeddings, ids: NodeIds, device: torch.device) -> Embeddings:
    """Rows ``ids`` of ``h`` on ``device`` (per type when ``h`` is; ids are then per type too)."""
    if isinstance(h, Mapping):
        return {nt: h[nt][i.to(h[nt].device)].to(device) for nt, i in cast(TypedIds, ids).items() if nt in h}
    return h[cast(torch.Tensor, ids).to(h.device)].to(device)


def _scatter(out: Embeddings | None, like: Embeddings, ids: NodeIds, y: Embeddings) -> Embeddings:
    """Writes batch output ``y`` at rows ``ids`` of ``out`` (made on first use: one row per row of ``like``)."""
    if isinstance(like, Mapping):
        buf = dict(cast(dict[str, torch.Tensor], out or {}))
        for nt, where in cast(TypedIds, ids).items():  # a batch may hold output nodes of some types only
            rows = cast(dict[str, torch.Tensor], y)[nt]
            if nt not in buf:
                buf[nt] = torch.zeros(len(like[nt]), rows.shape[1], dtype=rows.dtype, device=like[nt].device)
            buf[nt][where.to(buf[nt].device)] = rows.to(buf[nt].device)
        return buf
    rows = cast(torch.Tensor, y)
    dense = cast(torch.Tensor | None, out)
    if dense is None:
        dense = torch.zeros(len(like), rows.shape[1], dtype=rows.dtype, device=like.device)
    dense[cast(torch.Tensor, ids).to(dense.device)] = rows.to(dense.device)
    return dense


@overload
def dgl_inference(
    encoder: RGCN, dg: dgl.DGLGraph, feat_name: str = ..., batch_size: int = ...
) -> dict[str, torch.Tensor]: ...


@overload
def dgl_inference(
    encoder: GraphSAGE, dg: dgl.DGLGraph, feat_name: str = ..., batch_size: int = ...
) -> torch.Tensor: ...


@torch.no_grad()
def dgl_inference(
    encoder: GraphSAGE | RGCN, dg: dgl.DGLGraph, feat_name: str = "feat", batch_size: int = 4096
) -> Embeddings:
    """Every node's embedding by :func:`layerwise` over DGL's DataLoader with
    ``MultiLayerFullNeighborSampler(1)`` on the in-process graph ``dg``.

    Args:
        encoder: a :class:`~graphfeed.trainer.models.GraphSAGE` (reads ``dg.ndata[feat_name]``)
            or an :class:`~graphfeed.trainer.hetero_models.RGCN` (projects the node types that
            have ``feat_name``, embeds the others).
        dg: the graph messages pass over (held-out edges removed).
        feat_name: the input feature's node-data name.
        batch_size: output nodes per block (default 4,096).

    Returns:
        [N, hidden], or per node type for an RGCN.
    """
    inputs: Embeddings
    if isinstance(encoder, RGCN):
        counts = {nt: dg.num_nodes(nt) for nt in dg.ntypes}
        feats = {nt: dg.nodes[nt].data[feat_name] for nt in dg.ntypes if feat_name in dg.nodes[nt].data}
        inputs = encoder.embed_all(feats, counts)  # projections and lookups: no dropout to switch off
        nodes: NodeIds = {nt: torch.arange(n) for nt, n in counts.items()}
    else:
        inputs = dg.ndata[feat_name].float()
        nodes = torch.arange(dg.num_nodes())
    sampler = dgl.dataloading.MultiLayerFullNeighborSampler(1)
    loader = dgl.dataloading.DataLoader(dg, nodes, sampler, batch_size=batch_size, shuffle=False, drop_last=False)

    def batches(_layer: int) -> Iterable[LayerBatch]:
        return ((inp, out, blocks[0]) for inp, out, blocks in loader)

    return layerwise(encoder, batches, inputs)
