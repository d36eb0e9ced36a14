"""The metrics of an edge split from every node's embedding: the one evaluation graphfeed's run
and the DGL reference share (same pairs, same negatives, same scorer call).

A split is ``g.edge_splits[name]``: int64 rows ``(src, dst, etype, eid, rev_eid)`` with
``g``'s node ids (see :mod:`graphfeed.ingest.edge_split`).
"""

from __future__ import annotations

import numpy as np
import torch

from graphfeed.common.errors import InvalidArgument
from graphfeed.common.schema import CanonicalEtype
from graphfeed.ingest.graph import GraphData
from graphfeed.trainer.linkpred.config import LinkPredConfig
from graphfeed.trainer.linkpred.metrics import eval_negatives, ranking_metrics, recall_ndcg_at_k
from graphfeed.trainer.linkpred.models import DotScorer, Embeddings, MLPScorer

__all__ = ["evaluate_pairs", "evaluate_split", "predicted_etype", "typed_pairs"]

KNOWN_BEFORE = {"val": ("train",), "test": ("train", "val")}  # pairs a split's retrieval masks
EDGES_PER_CHUNK = 1024  # scored with their negatives at once: memory chunk x negatives x hidden


def predicted_etype(g: GraphData) -> CanonicalEtype:
    """The one relation ``g``'s edge splits hold."""
    rels = np.unique(np.concatenate([s[:, 2] for s in g.edge_splits.values()]))
    if len(rels) != 1:
        raise InvalidArgument(f"{g.name}: edge splits hold relations {rels.tolist()}, need exactly one")
    return g.etypes[int(rels[0])]


def typed_pairs(g: GraphData, split: str) -> np.ndarray:
    """int64 [n, 2]: the split's ``(src, dst)`` as type-wise ids of their node types."""
    rows = g.edge_splits[split]
    s, _rel, d = predicted_etype(g)
    nstart = g.ntype_starts()
    return np.stack([rows[:, 0] - nstart[g.ntypes.index(s)], rows[:, 1] - nstart[g.ntypes.index(d)]], axis=1)


def evaluate_split(
    g: GraphData, split: str, h: Embeddings, scorer: DotScorer | MLPScorer, cfg: LinkPredConfig
) -> dict[str, float]:
    """:func:`evaluate_pairs` of ``g.edge_splits[split]``, the pairs of the earlier splits known.

    Args:
        g: the graph with ``edge_splits``.
        split: ``"val"`` or ``"test"`` (or ``"train"``, ranked only).
        h: [N, hidden] or per node type, as :func:`~.inference.dgl_inference` returns.
        scorer: the model's scorer.
        cfg: ``eval_negatives``, ``seed``, ``recall_k``.
    """
    s, _rel, d = predicted_etype(g)
    h_src, h_dst = (h[s], h[d]) if isinstance(h, dict) else (h, h)
    known = [typed_pairs(g, k) for k in KNOWN_BEFORE.get(split, ())]
    return evaluate_pairs(
        typed_pairs(g, split), np.concatenate(known) if known else None, h_src, h_dst, scorer, cfg, s != d
    )


@torch.no_grad()
def evaluate_pairs(
    pairs: np.ndarray,
    known: np.ndarray | None,
    h_src: torch.Tensor,
    h_dst: torch.Tensor,
    scorer: DotScorer | MLPScorer,
    cfg: LinkPredConfig,
    user_item: bool,
) -> dict[str, float]:
    """Metrics of the edges ``pairs`` given every node's embedding.

    Each edge ``u -> v`` is ranked against ``cfg.eval_negatives`` destinations ``u -> v'``
    drawn by :func:`~.metrics.eval_negatives` (seed ``cfg.seed``): MRR and Hits@K. For a
    user-item relation scored by the dot product, also Recall@K and NDCG@K (``cfg.recall_k``)
    of retrieving each user's items among all items, the ``known`` pairs masked.

    Args:
        pairs: int [n, 2] ``(src, dst)``, type-wise ids of the relation's two node types.
        known: int [m, 2] pairs masked from retrieval (the earlier splits'), or None.
        h_src: [num src-type nodes, hidden] embeddings.
        h_dst: [num dst-type nodes, hidden] embeddings (``h_src`` again in a one-type graph).
        scorer: the model's scorer (its ``pairs``).
        cfg: ``eval_negatives``, ``seed``, ``recall_k``.
        user_item: the relation joins two node types.

    Returns:
        ``{"mrr", "hits@1", ..., "hits@50"}`` and maybe ``{"recall@K", "ndcg@K"}``.
    """
    edges = torch.from_numpy(np.asarray(pairs, dtype=np.int64).reshape(-1, 2))
    negs = torch.from_numpy(eval_negatives(len(h_dst), len(edges), cfg.eval_negatives, cfg.seed))
    pos, neg = [], []
    for lo in range(0, len(edges), EDGES_PER_CHUNK):
        chunk = slice(lo, lo + EDGES_PER_CHUNK)
        u, v = edges[chunk, 0], edges[chunk, 1]
        pos.append(scorer.pairs(h_src[u], h_dst[v]))
        neg.append(scorer.pairs(h_src[u][:, None, :], h_dst[negs[chunk]]))
    out = ranking_metrics(torch.cat(pos), torch.cat(neg))
    if user_item and isinstance(scorer, DotScorer):
        masked = known if known is not None else np.empty((0, 2), np.int64)
        out |= recall_ndcg_at_k(h_src, h_dst, masked, edges.numpy(), cfg.recall_k)
    return out
