"""The in-memory graph every ingest source produces, before partitioning."""

from __future__ import annotations

import logging
from dataclasses import dataclass, field

import numpy as np

from graphfeed.common.errors import InvalidArgument

log = logging.getLogger(__name__)


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
    edge_feat: np.ndarray | None = None  # float32 [E, D], one feature row per edge
    orig_ids: np.ndarray | None = None  # int64 [N], the dataset's own node ids (default: arange)
    extra: dict = field(default_factory=dict)

    @property
    def num_edges(self) -> int:
        return len(self.src)

    def validate(self) -> None:
        """Raises InvalidArgument with a precise message when the graph is inconsistent.

        Checks edge and split ids against ``[0, num_nodes)``, table lengths, NaN/inf in float
        node data, labels (``node_data["label"]``: no negatives, no more classes than nodes) and
        splits (no duplicates, disjoint, "train" not empty when there is one).
        """
        n = self.num_nodes
        if len(self.src) != len(self.dst):
            raise InvalidArgument(f"{self.name}: {len(self.src)} sources but {len(self.dst)} destinations")
        for what, ids in (("src", self.src), ("dst", self.dst)):
            check_ids_in_range(f"{self.name}: {what}", ids, n)
        for name, table in self.node_data.items():
            if len(table) != n:
                raise InvalidArgument(f"{self.name}: node data {name!r} has {len(table)} rows for {n} nodes")
            check_finite(f"{self.name}: node data {name!r}", table)
        if "label" in self.node_data:
            check_labels(f"{self.name}: node data 'label'", self.node_data["label"], n)
        where = {s: f"{self.name}: split {s!r}" for s in self.splits}
        check_splits({where[s]: ids for s, ids in self.splits.items()}, n, where.get("train"))
        if self.edge_ts is not None and len(self.edge_ts) != len(self.src):
            raise InvalidArgument(f"{self.name}: {len(self.edge_ts)} timestamps for {len(self.src)} edges")
        if self.edge_feat is not None:
            if self.edge_feat.ndim != 2 or len(self.edge_feat) != len(self.src):
                raise InvalidArgument(
                    f"{self.name}: edge features of shape {self.edge_feat.shape} for {len(self.src)} edges "
                    "(need [E, D])"
                )
            check_finite(f"{self.name}: edge features", self.edge_feat)
        if self.orig_ids is not None and len(self.orig_ids) != n:
            raise InvalidArgument(f"{self.name}: {len(self.orig_ids)} original ids for {n} nodes")


# The checks below name what they check with ``where`` (a file, or "graph: node data 'feat'"),
# so the numpy source can run them on its files and GraphData.validate on any source's arrays.

_FINITE_CHUNK_ELEMENTS = 1 << 24  # ~64 MiB of bools per step: features can be tens of GiB


def check_ids_in_range(where: str, ids: np.ndarray, n: int) -> None:
    """Raises InvalidArgument unless every node id is in ``[0, n)``, naming the first bad entry."""
    if not len(ids):
        return
    lo, hi = ids.min(), ids.max()
    if lo >= 0 and hi < n:
        return
    first = int(np.flatnonzero((ids < 0) | (ids >= n))[0])
    raise InvalidArgument(
        f"{where}: node ids must be in [0, {n}), got [{lo}, {hi}] (e.g. entry {first} is {ids[first]})"
    )


def check_finite(where: str, table: np.ndarray) -> None:
    """Raises InvalidArgument if a float ``table`` holds NaN or ±inf, naming the first such entry."""
    found = find_nonfinite(table)
    if found is not None:
        count, row, col = found
        raise InvalidArgument(
            f"{where}: values must be finite, found {count} NaN/inf value(s), e.g. {table[row].reshape(-1)[col]} "
            f"at row {row}, column {col}"
        )


