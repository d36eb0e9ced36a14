"""Edge splits for link prediction: train / val / test edges of one relation (issue 26).

:func:`split_edges` draws a seeded split of one relation's edges and makes it *transductive*
the way DGL's and OGB's link-prediction examples do: the val and test edges leave the
message-passing graph, and so do their reverse twins (the ``rev_`` relation's ``(v, u)`` of a
held-out ``(u, v)``, or the ``(v, u)`` of the same relation when it is its own reverse, as a
symmetric homogeneous graph's is), so no model sees a held-out link through either direction.
The train edges stay: the loader excludes each minibatch's seed edges and their twins from its
sampled neighbourhoods instead (DGL's ``exclude="reverse_id"``), which needs both edges' ids.

A split is a table of rows ``(src, dst, etype, eid, rev_eid)`` (int64 [n, 5], :data:`COLUMNS`):
``eid`` is the edge's id in the returned graph (its position in the edge-type-major edge list,
which partitioning keeps as the global edge id) and ``rev_eid`` its twin's, each -1 where there
is none (every held-out row, and a train edge without a reverse).

Which edges are candidates: each distinct ``(u, v)`` pair of the relation once (the first of
parallel edges), and for a relation that is its own reverse each unordered pair once, self-loops
left out (a node's link to itself is no prediction).
"""

from __future__ import annotations

import dataclasses
import math
from collections.abc import Sequence

import numpy as np

from graphfeed.common.errors import InvalidArgument
from graphfeed.common.partition import EDGE_SPLITS
from graphfeed.common.schema import GraphSchema, etype_name
from graphfeed.ingest.graph import GraphData

__all__ = [
    "COLUMNS",
    "DEFAULT_FRACTIONS",
    "GivenEdges",
    "etype_of",
    "parse_fractions",
    "reverse_etype",
    "split_edges",
    "split_edges_given",
]

COLUMNS = ("src", "dst", "etype", "eid", "rev_eid")
"""The columns of an edge-split table, in order."""

DEFAULT_FRACTIONS = (0.85, 0.05, 0.1)
"""Train / val / test shares of a split drawn by :func:`split_edges` (``--edge-fractions``)."""


def parse_fractions(text: str | Sequence[float]) -> tuple[float, float, float]:
    """Train / val / test fractions from ``"0.85,0.05,0.1"`` (or a sequence), checked.

    Raises:
        InvalidArgument: not three numbers, a negative one, or a sum other than 1.
    """
    try:
        values = tuple(float(x) for x in (text.split(",") if isinstance(text, str) else text))
    except ValueError:
        raise InvalidArgument(f"edge split fractions must be three numbers 'train,val,test', got {text!r}") from None
    if len(values) != 3 or any(not math.isfinite(v) or v < 0 for v in values):
        raise InvalidArgument(f"edge split fractions must be three numbers >= 0 (train,val,test), got {text!r}")
    if abs(sum(values) - 1.0) > 1e-6:
        raise InvalidArgument(f"edge split fractions must sum to 1, got {list(values)} (sum {sum(values):.6g})")
    if values[0] == 0:
        raise InvalidArgument("the train fraction of an edge split must be > 0: nothing to train on")
    return values


def etype_of(g: GraphData, relation: str) -> int:
    """The edge type ``relation`` names (``"src:rel:dst"``, or a relation only one type has).

    Raises:
        InvalidArgument: an unknown or ambiguous relation.
    """
    return GraphSchema(g.ntypes, g.etypes, g.ntype_starts()[None, :], g.etype_starts()).etype_id(relation)


def reverse_etype(g: GraphData, r: int) -> int | None:
    """The edge type holding the reverse twins of type ``r``'s edges: ``(d, "rev_" + rel, s)``
    (or the relation ``rev_`` was stripped from), else ``r`` itself when its two ends have one
    node type (a symmetric relation: Cora's citations, LastFM's friendships), else None."""
    s, rel, d = g.etypes[r]
    twin = (d, rel[4:], s) if rel.startswith("rev_") else (d, f"rev_{rel}", s)
    if twin in g.etypes:
        return g.etypes.index(twin)
    return r if s == d else None


def _first(keys: np.ndarray) -> np.ndarray:
    """Positions of the first occurrence of each distinct key, in position order."""
    _, first = np.unique(keys, return_index=True)
    return np.sort(first)


def _lookup(keys: np.ndarray, wanted: np.ndarray) -> np.ndarray:
    """For each of ``wanted``, the position of its first occurrence in ``keys``, or -1."""
    order = np.argsort(keys, kind="stable")
    sorted_keys = keys[order]
    at = np.minimum(np.searchsorted(sorted_keys, wanted), max(0, len(keys) - 1))
    found = sorted_keys[at] == wanted if len(keys) else np.zeros(len(wanted), bool)
    return np.where(found, order[at], -1)


