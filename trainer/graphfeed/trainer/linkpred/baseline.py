"""The link-prediction reference run entirely in-process with DGL: the edge minibatches of
``dgl.dataloading.as_edge_prediction_sampler`` over ``dgl.dataloading.DataLoader``, then
layer-wise inference and :func:`~.evaluate.evaluate_split`. graphfeed's link-prediction run is
measured against it (same model builder, seeds, evaluation negatives and metrics), as
:mod:`graphfeed.trainer.hetero_baseline` is the reference for node classification.
"""

from __future__ import annotations

import time
from collections.abc import Callable, Mapping

import dgl
import numpy as np
import torch

from graphfeed.common.errors import InvalidArgument
from graphfeed.common.schema import CanonicalEtype
from graphfeed.ingest.graph import GraphData
from graphfeed.trainer.hetero_baseline import to_dgl_heterograph
from graphfeed.trainer.hetero_models import rgcn_optimizers
from graphfeed.trainer.linkpred.config import LinkPredConfig
from graphfeed.trainer.linkpred.evaluate import evaluate_split, predicted_etype
from graphfeed.trainer.linkpred.inference import dgl_inference
from graphfeed.trainer.linkpred.models import LOSSES, build_link_predictor

__all__ = ["edge_loader", "exclude_with_reverse", "train_linkpred_in_process"]

SeedEdges = torch.Tensor | Mapping[CanonicalEtype, torch.Tensor]


def exclude_with_reverse(g: GraphData, etype: CanonicalEtype) -> Callable[[SeedEdges], SeedEdges]:
    """``exclude`` for ``as_edge_prediction_sampler``: a minibatch's seed edges and their reverse
    twins (the ``rev_eid`` column of ``g.edge_splits["train"]``) leave its message-passing
    graph, so no positive is predicted from itself. Type-wise DGL edge ids throughout.

    The twins may be of the same relation (a symmetric graph: DGL's ``"reverse_id"``) or of
    ``rev_<rel>`` whose ids need not line up with the relation's (so not ``"reverse_types"``).
    """
    rows, estart = g.edge_splits["train"], g.etype_starts()
    r = g.etypes.index(etype)
    has = rows[:, 4] >= 0
    rev_types = np.unique(np.searchsorted(estart, rows[has, 4], "right") - 1)
    if len(rev_types) > 1:
        raise InvalidArgument(f"{g.name}: reverse twins of {etype} in several relations {rev_types.tolist()}")
    rev_r = int(rev_types[0]) if len(rev_types) else r
    rev_etype = g.etypes[rev_r]
    rev_of = torch.full((int(g.edge_counts()[r]),), -1, dtype=torch.int64)
    rev_of[torch.from_numpy(rows[has, 3] - estart[r])] = torch.from_numpy(rows[has, 4] - estart[rev_r])

    def exclude(seed_edges: SeedEdges) -> SeedEdges:
        eids = seed_edges[etype] if isinstance(seed_edges, Mapping) else seed_edges
        twins = rev_of[eids]
        twins = twins[twins >= 0]
        if not isinstance(seed_edges, Mapping):
            return torch.cat([eids, twins])
        if rev_etype == etype:
            return {etype: torch.cat([eids, twins])}
        return {etype: eids, rev_etype: twins}

    return exclude


def edge_loader(g: GraphData, dg: dgl.DGLGraph, cfg: LinkPredConfig) -> dgl.dataloading.DataLoader:
    """DGL's edge minibatches ``(input_nodes, pair_graph, neg_pair_graph, blocks)`` over the train
    split: ``cfg.batch_size`` shuffled positives, ``cfg.num_negatives`` uniform negative
    destinations each, neighbors sampled by ``cfg.fanouts`` with the seeds and twins excluded."""
    etype = predicted_etype(g)
    r = g.etypes.index(etype)
    eids = torch.from_numpy(g.edge_splits["train"][:, 3] - g.etype_starts()[r])
    feats = {nt: ["feat"] for nt in dg.ntypes if "feat" in dg.nodes[nt].data}
    sampler = dgl.dataloading.as_edge_prediction_sampler(
        dgl.dataloading.NeighborSampler(cfg.fanouts, prefetch_node_feats=feats if g.is_hetero else ["feat"]),
        exclude=exclude_with_reverse(g, etype),
        negative_sampler=dgl.dataloading.negative_sampler.Uniform(cfg.num_negatives),
    )
    seeds = {etype: eids} if g.is_hetero else eids
    return dgl.dataloading.DataLoader(dg, seeds, sampler, batch_size=cfg.batch_size, shuffle=True, drop_last=False)


def train_linkpred_in_process(g: GraphData, cfg: LinkPredConfig) -> dict[str, dict[str, float]]:
    """Trains a link predictor of ``g``'s one split relation on ``g.edge_splits["train"]`` and
    scores the val and test splits.

    Seeded by ``cfg.seed`` (torch, DGL, numpy). Repeats bit for bit with one OpenMP thread
    (``OMP_NUM_THREADS=1``); with several, DGL's and torch's parallel CPU kernels order their
    sums differently run to run, and Cora's test MRR moves by about 0.02. Node features: the
    ``"feat"`` tables (homogeneous: required; typed: those types project it, the others embed).

    Args:
        g: a graph from :func:`graphfeed.ingest.edge_split.split_edges` (held-out edges removed).
        cfg: the hyper-parameters.

    Returns:
        ``{"val": ..., "test": ...}``: :func:`~.evaluate.evaluate_split` of each (``"mrr"``,
        ``"hits@10"``, ``"recall@20"``, ...), and ``"train"``: ``{"loss"`` (the last epoch's
        mean), ``"epoch_s"`` (mean seconds per training epoch)``}``.
    """
    torch.manual_seed(cfg.seed)
    dgl.seed(cfg.seed)
    np.random.seed(cfg.seed)
    dg = to_dgl_heterograph(g)
    model = build_link_predictor(g, cfg, predicted_etype(g))
    opts = rgcn_optimizers(model, cfg.lr, cfg.weight_decay)
    loader = edge_loader(g, dg, cfg)
    loss_fn = LOSSES[cfg.loss]
    seconds, loss_sum, steps = 0.0, 0.0, 0
    for _epoch in range(cfg.epochs):
        model.train()
        start, loss_sum, steps = time.perf_counter(), 0.0, 0
        for _input_nodes, pair_graph, neg_pair_graph, blocks in loader:
            loss = loss_fn(*model(blocks, pair_graph, neg_pair_graph))
            for opt in opts:
                opt.zero_grad()
            loss.backward()
            for opt in opts:
                opt.step()
            loss_sum, steps = loss_sum + float(loss), steps + 1
        seconds += time.perf_counter() - start
    h = dgl_inference(model.encoder, dg, "feat", cfg.eval_batch_size)
    out = {split: evaluate_split(g, split, h, model.scorer, cfg) for split in ("val", "test")}
    return out | {"train": {"loss": loss_sum / max(1, steps), "epoch_s": seconds / max(1, cfg.epochs)}}
