"""The in-memory graph every ingest source produces, before partitioning."""

from __future__ import annotations

import logging
from dataclasses import dataclass, field

import numpy as np

from graphfeed.common.errors import InvalidArgument
from graphfeed.common.schema import DEFAULT_ETYPE, DEFAULT_NTYPE, CanonicalEtype, check_type_name
from graphfeed.ingest.checks import check_finite, check_ids_in_range, check_labels, check_splits, find_nonfinite

__all__ = [
    "DEFAULT_FRACTIONS",
    "GraphData",
    "check_finite",
    "check_ids_in_range",
    "check_labels",
    "check_splits",
    "find_nonfinite",
    "hetero_graph",
    "random_split",
    "symmetrize",
    "symmetrize_edges",
]

log = logging.getLogger(__name__)


@dataclass
class GraphData:
    """A graph with node data and splits, ids ``0..num_nodes-1``, homogenized when it has types.

    Edges are directed ``src -> dst`` (messages flow from src to dst; sampling picks
    in-neighbors). Sources that model undirected graphs store both directions.

    Types (see :mod:`graphfeed.common.schema`): the nodes are type-major (the first
    ``ntype_counts[0]`` ids are of ``ntypes[0]``, ...) and so are the edges (the first
    ``etype_counts[0]`` edges are of ``etypes[0]``, ...). A node-data table is keyed
    ``"ntype/name"`` in a graph of several node types and holds one row per node of that type
    (in id order); in a one-type graph it is keyed ``name`` and covers every node. Splits hold
    global ids (of any types). :func:`hetero_graph` builds one from per-type arrays.
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
    ntypes: tuple[str, ...] = (DEFAULT_NTYPE,)
    ntype_counts: tuple[int, ...] = ()  # () = every node is of ntypes[0]
    etypes: tuple[CanonicalEtype, ...] = (DEFAULT_ETYPE,)
    etype_counts: tuple[int, ...] = ()  # () = every edge is of etypes[0]
    # link prediction: "train"/"val"/"test" -> int64 [n, 5] (src, dst, etype, eid, rev_eid); see ingest.edge_split
    edge_splits: dict[str, np.ndarray] = field(default_factory=dict)

    @property
    def num_edges(self) -> int:
        return len(self.src)

    @property
    def is_hetero(self) -> bool:
        return len(self.ntypes) > 1 or len(self.etypes) > 1

    def node_counts(self) -> tuple[int, ...]:
        return self.ntype_counts or (self.num_nodes,)

    def edge_counts(self) -> tuple[int, ...]:
        return self.etype_counts or (self.num_edges,)

    def ntype_starts(self) -> np.ndarray:
        """int64 [T+1]: the ids of type ``t`` are ``[starts[t], starts[t+1])``."""
        return np.concatenate([[0], np.cumsum(self.node_counts())]).astype(np.int64)

    def etype_starts(self) -> np.ndarray:
        """int64 [R+1]: the edges of type ``r`` are ``[starts[r], starts[r+1])``."""
        return np.concatenate([[0], np.cumsum(self.edge_counts())]).astype(np.int64)

    def table_ntype(self, key: str) -> str:
        """The node type whose rows node-data table ``key`` holds."""
        if len(self.ntypes) == 1:
            return self.ntypes[0]
        ntype, sep, name = key.partition("/")
        if not sep or ntype not in self.ntypes or not name:
            raise InvalidArgument(
                f"{self.name}: node data {key!r} must be keyed 'ntype/name' with ntype one of {list(self.ntypes)}"
            )
        return ntype

    def table_rows(self, key: str) -> int:
        """Rows node-data table ``key`` must have (the nodes of its type)."""
        return int(self.node_counts()[self.ntypes.index(self.table_ntype(key))])

    def validate(self) -> None:
        """Raises InvalidArgument with a precise message when the graph is inconsistent.

        Checks edge and split ids against ``[0, num_nodes)``, table lengths, NaN/inf in float
        node data, labels (``node_data["label"]``: no negatives, no more classes than nodes) and
        splits (no duplicates, disjoint, "train" not empty when there is one).
        """
        n = self.num_nodes
        if len(self.src) != len(self.dst):
            raise InvalidArgument(f"{self.name}: {len(self.src)} sources but {len(self.dst)} destinations")
        self._validate_types()
        for what, ids in (("src", self.src), ("dst", self.dst)):
            check_ids_in_range(f"{self.name}: {what}", ids, n)
        if self.is_hetero:
            self._validate_edge_types()
        for name, table in self.node_data.items():
            rows = self.table_rows(name)
            if len(table) != rows:
                what = "nodes" if len(self.ntypes) == 1 else f"{self.table_ntype(name)} nodes"
                raise InvalidArgument(f"{self.name}: node data {name!r} has {len(table)} rows for {rows} {what}")
            check_finite(f"{self.name}: node data {name!r}", table)
            if name.rpartition("/")[2] == "label":
                check_labels(f"{self.name}: node data {name!r}", table, rows)
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
        for split, edge_rows in self.edge_splits.items():
            self._validate_edge_split(split, edge_rows)
        if self.orig_ids is not None and len(self.orig_ids) != n:
            raise InvalidArgument(f"{self.name}: {len(self.orig_ids)} original ids for {n} nodes")
        if self.is_hetero and self.edge_ts is not None:
            raise InvalidArgument(
                f"{self.name}: edge timestamps need a graph of one node type and one edge type "
                f"(temporal sampling and appends are homogeneous), this one has {len(self.ntypes)} node types "
                f"and {len(self.etypes)} edge types"
            )

    def _validate_edge_split(self, name: str, rows: np.ndarray) -> None:
        what = f"{self.name}: edge split {name!r}"
        if rows.ndim != 2 or rows.shape[1] != 5 or rows.dtype != np.int64:
            raise InvalidArgument(
                f"{what} must be int64 [n, 5] (src, dst, etype, eid, rev_eid), got {rows.dtype} {rows.shape}"
            )
        check_ids_in_range(f"{what} src", rows[:, 0], self.num_nodes)
        check_ids_in_range(f"{what} dst", rows[:, 1], self.num_nodes)
        check_ids_in_range(f"{what} etype", rows[:, 2], len(self.etypes))
        for col, label in ((3, "eid"), (4, "rev_eid")):
            bad = (rows[:, col] < -1) | (rows[:, col] >= self.num_edges)
            if bad.any():
                raise InvalidArgument(f"{what}: {label} {int(rows[bad, col][0])} is neither -1 nor an edge id")

    def _validate_types(self) -> None:
        for t in self.ntypes:
            check_type_name("node type", t)
        for e in self.etypes:
            for part in e:
                check_type_name("edge type part", part)
            if e[0] not in self.ntypes or e[2] not in self.ntypes:
                raise InvalidArgument(f"{self.name}: edge type {e} names a node type not in {list(self.ntypes)}")
        if len(set(self.ntypes)) != len(self.ntypes) or len(set(self.etypes)) != len(self.etypes):
            raise InvalidArgument(f"{self.name}: node and edge types must be distinct")
        counts, ecounts = self.node_counts(), self.edge_counts()
        if len(counts) != len(self.ntypes) or sum(counts) != self.num_nodes or min(counts) < 0:
            raise InvalidArgument(
                f"{self.name}: node counts {list(counts)} per type {list(self.ntypes)} do not add up to "
                f"{self.num_nodes} nodes"
            )
        if len(ecounts) != len(self.etypes) or sum(ecounts) != self.num_edges or min(ecounts) < 0:
            raise InvalidArgument(
                f"{self.name}: edge counts {list(ecounts)} per type do not add up to {self.num_edges} edges"
            )

    def _validate_edge_types(self) -> None:
        nstart, estart = self.ntype_starts(), self.etype_starts()
        index = {t: i for i, t in enumerate(self.ntypes)}
        for r, (s, rel, d) in enumerate(self.etypes):
            lo, hi = estart[r], estart[r + 1]
            for what, ids, t in (("src", self.src[lo:hi], s), ("dst", self.dst[lo:hi], d)):
                a, b = nstart[index[t]], nstart[index[t] + 1]
                bad = (ids < a) | (ids >= b)
                if bad.any():
                    i = int(np.flatnonzero(bad)[0])
                    raise InvalidArgument(
                        f"{self.name}: edge type {s}:{rel}:{d}: {what} of edge {i} is node {int(ids[i])}, "
                        f"not a {t} node (those are [{a}, {b}))"
                    )


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


def hetero_graph(
    name: str,
    num_nodes: dict[str, int],
    edges: dict[CanonicalEtype, tuple[np.ndarray, np.ndarray]],
    node_data: dict[str, dict[str, np.ndarray]] | None = None,
    splits: dict[str, dict[str, np.ndarray]] | None = None,
    *,
    num_classes: int = 0,
    add_reverse: bool = False,
    orig_ids: dict[str, np.ndarray] | None = None,
    extra: dict | None = None,
) -> GraphData:
    """A typed graph, homogenized into :class:`GraphData` (validated).

    Args:
        name: dataset name.
        num_nodes: nodes per type, in type order (``{"paper": 1000, "author": 2000}``).
        edges: per canonical edge type ``(src_type, rel, dst_type)``, type-wise ``(src, dst)``
            ids; edge types in this order (types with no edges allowed).
        node_data: per node type, its tables (``{"paper": {"feat": [N_paper, F], "label": [N_paper]}}``);
            types left out are featureless.
        splits: per node type, split name -> type-wise ids; merged into global splits of the
            same names.
        num_classes: classes of the labels (0: from the largest label + 1).
        add_reverse: also add ``(dst_type, "rev_" + rel, src_type)`` for every edge type (DGL's
            ``dgl.add_reverse_edges`` naming for heterographs), after the given ones.
        orig_ids: per node type, the dataset's own id of each node (default: the type-wise id).
        extra: free-form manifest entries.
    """
    ntypes = tuple(num_nodes)
    for t in ntypes:
        check_type_name("node type", t)
    starts = dict(zip(ntypes, np.concatenate([[0], np.cumsum(list(num_nodes.values()))])[:-1].tolist()))
    etypes = list(edges)
    pairs = [edges[e] for e in etypes]
    if add_reverse:
        for (s, rel, d), (src, dst) in list(zip(etypes, pairs)):
            rev = (d, f"rev_{rel}", s)
            if rev in edges:
                raise InvalidArgument(f"{name}: --add-reverse would add {rev}, which the graph already has")
            etypes.append(rev)
            pairs.append((dst, src))
    srcs, dsts = [], []
    for (s, rel, d), (src, dst) in zip(etypes, pairs):
        for t in (s, d):
            if t not in starts:
                raise InvalidArgument(
                    f"{name}: edge type {s}:{rel}:{d} names unknown node type {t!r}; known: {list(ntypes)}"
                )
        src, dst = np.asarray(src, dtype=np.int64), np.asarray(dst, dtype=np.int64)
        if src.shape != dst.shape or src.ndim != 1:
            raise InvalidArgument(
                f"{name}: edge type {s}:{rel}:{d}: src {src.shape} and dst {dst.shape} must be equal 1-D"
            )
        for what, ids, t in (("src", src, s), ("dst", dst, d)):
            check_ids_in_range(f"{name}: edge type {s}:{rel}:{d} {what} ({t} ids)", ids, num_nodes[t])
        srcs.append(src + starts[s])
        dsts.append(dst + starts[d])
    data: dict[str, np.ndarray] = {}
    for t, tables in (node_data or {}).items():
        if t not in starts:
            raise InvalidArgument(f"{name}: node data for unknown node type {t!r}; known: {list(ntypes)}")
        for key, table in tables.items():
            data[key if len(ntypes) == 1 else f"{t}/{key}"] = np.asarray(table)
    merged: dict[str, list[np.ndarray]] = {}
    for t, named in (splits or {}).items():
        if t not in starts:
            raise InvalidArgument(f"{name}: split for unknown node type {t!r}; known: {list(ntypes)}")
        for split, ids in named.items():
            ids = np.asarray(ids, dtype=np.int64)
            check_ids_in_range(f"{name}: split {split!r} of {t}", ids, num_nodes[t])
            merged.setdefault(split, []).append(ids + starts[t])
    orig = None
    if orig_ids is not None:
        orig = np.concatenate(
            [np.asarray(orig_ids[t], np.int64) if t in orig_ids else np.arange(num_nodes[t]) for t in ntypes]
        )
    if num_classes == 0:
        labels = [tb for key, tb in data.items() if key.rpartition("/")[2] == "label" and len(tb)]
        num_classes = max((int(tb.max()) + 1 for tb in labels), default=0)
    empty = np.empty(0, np.int64)
    g = GraphData(
        name=name,
        num_nodes=int(sum(num_nodes.values())),
        src=np.concatenate(srcs) if srcs else empty,
        dst=np.concatenate(dsts) if dsts else empty,
        node_data=data,
        splits={s: np.sort(np.concatenate(parts)) for s, parts in merged.items()},
        num_classes=num_classes,
        orig_ids=orig,
        extra=dict(extra or {}),
        ntypes=ntypes,
        ntype_counts=tuple(int(num_nodes[t]) for t in ntypes),
        etypes=tuple(etypes),
        etype_counts=tuple(len(s) for s in srcs),
    )
    g.validate()
    return g
