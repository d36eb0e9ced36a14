"""The RGCN node-classification job trained in-process with ``dgl.dataloading.DataLoader`` on a
DGL heterograph: the reference for graphfeed's heterogeneous path (issue 24), as
:mod:`graphfeed.trainer.baseline` is for the homogeneous one.

:func:`rgcn_epoch` is the one train/eval loop: it takes any iterable of ``(input_nodes,
output_nodes, blocks)`` with the input features in ``blocks[0].srcnodes[nt].data[feature_name]``
and the labels in ``blocks[-1].dstnodes[target].data[label_name]``, which DGL's DataLoader gives
with ``NeighborSampler(prefetch_node_feats=..., prefetch_labels=...)`` and graphfeed's
:func:`~graphfeed.trainer.hetero.hetero_dgl_blocks` gives as it is.
"""

from __future__ import annotations

from collections.abc import Iterable, Sequence
from dataclasses import dataclass

import dgl
import numpy as np
import torch
import torch.nn.functional as F

from graphfeed.common.errors import InvalidArgument
from graphfeed.ingest.graph import GraphData
from graphfeed.trainer.config import TrainConfig
from graphfeed.trainer.hetero_models import RGCN, input_features, rgcn_optimizers

__all__ = ["EpochResult", "label_ntype", "rgcn_epoch", "to_dgl_heterograph", "train_hetero_in_process", "typed_split"]


def to_dgl_heterograph(g: GraphData) -> dgl.DGLGraph:
    """A DGL heterograph of ``g``: a node's type-wise id is its position among the nodes of its
    type (``g``'s ids are type-major), an edge's type-wise id its position among the edges of its
    type; node-data table ``"ntype/name"`` becomes ``nodes[ntype].data[name]`` (a one-type
    graph's table ``name`` goes to its one type)."""
    nstart, estart = g.ntype_starts(), g.etype_starts()
    index = {t: i for i, t in enumerate(g.ntypes)}
    edges = {}
    for r, (s, rel, d) in enumerate(g.etypes):
        lo, hi = estart[r], estart[r + 1]
        edges[(s, rel, d)] = (
            torch.from_numpy(g.src[lo:hi] - nstart[index[s]]),
            torch.from_numpy(g.dst[lo:hi] - nstart[index[d]]),
        )
    dg = dgl.heterograph(edges, num_nodes_dict=dict(zip(g.ntypes, (int(n) for n in g.node_counts()))))
    for key, table in g.node_data.items():
        name = key if len(g.ntypes) == 1 else key.partition("/")[2]
        dg.nodes[g.table_ntype(key)].data[name] = torch.from_numpy(table)
    return dg


def label_ntype(g: GraphData, label_name: str = "label") -> str:
    """The one node type with a ``label_name`` table (the type the job classifies)."""
    found = [g.table_ntype(k) for k in g.node_data if k.rpartition("/")[2] == label_name]
    if len(found) != 1:
        raise InvalidArgument(f"{g.name}: {len(found)} node types have {label_name!r} data; name the target type")
    return found[0]


def typed_split(g: GraphData, split: str, ntype: str) -> torch.Tensor:
    """Type-wise ids of ``ntype``'s nodes in split ``split`` (splits hold global ids)."""
    nstart = g.ntype_starts()
    t = g.ntypes.index(ntype)
    ids = np.asarray(g.splits[split], dtype=np.int64)
    ids = ids[(ids >= nstart[t]) & (ids < nstart[t + 1])]
    return torch.from_numpy(ids - nstart[t])


@dataclass
class EpochResult:
    loss: float  # mean over minibatches
    correct: int
    total: int

    @property
    def accuracy(self) -> float:
        return self.correct / max(1, self.total)


def rgcn_epoch(
    model: RGCN,
    batches: Iterable[tuple],
    target: str,
    optimizers: Sequence[torch.optim.Optimizer] = (),
    feature_name: str = "feat",
    label_name: str = "label",
) -> EpochResult:
    """One pass of ``model`` over ``batches`` (``(input_nodes, output_nodes, blocks)``): trains
    with ``optimizers`` when given, else evaluates without gradients. Minibatches with no seed of
    type ``target`` are skipped."""
    train = bool(optimizers)
    model.train(train)
    loss_sum, steps, correct, total = 0.0, 0, 0, 0
    with torch.set_grad_enabled(train):
        for _in, _out, blocks in batches:
            y = blocks[-1].dstnodes[target].data[label_name].long()
            if not len(y):
                continue
            logits = model(blocks, input_features(blocks[0], feature_name))[target]
            loss = F.cross_entropy(logits, y)
            if train:
                for opt in optimizers:
                    opt.zero_grad()
                loss.backward()
                for opt in optimizers:
                    opt.step()
            loss_sum += float(loss)
            steps += 1
            correct += int((logits.argmax(1) == y).sum())
            total += len(y)
    return EpochResult(loss_sum / max(1, steps), correct, total)