@dataclasses.dataclass(frozen=True)
class GivenEdges:
    """One split's edges as a user's file lists them: endpoints ``u``, ``v`` (gids) of the
    file's data lines ``lines``, and the ids as written (``u_text``, ``v_text``) for messages."""

    file: str
    u: np.ndarray
    v: np.ndarray
    lines: np.ndarray
    u_text: list[str]
    v_text: list[str]

    def at(self, i: int) -> str:
        return f"{self.file}: line {self.lines[i]}: edge ({self.u_text[i]}, {self.v_text[i]})"


@dataclasses.dataclass(frozen=True)
class _Relation:
    """The edge type being split, its reverse twins' type, and its edges."""

    r: int
    rev: int | None
    lo: int
    src: np.ndarray
    dst: np.ndarray
    n: np.int64

    @property
    def symmetric(self) -> bool:
        return self.rev == self.r

    def keys(self, u: np.ndarray, v: np.ndarray) -> np.ndarray:
        """One key per pair; a relation that is its own reverse has one per unordered pair."""
        u, v = np.asarray(u, np.int64), np.asarray(v, np.int64)
        return np.minimum(u, v) * self.n + np.maximum(u, v) if self.symmetric else u * self.n + v

    def candidates(self) -> np.ndarray:
        """Positions (within the type) of each distinct pair's first edge, self-loops left out
        when the relation is its own reverse."""
        keep = self.src != self.dst if self.symmetric else np.ones(len(self.src), dtype=bool)
        return np.flatnonzero(keep)[_first(self.keys(self.src, self.dst)[keep])]


def _relation(g: GraphData, relation: str) -> _Relation:
    if g.edge_ts is not None:
        raise InvalidArgument(f"{g.name}: edge splits are for static graphs; a temporal graph trains TGN on time order")
    r = etype_of(g, relation)
    starts = g.etype_starts()
    lo, hi = int(starts[r]), int(starts[r + 1])
    src, dst = np.asarray(g.src[lo:hi], np.int64), np.asarray(g.dst[lo:hi], np.int64)
    return _Relation(r, reverse_etype(g, r), lo, src, dst, np.int64(g.num_nodes))


def split_edges(
    g: GraphData, relation: str, fractions: Sequence[float] = DEFAULT_FRACTIONS, seed: int = 0
) -> GraphData:
    """``g`` with ``edge_splits`` of ``relation`` and the held-out edges (and twins) removed.

    Args:
        g: the graph (types homogenized; see :class:`~graphfeed.ingest.graph.GraphData`).
        relation: the edge type to predict: ``"src:rel:dst"``, or a relation name only one
            edge type has (``"_E"`` is a one-type graph's).
        fractions: train / val / test shares of the candidate edges (see :func:`parse_fractions`).
        seed: seed of the permutation; the same arguments give the same split.

    Returns:
        A new :class:`GraphData` sharing ``g``'s node data, with ``edge_splits["train" | "val" |
        "test"]`` (int64 [n, 5], :data:`COLUMNS`, rows in split order) and ``extra["edge_split"]``
        describing it.

    Raises:
        InvalidArgument: an unknown or ambiguous relation, bad fractions, a relation with no
            candidate edge, or a graph with edge timestamps (temporal link prediction is TGN's).
    """
    fractions = parse_fractions(fractions)
    rel = _relation(g, relation)
    cand = rel.candidates()
    if len(cand) == 0:
        raise InvalidArgument(f"{g.name}: edge type {etype_name(g.etypes[rel.r])} has no edge to split")
    perm = cand[np.random.default_rng(seed).permutation(len(cand))]
    n_train = max(1, round(fractions[0] * len(perm)))
    n_val = min(len(perm) - n_train, round(fractions[1] * len(perm)))
    held = {"val": perm[n_train : n_train + n_val], "test": perm[n_train + n_val :]}
    pairs = {name: (rel.src[ids], rel.dst[ids]) for name, ids in held.items()}
    return _split(g, rel, perm[:n_train], pairs, {"fractions": list(fractions), "seed": int(seed)})


