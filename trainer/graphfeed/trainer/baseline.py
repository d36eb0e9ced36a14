"""The same GraphSAGE job trained in-process with ``dgl.dataloading.DataLoader``.

The reference graphfeed is measured against: fidelity tests compare accuracy, benchmarks
compare throughput. Same model class, init seed, split and hyper-parameters as
:class:`graphfeed.trainer.train.Trainer`.
"""

from __future__ import annotations

import dgl
import torch
import torch.nn.functional as F

from graphfeed.ingest.graph import GraphData
from graphfeed.trainer.config import TrainConfig
from graphfeed.trainer.models import GraphSAGE


def to_dgl(g: GraphData) -> dgl.DGLGraph:
    """A DGLGraph with ``feat`` and ``label`` node data (input ids)."""
    dg = dgl.graph((torch.from_numpy(g.src), torch.from_numpy(g.dst)), num_nodes=g.num_nodes)
    for name, table in g.node_data.items():
        dg.ndata[name] = torch.from_numpy(table)
    return dg


@torch.no_grad()
def _accuracy(model: GraphSAGE, dg: dgl.DGLGraph, ids: torch.Tensor, fanouts: list[int], batch_size: int) -> float:
    model.eval()
    sampler = dgl.dataloading.NeighborSampler(fanouts)
    loader = dgl.dataloading.DataLoader(dg, ids, sampler, batch_size=batch_size, shuffle=False)
    correct = total = 0
    for _in, _out, blocks in loader:
        pred = model(blocks, blocks[0].srcdata["feat"]).argmax(1)
        correct += int((pred == blocks[-1].dstdata["label"]).sum())
        total += len(pred)
    return correct / max(1, total)


def train_in_process(g: GraphData, cfg: TrainConfig) -> dict[str, float]:
    """Trains for ``cfg.epochs``; returns ``{"val_acc", "test_acc"}``."""
    torch.manual_seed(cfg.seed)
    dg = to_dgl(g)
    in_feats = int(g.node_data["feat"].shape[1])
    model = GraphSAGE(in_feats, cfg.hidden, g.num_classes, len(cfg.fanouts), cfg.dropout)
    opt = torch.optim.Adam(model.parameters(), lr=cfg.lr, weight_decay=cfg.weight_decay)
    train_ids = torch.from_numpy(g.splits["train"])
    sampler = dgl.dataloading.NeighborSampler(cfg.fanouts)
    loader = dgl.dataloading.DataLoader(
        dg, train_ids, sampler, batch_size=cfg.batch_size, shuffle=True, drop_last=False
    )
    for _epoch in range(cfg.epochs):
        model.train()
        for _in, _out, blocks in loader:
            loss = F.cross_entropy(model(blocks, blocks[0].srcdata["feat"]), blocks[-1].dstdata["label"])
            opt.zero_grad()
            loss.backward()
            opt.step()
    eval_bs = max(cfg.batch_size, 1024)
    return {
        "val_acc": _accuracy(model, dg, torch.from_numpy(g.splits["val"]), cfg.eval_fanouts, eval_bs),
        "test_acc": _accuracy(model, dg, torch.from_numpy(g.splits["test"]), cfg.eval_fanouts, eval_bs),
    }