def find_nonfinite(table: np.ndarray) -> tuple[int, int, int] | None:
    """(count, row, flat column of the first) of the NaN/±inf entries of a float table, or None."""
    if not np.issubdtype(table.dtype, np.floating) or table.size == 0:
        return None
    rows = table.reshape(len(table), -1)
    step = max(1, _FINITE_CHUNK_ELEMENTS // max(1, rows.shape[1]))
    count, first = 0, (0, 0)
    for start in range(0, len(rows), step):  # chunks: no bool copy of a table that may be huge
        bad = ~np.isfinite(rows[start : start + step])
        if count == 0 and bad.any():
            row, col = (int(x) for x in np.argwhere(bad)[0])
            first = (start + row, col)
        count += int(np.count_nonzero(bad))
    return (count, *first) if count else None


def check_labels(where: str, labels: np.ndarray, n: int) -> int:
    """Checks class ids ``0..C-1`` (there is no "unlabeled" value) and returns C = max + 1."""
    if not len(labels):
        return 0
    if labels.min() < 0:
        first = int(np.flatnonzero(labels < 0)[0])
        raise InvalidArgument(
            f"{where}: labels must be class ids >= 0 (there is no 'unlabeled' value: give such nodes any "
            "class and leave them out of the splits), "
            f"got {int((labels < 0).sum())} negative (e.g. node {first} has label {labels[first]})"
        )
    num_classes = int(labels.max()) + 1
    if num_classes > n:
        first = int(np.argmax(labels))
        raise InvalidArgument(
            f"{where}: labels are not class ids: max label {labels[first]} (node {first}) "
            f"would mean {num_classes} classes for {n} nodes"
        )
    unused = np.flatnonzero(np.bincount(labels.astype(np.int64), minlength=num_classes) == 0)
    used = num_classes - len(unused)
    if len(unused) > used:  # e.g. a stray 1000 among labels 0 and 1: 1001 model outputs, 998 never seen
        raise InvalidArgument(
            f"{where}: labels are not class ids 0..C-1: {used} distinct values up to {num_classes - 1}, so "
            f"{len(unused)} of the ids 0..{num_classes - 1} have no node (e.g. {unused[0]}); remap them to "
            f"0..{used - 1} (np.unique(labels, return_inverse=True)[1])"
        )
    if len(unused):
        log.warning(
            "%s: %d of the class ids 0..%d have no node (e.g. %s); the model still gets %d outputs",
            where,
            len(unused),
            num_classes - 1,
            unused[:5].tolist(),
            num_classes,
        )
    return num_classes


def check_splits(splits: dict[str, np.ndarray], n: int, train: str | None) -> None:
    """Checks the splits (keyed by ``where``): ids in ``[0, n)``, no duplicate ids, no id in two
    splits, and the one keyed ``train`` (if given) not empty."""
    owner = np.full(n, -1, dtype=np.int8 if len(splits) < 127 else np.int64)
    names = list(splits)
    for i, (where, ids) in enumerate(splits.items()):
        if not len(ids) and where == train:
            raise InvalidArgument(f"{where}: the train split is empty; training needs at least one node")
        check_ids_in_range(where, ids, n)
        ids = np.asarray(ids, dtype=np.int64)
        dup = _first_duplicate(ids)
        if dup is not None:
            raise InvalidArgument(
                f"{where}: node ids must be distinct, node {dup} is listed {int((ids == dup).sum())} times"
            )
        taken = owner[ids] >= 0
        if taken.any():
            v = int(ids[np.flatnonzero(taken)[0]])
            raise InvalidArgument(
                f"{where}: splits must be disjoint, {int(taken.sum())} node(s) are also in {names[owner[v]]} "
                f"(e.g. node {v})"
            )
        owner[ids] = i


def _first_duplicate(ids: np.ndarray) -> int | None:
    s = np.sort(ids)
    same = np.flatnonzero(s[1:] == s[:-1])
    return int(s[same[0]]) if len(same) else None


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


DEFAULT_FRACTIONS = (0.6, 0.2, 0.2)  # train / val / test of a random split


def symmetrize(
    src: np.ndarray, dst: np.ndarray, ts: np.ndarray | None = None, drop_self_loops: bool = False
) -> tuple[np.ndarray, np.ndarray, np.ndarray | None]:
    """Adds the reverse of every edge, then removes exact duplicates (same src, dst and ts).

    The result lists the surviving input edges in input order, then the added reverses.
    """
    pick = symmetric_positions(src, dst, ts, drop_self_loops)
    all_src, all_dst = np.concatenate([src, dst])[pick], np.concatenate([dst, src])[pick]
    return all_src, all_dst, None if ts is None else np.concatenate([ts, ts])[pick]


def symmetrize_edges(
    src: np.ndarray, dst: np.ndarray, ts: np.ndarray | None = None, edge_feat: np.ndarray | None = None
) -> tuple[np.ndarray, np.ndarray, np.ndarray | None, np.ndarray | None]:
    """:func:`symmetrize` (self-loops kept) with each edge's feature row following its edge."""
    pick = symmetric_positions(src, dst, ts)
    src, dst = np.concatenate([src, dst])[pick], np.concatenate([dst, src])[pick]
    ts = None if ts is None else np.concatenate([ts, ts])[pick]
    return src, dst, ts, None if edge_feat is None else np.concatenate([edge_feat, edge_feat])[pick]


def symmetric_positions(
    src: np.ndarray, dst: np.ndarray, ts: np.ndarray | None = None, drop_self_loops: bool = False
) -> np.ndarray:
    """The edges :func:`symmetrize` keeps, as positions in ``[edges, reversed edges]`` (length 2E),
    so per-edge data (features) can follow them."""
    both = np.concatenate([np.arange(len(src)), np.arange(len(src))])
    keep = np.flatnonzero(np.tile(src != dst, 2)) if drop_self_loops else np.arange(2 * len(src))
    all_src, all_dst = np.concatenate([src, dst])[keep], np.concatenate([dst, src])[keep]
    all_ts = None if ts is None else ts[both[keep]]
    return keep[_first_occurrences(all_src, all_dst, all_ts)]


def _first_occurrences(src: np.ndarray, dst: np.ndarray, ts: np.ndarray | None) -> np.ndarray:
    """Ascending positions of the first copy of each distinct (src, dst[, ts])."""
    keys = (dst, src) if ts is None else (ts, dst, src)
    order = np.lexsort(keys)  # stable: equal keys stay in input order
    new_group = np.ones(len(order), dtype=bool)
    same = (src[order[1:]] == src[order[:-1]]) & (dst[order[1:]] == dst[order[:-1]])
    if ts is not None:
        same &= ts[order[1:]] == ts[order[:-1]]
    new_group[1:] = ~same
    return np.sort(order[new_group])