def split_edges_given(g: GraphData, relation: str, given: dict[str, GivenEdges]) -> GraphData:
    """:func:`split_edges` with the user's own split: ``given["val" | "test" | "train"]`` (any of
    them; a file's rows keep its order). Held-out edges need not be in the graph (OGB's graphs
    hold the train edges only); those that are leave it, twins too. Without ``"train"``, every
    other candidate edge of the relation trains; a given train edge must be one of the graph's.

    Raises:
        InvalidArgument: an unknown split name, an edge listed twice or in two splits, a train
            edge the graph does not have, or no train edge left; each names its file and line.
    """
    unknown = sorted(set(given) - set(EDGE_SPLITS))
    if unknown:
        raise InvalidArgument(f"edge split names are {list(EDGE_SPLITS)}, got {unknown}")
    rel = _relation(g, relation)
    seen: dict[int, tuple[str, int]] = {}
    for name in EDGE_SPLITS:
        if name not in given:
            continue
        e = given[name]
        for i, key in enumerate(rel.keys(e.u, e.v).tolist()):
            if key in seen:
                other, j = seen[key]
                raise InvalidArgument(f"{e.at(i)} is also on line {given[other].lines[j]} of {given[other].file}")
            seen[key] = (name, i)
    cand = rel.candidates()
    cand_keys = rel.keys(rel.src[cand], rel.dst[cand])
    if "train" in given:
        e = given["train"]
        at = _lookup(cand_keys, rel.keys(e.u, e.v))
        if (at < 0).any():
            i = int(np.flatnonzero(at < 0)[0])
            raise InvalidArgument(
                f"{e.at(i)} is not an edge of {etype_name(g.etypes[rel.r])} in the graph"
                + (" (a self-loop is never a candidate)" if e.u[i] == e.v[i] and rel.symmetric else "")
                + ": a train edge passes messages, so the graph must have it"
            )
        train = cand[at]
    else:
        held_keys = np.asarray([k for k, (name, _) in seen.items() if name != "train"], dtype=np.int64)
        train = cand[~np.isin(cand_keys, held_keys)]
    if len(train) == 0:
        raise InvalidArgument(f"{g.name}: no train edge of {etype_name(g.etypes[rel.r])} is left")
    pairs = {name: (given[name].u, given[name].v) if name in given else (_NONE, _NONE) for name in ("val", "test")}
    return _split(g, rel, train, pairs, {"files": {name: e.file for name, e in given.items()}})


_NONE = np.empty(0, dtype=np.int64)


def _split(
    g: GraphData, rel: _Relation, train: np.ndarray, held: dict[str, tuple[np.ndarray, np.ndarray]], meta: dict
) -> GraphData:
    """``g`` with ``train`` (positions within the relation) and the ``held`` pairs as its edge
    splits, every edge of a held pair (parallel copies and reverse twins) removed."""
    hu = np.concatenate([np.asarray(u, np.int64) for u, _ in held.values()])
    hv = np.concatenate([np.asarray(v, np.int64) for _, v in held.values()])
    n, r, rev, lo = rel.n, rel.r, rel.rev, rel.lo
    starts = g.etype_starts()
    drop = np.zeros(g.num_edges, dtype=bool)
    drop[lo : lo + len(rel.src)] = np.isin(rel.src * n + rel.dst, hu * n + hv)  # every parallel copy of a held-out pair
    if rev is not None:
        rlo, rhi = int(starts[rev]), int(starts[rev + 1])
        drop[rlo:rhi] |= np.isin(np.asarray(g.src[rlo:rhi], np.int64) * n + g.dst[rlo:rhi], hv * n + hu)
    kept = ~drop
    new_pos = np.cumsum(kept) - 1  # position of a kept edge in the new edge list
    counts = tuple(int(c) for c in np.diff(np.concatenate([[0], np.cumsum(kept)])[starts]))
    out = dataclasses.replace(
        g,
        src=np.asarray(g.src)[kept],
        dst=np.asarray(g.dst)[kept],
        edge_feat=None if g.edge_feat is None else np.asarray(g.edge_feat)[kept],
        etype_counts=counts if g.etype_counts or len(g.etypes) > 1 else (),
        extra={
            **g.extra,
            "edge_split": {
                "relation": etype_name(g.etypes[r]),
                "reverse": None if rev is None else etype_name(g.etypes[rev]),
                **meta,
                "held_out_edges_removed": int(drop.sum()),
            },
        },
    )
    out.edge_splits = {"train": _train_rows(g, rel, train, new_pos, kept)}
    for name, (u, v) in held.items():
        rows = np.full((len(u), 5), -1, dtype=np.int64)
        rows[:, 0], rows[:, 1], rows[:, 2] = u, v, r
        out.edge_splits[name] = rows
    return out


def _train_rows(g: GraphData, rel: _Relation, ids: np.ndarray, new_pos: np.ndarray, kept: np.ndarray) -> np.ndarray:
    """The train table of the candidate edges ``ids`` (positions within the relation): each
    edge's id in the new graph and its reverse twin's (-1 where none is left)."""
    n, r, rev, lo = rel.n, rel.r, rel.rev, rel.lo
    u, v = rel.src[ids], rel.dst[ids]
    rows = np.full((len(ids), 5), -1, dtype=np.int64)
    rows[:, 0], rows[:, 1], rows[:, 2] = u, v, r
    rows[:, 3] = new_pos[lo + ids]
    if rev is not None:
        starts = g.etype_starts()
        rlo, rhi = int(starts[rev]), int(starts[rev + 1])
        rkeys = np.asarray(g.src[rlo:rhi], np.int64) * n + g.dst[rlo:rhi]
        rkeys[~kept[rlo:rhi]] = -1  # dropped edges are nobody's twin
        at = _lookup(rkeys, v * n + u)
        rows[:, 4] = np.where(at >= 0, new_pos[rlo + np.maximum(at, 0)], -1)
    return rows
