"""Node and edge types: how a heterogeneous graph lives in graphfeed's one id space.

graphfeed stores every graph the way DistDGL stores a heterograph: homogenized. Node types and
canonical edge types ``(src_type, relation, dst_type)`` are numbered in schema order, and

* **nodes**: partition ``p`` owns the contiguous global ids ``[node_offsets[p], node_offsets[p+1])``
  (as for any graph), and inside them the nodes of type ``t`` are the contiguous range
  ``[ntype_offsets[p, t], ntype_offsets[p, t+1])``. A node's *type-wise id* (what DGL calls
  the id of a node of one type, and what a user's ``{ntype: ids}`` holds) numbers the nodes of
  its type partition by partition, in global-id order;
* **edges**: global edge ids are edge-type-major: the edges of type ``r`` are
  ``[etype_offsets[r], etype_offsets[r+1])``, and type-wise edge id = global id - ``etype_offsets[r]``.

So the type of any id is one ``searchsorted`` away, sampling and compaction work on global ids
unchanged, and only the ends that face users (ingest, the trainer's blocks) speak in types.

A homogeneous graph is the one-type case: node type ``_N``, edge type ``(_N, _E, _N)`` (DGL's
names), type-wise ids equal to global ids, and node-data keys without a type prefix
(``"feat"``). In a heterogeneous graph a node-data table belongs to one node type and its key is
``"<ntype>/<name>"`` (``"paper/feat"``); types without a table have no such data (featureless).
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass, field
from typing import NamedTuple

import numba
import numpy as np

from graphfeed.common.errors import InvalidArgument
from graphfeed.common.v1 import tensor_pb2

DEFAULT_NTYPE = "_N"
DEFAULT_ETYPE = ("_N", "_E", "_N")

CanonicalEtype = tuple[str, str, str]


class TypeRanks(NamedTuple):
    """Where each of a list of global node ids stands among the ids of its type
    (:meth:`GraphSchema.rank`): ``order`` lists positions type by type, those of type ``t`` at
    ``order[bounds[t]:bounds[t+1]]`` in their order in the list (a *stable* grouping);
    ``rank[i]`` is position ``i``'s index among them; ``typed`` the type-wise ids in ``order``."""

    types: np.ndarray  # int32 [n]: type id of each position
    bounds: np.ndarray  # int64 [T+1]
    rank: np.ndarray  # int32 [n] (read at random by the edge loops: half the bytes of int64)
    order: np.ndarray  # int64 [n]
    typed: np.ndarray  # int64 [n]: type-wise id of gids[order[j]]


@numba.njit(cache=True, nogil=True, boundscheck=False)
def _range_holding(starts, g, k):  # noqa: ANN001, ANN202
    """The ownership range holding gid ``g``: ``k`` itself when it does (runs of one range are
    common), else the last range starting at or before ``g`` (an empty range starts where the
    next one does, so it is never that one)."""
    m = len(starts)
    if starts[k] <= g and (k + 1 == m or g < starts[k + 1]):
        return k
    lo, hi = 0, m
    while lo < hi:
        mid = (lo + hi) // 2
        if starts[mid] <= g:
            lo = mid + 1
        else:
            hi = mid
    return lo - 1


@numba.njit(cache=True, nogil=True, boundscheck=False)
def _rank_nodes(gids, starts, shift, num_nodes, types, bounds, rank, order, typed):  # noqa: ANN001, ANN202
    """Fills :class:`TypeRanks`' arrays (allocated by the caller: NumPy backs large ones with
    huge pages, numba's allocator does not) in two passes, no sort; returns the first position
    outside ``[0, num_nodes)`` or -1. ``starts``/``shift``: :meth:`GraphSchema.ownership_ranges`;
    ``bounds`` must be zeros."""
    n = len(gids)
    num_types = len(bounds) - 1
    k = 0
    for i in range(n):
        g = gids[i]
        if g < 0 or g >= num_nodes:
            return i
        k = _range_holding(starts, g, k)
        t = k % num_types
        types[i] = t
        bounds[t + 1] += 1
    for t in range(num_types):
        bounds[t + 1] += bounds[t]
    at = bounds[:-1].copy()
    k = 0
    for i in range(n):
        t = types[i]
        p = at[t]
        at[t] += 1
        rank[i] = p - bounds[t]
        order[p] = i
        k = _range_holding(starts, gids[i], k)
        typed[p] = gids[i] + shift[k]
    return -1