def build_rgcn(
    g: GraphData,
    cfg: TrainConfig,
    feature_name: str = "feat",
    embed_dim: int | None = None,
    embeddings: dict[str, torch.nn.Module] | None = None,
) -> RGCN:
    """The RGCN of ``g``: node types with a ``feature_name`` table project it (unless listed in
    ``cfg.featureless_types``), the others embed (``embeddings``' modules, else an ``nn.Embedding``)."""
    in_feats = {
        g.table_ntype(k): int(np.prod(t.shape[1:]))
        for k, t in g.node_data.items()
        if k.rpartition("/")[2] == feature_name and g.table_ntype(k) not in cfg.featureless_types
    }
    num_nodes = dict(zip(g.ntypes, (int(n) for n in g.node_counts())))
    return RGCN(
        g.etypes,
        in_feats,
        num_nodes,
        cfg.hidden,
        g.num_classes,
        len(cfg.fanouts),
        cfg.dropout,
        embed_dim,
        embeddings=embeddings,
    )


class DGLNodeEmbedding(torch.nn.Module):
    """DGL's own ``dgl.nn.NodeEmbedding`` as the RGCN's embedding of one type (the external
    reference for graphfeed's embeddings): rows in a CPU table, each lookup traced for
    ``dgl.optim.SparseAdam`` while gradients are recorded; no torch parameters."""

    def __init__(self, num_nodes: int, dim: int, name: str) -> None:
        super().__init__()
        bound = float(np.sqrt(6.0 / (num_nodes + dim)))  # Xavier's bound, as the nn.Embedding's init

        def init(t: torch.Tensor) -> torch.Tensor:
            return t.uniform_(-bound, bound)

        self.table = dgl.nn.NodeEmbedding(num_nodes, dim, name, init_func=init)

    def forward(self, ids: torch.Tensor) -> torch.Tensor:
        return self.table(ids.cpu(), ids.device)


def dgl_embeddings(
    g: GraphData, cfg: TrainConfig, name: str
) -> tuple[dict[str, torch.nn.Module], list[dgl.optim.SparseAdam]]:
    """:class:`DGLNodeEmbedding` of every type :func:`build_rgcn` embeds (``name`` prefixes the
    shared-memory tables: unique per process), and one ``dgl.optim.SparseAdam`` over them at ``cfg.lr``."""
    with_feat = {g.table_ntype(k) for k in g.node_data if k.rpartition("/")[2] == "feat"}
    counts = dict(zip(g.ntypes, (int(n) for n in g.node_counts())))
    mods: dict[str, torch.nn.Module] = {
        nt: DGLNodeEmbedding(n, cfg.hidden, f"{name}-{nt}")
        for nt, n in counts.items()
        if nt not in with_feat or nt in cfg.featureless_types
    }
    if not mods:
        return mods, []
    return mods, [dgl.optim.SparseAdam([m.table for m in mods.values()], lr=cfg.lr)]


def _loader(
    dg: dgl.DGLGraph, seeds: dict[str, torch.Tensor], fanouts: list[int], batch_size: int, shuffle: bool, target: str
) -> dgl.dataloading.DataLoader:
    feats = {nt: ["feat"] for nt in dg.ntypes if "feat" in dg.nodes[nt].data}
    sampler = dgl.dataloading.NeighborSampler(fanouts, prefetch_node_feats=feats, prefetch_labels={target: ["label"]})
    return dgl.dataloading.DataLoader(dg, seeds, sampler, batch_size=batch_size, shuffle=shuffle, drop_last=False)


def train_hetero_in_process(
    g: GraphData, cfg: TrainConfig, target: str | None = None, dgl_embedding_name: str | None = None
) -> dict[str, float]:
    """Trains the RGCN on ``target``'s nodes (default: the node type with labels) for
    ``cfg.epochs`` with DGL's own DataLoader (seeded by ``cfg.seed``); returns ``{"val_acc",
    "test_acc"}`` (``"feat"`` and ``"label"`` tables). Featureless types are embedded by an
    ``nn.Embedding(sparse=True)`` trained by ``torch.optim.SparseAdam``, or with
    ``dgl_embedding_name`` by DGL's ``NodeEmbedding`` and ``dgl.optim.SparseAdam`` (tables named after it)."""
    target = target or label_ntype(g)
    torch.manual_seed(cfg.seed)
    dgl.seed(cfg.seed)
    dg = to_dgl_heterograph(g)
    embeddings, sparse = dgl_embeddings(g, cfg, dgl_embedding_name) if dgl_embedding_name else ({}, [])
    model = build_rgcn(g, cfg, embeddings=embeddings)
    opts = [*rgcn_optimizers(model, cfg.lr, cfg.weight_decay), *sparse]
    train_loader = _loader(dg, {target: typed_split(g, "train", target)}, cfg.fanouts, cfg.batch_size, True, target)
    for _epoch in range(cfg.epochs):
        rgcn_epoch(model, train_loader, target, opts)
    eval_bs = max(cfg.batch_size, 1024)
    out = {}
    for split in ("val", "test"):
        loader = _loader(dg, {target: typed_split(g, split, target)}, cfg.eval_fanouts, eval_bs, False, target)
        out[f"{split}_acc"] = rgcn_epoch(model, loader, target).accuracy
    return out
