"""The in-memory graph every ingest source produces, before partitioning."""

from __future__ import annotations

from dataclasses import dataclass, field

import numpy as np

from graphfeed.common.errors import InvalidArgument


@dataclass
class GraphData:
    """A homogeneous graph with node data and splits, ids ``0..num_nodes-1``.

    Edges are directed ``src -> dst`` (messages flow from src to dst; sampling picks
    in-neighbors). Sources that model undirected graphs store both directions.
    """

    name: str
    num_nodes: int
    src: np.ndarray  # int64 [E]
    dst: np.ndarray  # int64 [E]
    node_data: dict[str, np.ndarray]  # e.g. "feat" [N, F] float32, "label" [N] int64
    splits: dict[str, np.ndarray]  # e.g. "train"/"val"/"test": node ids
    num_classes: int = 0
    edge_ts: np.ndarray | None = None  # int64 [E], one timestamp per edge
    orig_ids: np.ndarray | None = None  # int64 [N], the dataset's own node ids (default: arange)
    extra: dict = field(default_factory=dict)

    @property
    def num_edges(self) -> int:
        return len(self.src)

    def validate(self) -> None:
        """Raises InvalidArgument with a precise message when the graph is inconsistent."""
        n = self.num_nodes
        if len(self.src) != len(self.dst):
            raise InvalidArgument(f"{self.name}: {len(self.src)} sources but {len(self.dst)} destinations")
        for what, ids in (("src", self.src), ("dst", self.dst)):
            if len(ids) and (ids.min() < 0 or ids.max() >= n):
                raise InvalidArgument(f"{self.name}: {what} ids must be in [0, {n}), got [{ids.min()}, {ids.max()}]")
        for name, table in self.node_data.items():
            if len(table) != n:
                raise InvalidArgument(f"{self.name}: node data {name!r} has {len(table)} rows for {n} nodes")
        for name, ids in self.splits.items():
            if len(ids) and (ids.min() < 0 or ids.max() >= n):
                raise InvalidArgument(f"{self.name}: split {name!r} has ids outside [0, {n})")
        if self.edge_ts is not None and len(self.edge_ts) != len(self.src):
            raise InvalidArgument(f"{self.name}: {len(self.edge_ts)} timestamps for {len(self.src)} edges")
        if self.orig_ids is not None and len(self.orig_ids) != n:
            raise InvalidArgument(f"{self.name}: {len(self.orig_ids)} original ids for {n} nodes")


def random_split(num_nodes: int, fractions: tuple[float, float, float], seed: int) -> dict[str, np.ndarray]:
    """Seeded random train/val/test split of all nodes (ids ascending within each split)."""
    perm = np.random.default_rng(seed).permutation(num_nodes)
    n_train = round(fractions[0] * num_nodes)
    n_val = round(fractions[1] * num_nodes)
    return {
        "train": np.sort(perm[:n_train]),
        "val": np.sort(perm[n_train : n_train + n_val]),
        "test": np.sort(perm[n_train + n_val :]),
    }
