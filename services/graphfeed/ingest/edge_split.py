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

__all__ = ["COLUMNS", "parse_fractions", "reverse_etype", "split_edges"]

COLUMNS = ("src", "dst", "etype", "eid", "rev_eid")
"""The columns of an edge-split table, in order."""


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


def _schema(g: GraphData) -> GraphSchema:
    return GraphSchema(g.ntypes, g.etypes, g.ntype_starts()[None, :], g.etype_starts())


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


def split_edges(
    g: GraphData, relation: str, fractions: Sequence[float] = (0.85, 0.05, 0.1), seed: int = 0
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
    if g.edge_ts is not None:
        raise InvalidArgument(f"{g.name}: edge splits are for static graphs; a temporal graph trains TGN on time order")
    r = _schema(g).etype_id(relation)
    rev = reverse_etype(g, r)
    n = np.int64(g.num_nodes)
    starts = g.etype_starts()
    lo, hi = int(starts[r]), int(starts[r + 1])
    src, dst = np.asarray(g.src[lo:hi], np.int64), np.asarray(g.dst[lo:hi], np.int64)
    if rev == r:  # its own reverse: one candidate per unordered pair, no self-loops
        keep = src != dst
        cand = np.flatnonzero(keep)[_first(np.minimum(src, dst)[keep] * n + np.maximum(src, dst)[keep])]
    else:
        cand = _first(src * n + dst)
    if len(cand) == 0:
        raise InvalidArgument(f"{g.name}: edge type {etype_name(g.etypes[r])} has no edge to split")
    perm = cand[np.random.default_rng(seed).permutation(len(cand))]
    n_train = max(1, round(fractions[0] * len(perm)))
    n_val = min(len(perm) - n_train, round(fractions[1] * len(perm)))
    parts = dict(zip(EDGE_SPLITS, (perm[:n_train], perm[n_train : n_train + n_val], perm[n_train + n_val :])))

    held = np.concatenate([parts["val"], parts["test"]])
    hu, hv = src[held], dst[held]
    drop = np.zeros(g.num_edges, dtype=bool)
    drop[lo:hi] = np.isin(src * n + dst, hu * n + hv)  # every parallel copy of a held-out pair
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
                "fractions": list(fractions),
                "seed": int(seed),
                "held_out_edges_removed": int(drop.sum()),
            },
        },
    )
    out.edge_splits = {name: _rows(g, r, rev, lo, ids, new_pos, kept, name == "train") for name, ids in parts.items()}
    return out


def _rows(
    g: GraphData, r: int, rev: int | None, lo: int, ids: np.ndarray, new_pos: np.ndarray, kept: np.ndarray, train: bool
) -> np.ndarray:
    """The split table of the candidate edges ``ids`` (positions within type ``r``)."""
    n = np.int64(g.num_nodes)
    u, v = np.asarray(g.src[lo + ids], np.int64), np.asarray(g.dst[lo + ids], np.int64)
    rows = np.full((len(ids), 5), -1, dtype=np.int64)
    rows[:, 0], rows[:, 1], rows[:, 2] = u, v, r
    if train:
        rows[:, 3] = new_pos[lo + ids]
        if rev is not None:
            starts = g.etype_starts()
            rlo, rhi = int(starts[rev]), int(starts[rev + 1])
            rkeys = np.asarray(g.src[rlo:rhi], np.int64) * n + g.dst[rlo:rhi]
            rkeys[~kept[rlo:rhi]] = -1  # dropped edges are nobody's twin
            at = _lookup(rkeys, v * n + u)
            rows[:, 4] = np.where(at >= 0, new_pos[rlo + np.maximum(at, 0)], -1)
    return rows
