"""Link-prediction metrics: average precision and mean reciprocal rank, and their accumulators."""

from __future__ import annotations

from dataclasses import dataclass, field

import numpy as np


def average_precision(pos: np.ndarray, neg: np.ndarray) -> float:
    """AP of scores ``pos`` (label 1) against ``neg`` (label 0), as sklearn's
    ``average_precision_score``: sum over distinct thresholds of (recall step) x precision."""
    scores = np.concatenate([pos, neg]).astype(np.float64)
    labels = np.concatenate([np.ones(len(pos)), np.zeros(len(neg))])
    if not len(pos):
        return float("nan")
    order = np.argsort(-scores, kind="stable")
    scores, labels = scores[order], labels[order]
    last_of_tie = np.r_[np.flatnonzero(np.diff(scores)), len(scores) - 1]  # thresholds: distinct scores
    tp = np.cumsum(labels)[last_of_tie]
    precision = tp / (last_of_tie + 1)
    recall_step = np.diff(np.r_[0.0, tp]) / len(pos)
    return float(np.sum(recall_step * precision))


def reciprocal_ranks(pos: np.ndarray, neg: np.ndarray) -> np.ndarray:
    """1 / rank of each positive among itself and its row of ``neg`` [B, K]; a tie counts half."""
    above = (neg > pos[:, None]).sum(1) + 0.5 * (neg == pos[:, None]).sum(1)
    return 1.0 / (1.0 + above)


@dataclass
class Scores:
    """Scores of a span of events: positives, their negatives [B, K] (column 0 is the one the
    loss and AP use), and the summed loss."""

    pos: list[np.ndarray] = field(default_factory=list)
    neg: list[np.ndarray] = field(default_factory=list)
    loss_sum: float = 0.0
    batches: int = 0

    def add(self, pos: np.ndarray, neg: np.ndarray, loss: float) -> None:
        self.pos.append(pos)
        self.neg.append(neg)
        self.loss_sum += loss
        self.batches += 1

    @property
    def num_events(self) -> int:
        return sum(len(p) for p in self.pos)

    def summary(self) -> tuple[float, float, float]:
        """(AP, MRR, mean loss) over the span; MRR is NaN where events had a single negative
        (training batches) and the span's events do not all have the same number."""
        if not self.pos:
            return float("nan"), float("nan"), float("nan")
        pos, neg0 = np.concatenate(self.pos), np.concatenate([n[:, 0] for n in self.neg])
        widths = {n.shape[1] for n in self.neg}
        mrr = (
            float(reciprocal_ranks(pos, np.concatenate(self.neg)).mean())
            if len(widths) == 1 and widths != {1}
            else float("nan")
        )
        return average_precision(pos, neg0), mrr, self.loss_sum / self.batches
