"""Link-prediction metrics: ranking against sampled negatives (MRR, Hits@K, as OGB's
linkproppred ``Evaluator`` computes them for its MRR datasets) and top-K retrieval over every
item (Recall@K, NDCG@K, as LightGCN and NGCF evaluate user-item graphs).

:func:`eval_negatives` is the one place evaluation negatives come from: graphfeed's run and the
DGL reference draw them from the same seed, so their MRRs rank against the same candidates.
"""

from __future__ import annotations

from collections.abc import Sequence

import numpy as np
import torch

__all__ = ["eval_negatives", "ranking_metrics", "recall_ndcg_at_k"]


def ranking_metrics(pos: torch.Tensor, neg: torch.Tensor, ks: Sequence[int] = (1, 3, 10, 20, 50)) -> dict[str, float]:
    """MRR and Hits@K of each positive ranked among its own negatives.

    As OGB's ``Evaluator._eval_mrr``: a positive's rank is ``1 + (optimistic + pessimistic) / 2``
    with ``optimistic = #(neg > pos)`` and ``pessimistic = #(neg >= pos)``, so a tie with ``t``
    negatives costs ``t / 2`` places; Hits@K is the fraction of ranks ``<= K`` (a half-rank
    from a tie at the K-th place does not hit).

    Args:
        pos: scores [n] of the positive edges.
        neg: scores [n, k] of each positive's negatives.
        ks: the K of each Hits@K.

    Returns:
        ``{"mrr": ..., "hits@1": ..., ...}``, means over the positives (NaN when there are none).
    """
    pos, neg = pos.detach().reshape(-1, 1), neg.detach()
    if neg.ndim != 2 or len(neg) != len(pos):
        raise ValueError(f"neg must be [n, k] with n = {len(pos)} positives, not {list(neg.shape)}")
    optimistic = (neg > pos).sum(1).double()
    pessimistic = (neg >= pos).sum(1).double()
    rank = 0.5 * (optimistic + pessimistic) + 1
    out = {"mrr": float((1.0 / rank).mean())}
    out |= {f"hits@{k}": float((rank <= k).double().mean()) for k in ks}
    return out


def eval_negatives(num_dst: int, n: int, k: int, seed: int) -> np.ndarray:
    """int64 [n, k]: uniformly drawn destination ids (type-wise: ``0 .. num_dst - 1``), ``k`` per
    evaluated edge. Not filtered against true edges (as OGB's random negatives are not): with
    a few thousand candidates a collision is rare and costs both runs alike."""
    return np.random.default_rng(seed).integers(0, num_dst, size=(n, k), dtype=np.int64)


def recall_ndcg_at_k(
    user_emb: torch.Tensor,
    item_emb: torch.Tensor,
    train_pairs: np.ndarray,
    test_pairs: np.ndarray,
    k: int = 20,
    users_per_batch: int = 1024,
) -> dict[str, float]:
    """Recall@K and NDCG@K of retrieving every test user's test items among all items.

    Each user's items are scored by dot product; the user's known items (``train_pairs``:
    pass the train and val pairs when scoring test) are masked out, then the top ``k`` are
    compared with the user's test items. Recall@K is ``hits / #test items``; NDCG@K is DCG of
    the hits (``1 / log2(position + 1)``, positions from 1) over the ideal DCG of
    ``min(k, #test items)`` hits, as LightGCN's evaluation. Users are scored
    ``users_per_batch`` at a time, so memory stays ``users_per_batch x #items``.

    Args:
        user_emb: [num_users, d].
        item_emb: [num_items, d].
        train_pairs: int [m, 2] of ``(user, item)`` type-wise ids, masked.
        test_pairs: int [t, 2] of ``(user, item)``, the relevant items.
        k: the cut-off.
        users_per_batch: users scored at once.

    Returns:
        ``{"recall@k": ..., "ndcg@k": ...}``, means over the users with a test item.
    """
    train = _by_user(train_pairs)
    test = _by_user(test_pairs)
    users = np.unique(test[0])
    discount = 1.0 / torch.log2(torch.arange(2, k + 2, dtype=torch.float64))
    recall_sum = ndcg_sum = 0.0
    for lo in range(0, len(users), users_per_batch):
        batch = users[lo : lo + users_per_batch]
        scores = user_emb[torch.from_numpy(batch)].detach() @ item_emb.detach().T
        scores[_rows_of(train, batch)] = -torch.inf
        top = scores.topk(min(k, scores.shape[1]), dim=1).indices
        relevant = torch.zeros_like(scores, dtype=torch.bool)
        relevant[_rows_of(test, batch)] = True
        hits = relevant.gather(1, top).double()
        n_rel = relevant.sum(1).double()
        recall_sum += float((hits.sum(1) / n_rel).sum())
        ideal = torch.cumsum(discount, 0)[(n_rel.clamp(max=k) - 1).long()]
        ndcg_sum += float(((hits * discount[: hits.shape[1]]).sum(1) / ideal).sum())
    n = len(users) or float("nan")
    return {f"recall@{k}": recall_sum / n, f"ndcg@{k}": ndcg_sum / n}


def _by_user(pairs: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """(users, items) sorted by user."""
    pairs = np.asarray(pairs, dtype=np.int64).reshape(-1, 2)
    order = np.argsort(pairs[:, 0], kind="stable")
    return pairs[order, 0], pairs[order, 1]


def _rows_of(pairs: tuple[np.ndarray, np.ndarray], batch: np.ndarray) -> tuple[torch.Tensor, torch.Tensor]:
    """Index ``(row in batch, item)`` of the pairs whose user is in ``batch`` (sorted, distinct):
    they are the contiguous run of user-sorted pairs between its first and last user."""
    users, items = pairs
    lo, hi = np.searchsorted(users, batch[0], "left"), np.searchsorted(users, batch[-1], "right")
    users, items = users[lo:hi], items[lo:hi]
    row = np.searchsorted(batch, users)
    keep = batch[np.minimum(row, len(batch) - 1)] == users  # users between the batch's with no test item
    return torch.from_numpy(row[keep]), torch.from_numpy(items[keep])
