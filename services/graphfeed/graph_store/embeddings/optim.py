"""The math of trainable embeddings, on NumPy arrays: seeded rows, DistDGL's gradient
combination and its sparse Adagrad and Adam updates.

Semantics are DGL's ``dgl/distributed/optim/pytorch/sparse_optim.py``: the gradients of one
step for the same id (from any rank, repeats within a rank included) are summed and divided by
their count (``th.unique(..., return_counts=True)``, ``index_add_``, ``/ cnt``), then

* **Adagrad** (``SparseAdagrad``): ``sum += g*g``; ``row -= lr * g / (sqrt(sum) + eps)``;
* **Adam** (``SparseAdam``): a per-row step count ``t += 1``; ``m = b1*m + (1-b1)*g``;
  ``v = b2*v + (1-b2)*g*g``; ``row -= lr * (m / (1 - b1**t)) / (sqrt(v / (1 - b2**t)) + eps)``.

Everything is float32 and computed in one fixed order, so the same pushes give the same bytes.
"""

from __future__ import annotations

from collections.abc import Sequence

import numpy as np

from graphfeed.graph_store.embeddings.types import EmbeddingSpec

_MASK = np.uint64(0xFFFFFFFFFFFFFFFF)


def _mix(x: np.ndarray) -> np.ndarray:
    """splitmix64's finalizer, elementwise on uint64 (wrapping arithmetic)."""
    with np.errstate(over="ignore"):
        x = (x ^ (x >> np.uint64(30))) * np.uint64(0xBF58476D1CE4E5B9)
        x = (x ^ (x >> np.uint64(27))) * np.uint64(0x94D049BB133111EB)
        return x ^ (x >> np.uint64(31))


def init_rows(spec: EmbeddingSpec, gids: np.ndarray) -> np.ndarray:
    """float32 ``[len(gids), dim]``: the initial rows, uniform in ``[init_low, init_high)``.

    Element ``(g, j)`` is a hash of ``(seed, g, j)``: a pure function of the seed and the global
    id, so every partition initializes its own rows alone and a reset gives the same bytes.
    """
    gids = np.asarray(gids, dtype=np.int64).astype(np.uint64)
    cols = np.arange(spec.dim, dtype=np.uint64)
    with np.errstate(over="ignore"):
        key = _mix(np.array([spec.seed], np.uint64) ^ np.uint64(0x9E3779B97F4A7C15))[0]
        x = _mix((gids[:, None] * np.uint64(spec.dim) + cols[None, :]) ^ key)
    u = (x >> np.uint64(40)).astype(np.float32) * np.float32(1.0 / (1 << 24))  # 24 bits: exact in float32
    low, high = np.float32(spec.init_low), np.float32(spec.init_high)
    return (low + (high - low) * u).astype(np.float32)


def new_state(optimizer: str, num_rows: int, dim: int) -> dict[str, np.ndarray]:
    """The optimizer's zeroed state for ``num_rows`` rows: Adagrad's ``sum`` of squares, or
    Adam's ``mem``, ``power`` and per-row ``steps`` (float32, as DGL keeps them)."""
    if optimizer == "adagrad":
        return {"sum": np.zeros((num_rows, dim), np.float32)}
    return {
        "mem": np.zeros((num_rows, dim), np.float32),
        "power": np.zeros((num_rows, dim), np.float32),
        "steps": np.zeros(num_rows, np.float32),
    }


def combine(parts: Sequence[tuple[np.ndarray, np.ndarray]]) -> tuple[np.ndarray, np.ndarray]:
    """``(unique rows, mean gradient per row)`` of every rank's ``(rows, grads)``, in the given
    (rank) order: summed in that order, then divided by the number of gradients per row."""
    rows = np.concatenate([r for r, _ in parts]) if parts else np.empty(0, np.int64)
    grads = np.concatenate([g for _, g in parts]) if parts else np.empty((0, 0), np.float32)
    uniq, inverse, cnt = np.unique(rows, return_inverse=True, return_counts=True)
    total = np.zeros((len(uniq), grads.shape[1] if grads.ndim == 2 else 0), np.float32)
    np.add.at(total, inverse.reshape(-1), grads)  # unbuffered, in order: deterministic sums
    return uniq, total / cnt.astype(np.float32)[:, None]


def apply_update(
    spec: EmbeddingSpec, table: np.ndarray, state: dict[str, np.ndarray], rows: np.ndarray, grad: np.ndarray
) -> None:
    """Applies one step's mean gradients ``grad`` of the unique local ``rows`` in place."""
    if len(rows) == 0:
        return
    if spec.optimizer == "adagrad":
        total = state["sum"][rows] + grad * grad
        state["sum"][rows] = total
        table[rows] -= spec.lr * grad / (np.sqrt(total) + np.float32(spec.eps))
        return
    steps = state["steps"][rows] + np.float32(1)
    state["steps"][rows] = steps
    mem = spec.beta1 * state["mem"][rows] + (1.0 - spec.beta1) * grad
    power = spec.beta2 * state["power"][rows] + (1.0 - spec.beta2) * (grad * grad)
    state["mem"][rows], state["power"][rows] = mem, power
    mem_corr = mem / (np.float32(1) - np.power(np.float32(spec.beta1), steps))[:, None]
    power_corr = power / (np.float32(1) - np.power(np.float32(spec.beta2), steps))[:, None]
    table[rows] -= spec.lr * mem_corr / (np.sqrt(power_corr) + np.float32(spec.eps))