def check_type_name(what: str, name: str) -> str:
    """A node type or relation name must be non-empty and free of ``/`` and ``:`` (they join keys)."""
    if not isinstance(name, str) or not name or "/" in name or ":" in name or name != name.strip():
        raise InvalidArgument(f"{what} {name!r} is not a valid type name (non-empty, no '/', ':' or outer spaces)")
    return name


def etype_name(etype: CanonicalEtype) -> str:
    """``"src:rel:dst"``, the string form of a canonical edge type (files, flags, metric labels)."""
    return ":".join(etype)


@dataclass(frozen=True, eq=False)
class GraphSchema:
    """Node types, canonical edge types and where their ids lie (see the module docstring).

    Attributes:
        ntypes: node type names, in type-id order.
        etypes: canonical edge types ``(src_type, relation, dst_type)``, in type-id order.
        ntype_offsets: int64 [P, T+1]; row ``p`` splits partition ``p``'s global ids by type.
        etype_offsets: int64 [R+1]; global edge ids of type ``r`` are ``[etype_offsets[r], etype_offsets[r+1])``.
    """

    ntypes: tuple[str, ...]
    etypes: tuple[CanonicalEtype, ...]
    ntype_offsets: np.ndarray
    etype_offsets: np.ndarray
    _starts: np.ndarray = field(init=False, repr=False)
    _base: np.ndarray = field(init=False, repr=False)
    _index: dict[str, int] = field(init=False, repr=False)
    _eindex: dict[CanonicalEtype, int] = field(init=False, repr=False)

    def __post_init__(self) -> None:
        off = np.asarray(self.ntype_offsets, dtype=np.int64).reshape(-1, len(self.ntypes) + 1)
        eoff = np.asarray(self.etype_offsets, dtype=np.int64).reshape(-1)
        object.__setattr__(self, "ntype_offsets", off)
        object.__setattr__(self, "etype_offsets", eoff)
        if len(eoff) != len(self.etypes) + 1:
            raise InvalidArgument(f"{len(eoff)} edge-type offsets for {len(self.etypes)} edge types")
        if len(set(self.ntypes)) != len(self.ntypes) or len(set(self.etypes)) != len(self.etypes):
            raise InvalidArgument(f"node and edge types must be distinct: {self.ntypes}, {self.etypes}")
        for s, _, d in self.etypes:
            for t in (s, d):
                if t not in self.ntypes:
                    raise InvalidArgument(f"edge type ({s}, _, {d}) names node type {t!r}, not one of {self.ntypes}")
        counts = off[:, 1:] - off[:, :-1]
        derived = {
            "_starts": off[:, :-1].reshape(-1),  # flattened [P*T] range starts, non-decreasing
            "_base": np.vstack([np.zeros((1, len(self.ntypes)), np.int64), np.cumsum(counts, axis=0)]),  # [P+1, T]
            "_index": {t: i for i, t in enumerate(self.ntypes)},
            "_eindex": {e: i for i, e in enumerate(self.etypes)},
        }
        for k, v in derived.items():
            object.__setattr__(self, k, v)

    # -- construction ------------------------------------------------------------------------

    @classmethod
    def homogeneous(cls, node_offsets: Sequence[int], num_edges: int) -> GraphSchema:
        """The one-type schema of a graph with these ownership ranges."""
        off = np.asarray(node_offsets, dtype=np.int64)
        return cls((DEFAULT_NTYPE,), (DEFAULT_ETYPE,), np.stack([off[:-1], off[1:]], axis=1), np.array([0, num_edges]))

    def to_dict(self) -> dict:
        return {
            "ntypes": list(self.ntypes),
            "etypes": [list(e) for e in self.etypes],
            "ntype_offsets": self.ntype_offsets.tolist(),
            "etype_offsets": self.etype_offsets.tolist(),
        }

    @classmethod
    def from_dict(cls, d: dict) -> GraphSchema:
        return cls(
            tuple(d["ntypes"]),
            tuple(tuple(e) for e in d["etypes"]),
            np.asarray(d["ntype_offsets"], dtype=np.int64),
            np.asarray(d["etype_offsets"], dtype=np.int64),
        )

    # -- facts -------------------------------------------------------------------------------

    @property
    def is_hetero(self) -> bool:
        """More than one node type or edge type (DGL's blocks then have types)."""
        return len(self.ntypes) > 1 or len(self.etypes) > 1

    @property
    def num_partitions(self) -> int:
        return len(self.ntype_offsets)

    def num_nodes(self, ntype: str) -> int:
        """Nodes of ``ntype`` in the whole graph."""
        return int(self._base[-1, self.ntype_id(ntype)])

    def num_edges(self, etype: CanonicalEtype | str) -> int:
        r = self.etype_id(etype)
        return int(self.etype_offsets[r + 1] - self.etype_offsets[r])

    def ntype_id(self, ntype: str) -> int:
        i = self._index.get(ntype)
        if i is None:
            raise InvalidArgument(f"unknown node type {ntype!r}; the graph has {list(self.ntypes)}")
        return i

    def etype_id(self, etype: CanonicalEtype | Sequence[str] | str) -> int:
        """The id of an edge type given as a canonical triple, ``"src:rel:dst"``, or a relation
        name that only one edge type has (as DGL accepts)."""
        if isinstance(etype, str):
            parts = tuple(etype.split(":"))
            if len(parts) == 1:
                found = [i for i, e in enumerate(self.etypes) if e[1] == etype]
                if len(found) == 1:
                    return found[0]
                what = "no" if not found else "several"
                raise InvalidArgument(
                    f"edge type {etype!r}: {what} edge types have that relation; name it as src:rel:dst "
                    f"(the graph has {[etype_name(e) for e in self.etypes]})"
                )
            etype = parts
        key = tuple(etype)
        i = self._eindex.get(key) if len(key) == 3 else None
        if i is None:
            raise InvalidArgument(f"unknown edge type {etype!r}; the graph has {[etype_name(e) for e in self.etypes]}")
        return i

    def data_key(self, ntype: str, name: str) -> str:
        """The node-data key of table ``name`` of ``ntype``: ``name`` in a one-type graph, else
        ``"ntype/name"``."""
        return name if len(self.ntypes) == 1 else f"{ntype}/{name}"

    def owned_range(self, p: int, ntype: str) -> tuple[int, int]:
        """Global ids ``[lo, hi)`` of ``ntype`` owned by partition ``p``."""
        t = self.ntype_id(ntype)
        return int(self.ntype_offsets[p, t]), int(self.ntype_offsets[p, t + 1])

    def typewise_range(self, p: int, ntype: str) -> tuple[int, int]:
        """Type-wise ids ``[lo, hi)`` of the ``ntype`` nodes partition ``p`` owns."""
        t = self.ntype_id(ntype)
        return int(self._base[p, t]), int(self._base[p + 1, t])

    # -- id maps -----------------------------------------------------------------------------

    def ownership_ranges(self) -> tuple[np.ndarray, np.ndarray]:
        """``(starts, shift)`` of every ownership range, partition-major and type-minor (range
        ``k`` holds type ``k % len(ntypes)``): its first global id, and type-wise id - global id
        within it (what :meth:`to_typed` adds); int64 ``[P*T]`` each."""
        return self._starts, self._base[:-1].reshape(-1) - self._starts

    def ntype_of(self, gids: np.ndarray) -> np.ndarray:
        """int64 type id of each global node id (ids must lie in the graph)."""
        return self._range_of(gids) % len(self.ntypes)

    def _range_of(self, gids: np.ndarray) -> np.ndarray:
        # The last range starting at or before g holds g: any later range starts after it, and
        # an empty range before it ends where the next one starts.
        return np.searchsorted(self._starts, np.asarray(gids, dtype=np.int64), side="right") - 1

    def to_typed(self, gids: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
        """``(type ids, type-wise ids)`` of global node ids."""
        gids = np.asarray(gids, dtype=np.int64)
        if len(self.ntypes) == 1:
            return np.zeros(len(gids), np.int64), gids
        k = self._range_of(gids)
        p, t = np.divmod(k, len(self.ntypes))
        return t, gids - self._starts[k] + self._base[p, t]

    def to_gids(self, ntype: str, ids: np.ndarray) -> np.ndarray:
        """Global ids of type-wise ids of ``ntype``; InvalidArgument for ids outside the type."""
        t = self.ntype_id(ntype)
        ids = np.asarray(ids, dtype=np.int64)
        n = int(self._base[-1, t])
        if len(ids) and (ids.min() < 0 or ids.max() >= n):
            bad = ids[(ids < 0) | (ids >= n)]
            raise InvalidArgument(f"{ntype} ids must be in [0, {n}), got {bad[:5].tolist()}")
        if len(self.ntypes) == 1:
            return ids.copy()
        p = np.searchsorted(self._base[1:, t], ids, side="right")
        return ids - self._base[p, t] + self.ntype_offsets[p, t]

    def etype_of(self, eids: np.ndarray) -> np.ndarray:
        """int64 type id of each global edge id."""
        return np.searchsorted(self.etype_offsets[1:], np.asarray(eids, dtype=np.int64), side="right")

    def rank(self, gids: np.ndarray, what: str = "node ids") -> TypeRanks:
        """Each id's type, its index among the ids of its type in ``gids``, the stable grouping
        by type and the type-wise ids (:class:`TypeRanks`), in two compiled passes: what the
        loader groups feature rows by and the trainer numbers typed blocks by (one pass each
        where a stable argsort, a searchsorted and gathers took several; a MAG-like
        minibatch's 1M input nodes). InvalidArgument (naming ``what``) for an id outside the
        graph or a list of 2**31 ids or more."""
        ids = np.ascontiguousarray(gids, dtype=np.int64)
        n_all = int(self.ntype_offsets[-1, -1])
        if len(ids) >= 2**31:
            raise InvalidArgument(f"{what}: {len(ids)} ids (at most 2**31 - 1)")
        starts, shift = self.ownership_ranges()
        n = len(ids)
        r = TypeRanks(
            types=np.empty(n, np.int32),
            bounds=np.zeros(len(self.ntypes) + 1, np.int64),
            rank=np.empty(n, np.int32),
            order=np.empty(n, np.int64),
            typed=np.empty(n, np.int64),
        )
        bad = _rank_nodes(ids, starts, shift, n_all, *r)
        if bad >= 0:
            raise InvalidArgument(f"{what}: node {int(ids[bad])} is not in the graph [0, {n_all})")
        return r

    def group_by_ntype(self, gids: np.ndarray) -> dict[str, np.ndarray]:
        """Positions in ``gids`` of the nodes of each type (ascending; types with none left out)."""
        if len(self.ntypes) == 1:
            return {self.ntypes[0]: np.arange(len(gids), dtype=np.int64)}
        r = self.rank(gids)
        b = r.bounds
        return {t: r.order[b[i] : b[i + 1]] for i, t in enumerate(self.ntypes) if b[i + 1] > b[i]}


def types_to_proto(schema: GraphSchema, msg: tensor_pb2.GraphTypes) -> tensor_pb2.GraphTypes:
    """Fills a ``GraphTypes`` message (tensor.proto) with ``schema``."""
    msg.ntypes.extend(schema.ntypes)
    for s, r, d in schema.etypes:
        msg.etypes.add(src_type=s, relation=r, dst_type=d)
    msg.ntype_offsets.extend(schema.ntype_offsets.reshape(-1).tolist())
    msg.etype_offsets.extend(schema.etype_offsets.tolist())
    return msg


def types_from_proto(msg: tensor_pb2.GraphTypes, node_offsets: Sequence[int], num_edges: int) -> GraphSchema:
    """The schema a ``GraphTypes`` message describes; an empty message (a peer that predates
    types) is the one-type schema of ``node_offsets``."""
    if not msg.ntypes:
        return GraphSchema.homogeneous(node_offsets, num_edges)
    return GraphSchema(
        tuple(msg.ntypes),
        tuple((e.src_type, e.relation, e.dst_type) for e in msg.etypes),
        np.asarray(msg.ntype_offsets, dtype=np.int64),
        np.asarray(msg.etype_offsets, dtype=np.int64),
    )
