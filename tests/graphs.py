"""Graphs whose every answer is known by formula, for exact tests.

Arithmetic graph with N nodes (input ids):
  in-neighbors of v:  (v + k) % N  for k = 1 .. deg(v),  deg(v) = 1 + v % max_deg
  input edge id of (v, k): the position in the edge list, edges listed by v then k
  feat[v, j] = v * F + j   (float32, exact while N * F < 2**24)
  label[v]   = v % C
  train = ids with v % 5 in {0, 1, 2}, val = v % 5 == 3, test = v % 5 == 4

After partitioning, gids differ from input ids; ``orig_ids`` maps back, so tests express
expectations in input ids and translate.
"""

from __future__ import annotations

from pathlib import Path

import numpy as np

from graphfeed.ingest.graph import GraphData
from graphfeed.ingest.partition import write_partitioned


def arithmetic_degree(v: np.ndarray | int, max_deg: int) -> np.ndarray:
    return 1 + np.asarray(v) % max_deg


def arithmetic_features(v: np.ndarray, feat_dim: int = 4) -> np.ndarray:
    """The "feat" rows of input ids ``v``: ``v * feat_dim + [0, 1, ..]``, float32."""
    v = np.asarray(v, dtype=np.int64)
    return (v[:, None] * feat_dim + np.arange(feat_dim)[None, :]).astype(np.float32)


def arithmetic_labels(v: np.ndarray, num_classes: int = 3) -> np.ndarray:
    """The "label" of input ids ``v``: ``v % num_classes``, int64."""
    return (np.asarray(v, dtype=np.int64) % num_classes).astype(np.int64)


def arithmetic_graph(n: int = 100, max_deg: int = 7, feat_dim: int = 4, num_classes: int = 3) -> GraphData:
    v = np.arange(n, dtype=np.int64)
    deg = arithmetic_degree(v, max_deg)
    dst = np.repeat(v, deg)
    k = np.arange(len(dst)) - np.repeat(np.cumsum(deg) - deg, deg) + 1  # 1..deg(v) within each v
    src = (dst + k) % n
    feat = arithmetic_features(v, feat_dim)
    r = v % 5
    return GraphData(
        name=f"arithmetic-{n}",
        num_nodes=n,
        src=src.astype(np.int64),
        dst=dst.astype(np.int64),
        node_data={"feat": feat, "label": arithmetic_labels(v, num_classes)},
        splits={"train": v[r <= 2], "val": v[r == 3], "test": v[r == 4]},
        num_classes=num_classes,
    )


def expected_in_neighbors(v: int, n: int, max_deg: int) -> set[int]:
    """Input ids of the in-neighbors of input id v."""
    return {(v + k) % n for k in range(1, int(arithmetic_degree(v, max_deg)) + 1)}


def write_arithmetic(root: Path, n: int = 100, max_deg: int = 7, num_partitions: int = 2, feat_dim: int = 4) -> Path:
    """Writes the arithmetic graph partitioned by ``v % num_partitions`` (many cut edges)."""
    g = arithmetic_graph(n, max_deg, feat_dim)
    write_partitioned(g, root, num_partitions, assignment=np.arange(n) % num_partitions)
    return root


def numpy_source_arrays() -> dict[str, np.ndarray]:
    """A valid 5-node graph as the numpy ingest source's files (``<name>.npy`` each)."""
    return {
        "src": np.array([0, 1, 2, 3, 3], dtype=np.int64),
        "dst": np.array([1, 2, 0, 0, 4], dtype=np.int64),
        "feat": np.arange(10, dtype=np.float32).reshape(5, 2),
        "label": np.array([0, 2, 1, 0, 2]),
        "train_idx": np.array([0, 1, 2]),
        "val_idx": np.array([3]),
        "test_idx": np.array([4]),
    }
