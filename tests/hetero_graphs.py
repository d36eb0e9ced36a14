"""A heterograph whose every answer is known by formula, for exact tests of typed sampling.

Node types ``user`` (NU), ``item`` (NI), ``tag`` (T, featureless); edge types, in this order:

* ``(user, buys, item)``: user ``u`` buys items ``(u * K + j) % NI`` for ``j < deg(u)``,
  ``deg(u) = u % 4`` (users 0, 4, 8 buy nothing); type-wise edge ids number the edges by
  ``u`` then ``j``;
* ``(tag, tags, item)``: tag ``t`` tags item ``i`` for ``i < TAGGED`` with ``(t + i) % 2 == 0``
  (items from ``TAGGED`` on have no tags); edge ids by ``t`` then ``i``;
* ``(item, rev_buys, user)`` and ``(item, rev_tags, tag)``: the reverse of every buys and tags
  edge (``add_reverse``), each with its forward edge's type-wise id.

Node data: ``user/feat[u] = u + 0.5 * [0, 1, 2]``, ``item/feat[i] = [-i] * 5`` (float32),
``item/label[i] = i % 3``. Partitioned into 2 by :data:`assignment`: types interleave (each
partition owns users, items and tags), every tagged item lies in partition 0 (so partition 1
has no ``tags`` edges at all).

Type-wise input ids come back from a gid through ``orig_ids.npy`` (the node's own id in its
type); its type through ``GraphSchema.ntype_of``.
"""

from __future__ import annotations

from pathlib import Path

import numpy as np

from graphfeed.common.schema import GraphSchema
from graphfeed.ingest.graph import GraphData, hetero_graph
from graphfeed.ingest.partition import write_partitioned

NU, NI, T, K, TAGGED = 12, 10, 4, 3, 4
NTYPES = ("user", "item", "tag")
BUYS, TAGS = ("user", "buys", "item"), ("tag", "tags", "item")
REV_BUYS, REV_TAGS = ("item", "rev_buys", "user"), ("item", "rev_tags", "tag")
ETYPES = (BUYS, TAGS, REV_BUYS, REV_TAGS)


def buys_edges() -> tuple[np.ndarray, np.ndarray]:
    pairs = [(u, (u * K + j) % NI) for u in range(NU) for j in range(u % 4)]
    return np.array([p[0] for p in pairs], np.int64), np.array([p[1] for p in pairs], np.int64)


def tags_edges() -> tuple[np.ndarray, np.ndarray]:
    pairs = [(t, i) for t in range(T) for i in range(TAGGED) if (t + i) % 2 == 0]
    return np.array([p[0] for p in pairs], np.int64), np.array([p[1] for p in pairs], np.int64)


def in_edges(etype: tuple[str, str, str], dst: int) -> list[tuple[int, int]]:
    """Sorted ``(src type-wise id, type-wise edge id)`` of the in-edges of ``dst`` (type-wise) through ``etype``."""
    src, d = buys_edges() if etype in (BUYS, REV_BUYS) else tags_edges()
    if etype in (REV_BUYS, REV_TAGS):
        src, d = d, src
    return sorted((int(src[e]), e) for e in np.flatnonzero(d == dst))


def user_feat(u: np.ndarray) -> np.ndarray:
    return (np.asarray(u, np.float32)[:, None] + 0.5 * np.arange(3, dtype=np.float32)[None, :]).astype(np.float32)


def item_feat(i: np.ndarray) -> np.ndarray:
    return np.repeat(-np.asarray(i, np.float32)[:, None], 5, axis=1)


def hetero_arith() -> GraphData:
    users, items = np.arange(NU), np.arange(NI)
    return hetero_graph(
        "hetero-arith",
        {"user": NU, "item": NI, "tag": T},
        {BUYS: buys_edges(), TAGS: tags_edges()},
        {"user": {"feat": user_feat(users)}, "item": {"feat": item_feat(items), "label": items % 3}},
        {"item": {"train": items[items % 2 == 0]}},
        add_reverse=True,
    )


def assignment() -> np.ndarray:
    """Partition of each input node (users, then items, then tags)."""
    users = np.arange(NU) % 2
    items = np.where(np.arange(NI) < TAGGED, 0, np.arange(NI) % 2)
    tags = np.arange(T) % 2
    return np.concatenate([users, items, tags]).astype(np.int64)


def write_hetero(root: Path) -> Path:
    write_partitioned(hetero_arith(), root, 2, assignment=assignment())
    return root


def mixed_seeds(schema: GraphSchema) -> np.ndarray:
    """Unique seeds of every type from both partitions, interleaved (gids)."""
    picks = [schema.owned_range(p, t)[0] + k for p in (1, 0) for t, k in (("item", 1), ("user", 2), ("tag", 0))]
    picks += [schema.owned_range(0, "item")[0], schema.owned_range(1, "user")[0]]
    return np.array(picks, dtype=np.int64)
