"""Partitioning: assign nodes to partitions (METIS, or random), relabel, write.

Relabeling makes each partition own a contiguous id range (see graphfeed.common.partition),
so the owner of a node is found with one binary search at serving time.
"""

from __future__ import annotations

import logging
import time
import uuid
from pathlib import Path

import numpy as np
from tqdm import tqdm

from graphfeed.common.errors import InvalidArgument
from graphfeed.common.partition import (
    GraphManifest,
    NodeDataSpec,
    PartitionArrays,
    rows_per_chunk,
    write_graph_manifest,
    write_partition,
)
from graphfeed.common.schema import GraphSchema
from graphfeed.ingest.graph import GraphData
from graphfeed.ingest.outdir import NODE_NAMES, ORIG_IDS

log = logging.getLogger(__name__)

METHODS = ("metis", "random")


def assign_partitions(g: GraphData, num_partitions: int, method: str = "metis", seed: int = 0) -> np.ndarray:
    """Partition id (int64) of every node; the same arguments give the same assignment.

    ``metis`` runs METIS (k-way, edge cut; through pymetis) on the symmetrized graph without
    self-loops, balancing nodes in and out of the training split separately (so every trainer
    rank and graph-store gets its share of seeds and nodes). METIS is seeded with ``seed``.
    DistDGL's ``balance_edges`` (in-degree as two more constraints) is left out: on the large
    synthetic preset it raised the cut from 10.7 % to 19.0 % of the edges, while the in-edges
    came out within 1 % per partition without it. ``random`` is a seeded uniform assignment.

    (DGL's own binding, ``dgl.metis_partition_assignment``, gives different partitions from run
    to run with balance constraints, so two ingests of one graph would disagree.)
    """
    if num_partitions < 1:
        raise InvalidArgument(f"num_partitions must be >= 1, got {num_partitions}")
    if num_partitions > g.num_nodes:
        raise InvalidArgument(
            f"{num_partitions} partitions of a {g.num_nodes}-node graph: every partition needs a node; use fewer"
        )
    if num_partitions == 1:
        return np.zeros(g.num_nodes, dtype=np.int64)
    if method == "random":
        return _nonempty(
            np.random.default_rng(seed).integers(0, num_partitions, g.num_nodes).astype(np.int64),
            num_partitions,
            method,
        )
    if method != "metis":
        raise InvalidArgument(f"unknown partition method {method!r}; choose from {METHODS}")
    import pymetis  # noqa: PLC0415 - only METIS ingests need it

    n = g.num_nodes
    xadj, adjncy = symmetric_csr(g.src, g.dst, n)
    in_train = np.zeros(n, dtype=np.int64)
    if "train" in g.splits:
        in_train[g.splits["train"]] = 1
    vweights = np.stack([in_train, 1 - in_train], axis=1) if in_train.any() else None  # [n, ncon], row-major
    log.info(
        "METIS: %d nodes, %d symmetric edges into %d partitions (about a minute per 10M edges)",
        n,
        len(adjncy),
        num_partitions,
    )
    _cut, parts = pymetis.part_graph(
        num_partitions,
        pymetis.CSRAdjacency(xadj, adjncy),
        vweights=None if vweights is None else vweights.reshape(-1),
        options=pymetis.Options(seed=seed),
    )
    return _nonempty(np.asarray(parts, dtype=np.int64), num_partitions, method)


def _nonempty(parts: np.ndarray, num_partitions: int, method: str) -> np.ndarray:
    """``parts``, unless a partition got no node (a graph-store would serve nothing): then
    InvalidArgument before anything is written."""
    empty = np.flatnonzero(np.bincount(parts, minlength=num_partitions) == 0)
    if len(empty):
        raise InvalidArgument(
            f"{method} left partition(s) {', '.join(map(str, empty[:5]))} of {num_partitions} empty "
            f"({len(parts)} nodes): use fewer partitions"
        )
    return parts


def _orig_ids(g: GraphData, type_of_old: np.ndarray, in_starts: np.ndarray) -> np.ndarray:
    """Each input node's own id: the source's, else its type-wise input id (the input id of a one-type graph)."""
    if g.orig_ids is not None:
        return np.asarray(g.orig_ids, np.int64)
    ids = np.arange(g.num_nodes, dtype=np.int64)
    return ids if len(g.ntypes) == 1 else ids - in_starts[type_of_old]


def _relabeled_table(g: GraphData, name: str, order: np.ndarray, in_starts: np.ndarray) -> np.ndarray:
    """Table ``name`` over the new ids of its type in global-id order (partition by partition),
    so partition ``p``'s rows are those of ``schema.typewise_range(p, type)``."""
    t = g.ntypes.index(g.table_ntype(name))
    lo, hi = int(in_starts[t]), int(in_starts[t + 1])
    old = order[(order >= lo) & (order < hi)]  # the nodes of the type, in new-id order
    return np.asarray(g.node_data[name])[old - lo]


def _etype_indptr(rows: np.ndarray, etypes: np.ndarray, num_rows: int, num_etypes: int) -> np.ndarray:
    """In-CSR pointers of a partition's edges, sorted by (edge type, destination row): int64
    [num_rows+1] for one edge type, else [R, num_rows+1], row ``r`` pointing into the shared arrays."""
    counts = np.bincount(etypes * num_rows + rows, minlength=num_etypes * num_rows).reshape(num_etypes, num_rows)
    ptr = np.zeros((num_etypes, num_rows + 1), dtype=np.int64)
    ptr[:, 1:] = np.cumsum(counts, axis=1)
    ptr += np.concatenate([[0], np.cumsum(counts.sum(axis=1))[:-1]]).astype(np.int64)[:, None]  # earlier types' edges
    return ptr[0] if num_etypes == 1 else ptr


def _relabeled_edge_rows(rows: np.ndarray, new_of_old: np.ndarray) -> np.ndarray:
    """An edge split's rows with their endpoints in new ids (edge ids are input positions, which
    the partitioning keeps as global edge ids)."""
    out = np.array(rows, dtype=np.int64)
    out[:, 0], out[:, 1] = new_of_old[out[:, 0]], new_of_old[out[:, 1]]
    return out


def symmetric_csr(src: np.ndarray, dst: np.ndarray, num_nodes: int) -> tuple[np.ndarray, np.ndarray]:
    """CSR (``xadj``, ``adjncy``, int64) of the undirected simple graph of the edges: both
    directions, no self-loops, no duplicates, neighbors sorted (a pure function of the edge set)."""
    s = np.concatenate([src, dst]).astype(np.int64)
    d = np.concatenate([dst, src]).astype(np.int64)
    keep = s != d
    keys = np.unique(s[keep] * num_nodes + d[keep])  # sorted by (s, d); n**2 < 2**63 below 3e9 nodes
    xadj = np.zeros(num_nodes + 1, dtype=np.int64)
    np.cumsum(np.bincount(keys // num_nodes, minlength=num_nodes), out=xadj[1:])
    return xadj, keys % num_nodes


def write_partitioned(
    g: GraphData,
    out_dir: Path,
    num_partitions: int,
    method: str = "metis",
    seed: int = 0,
    assignment: np.ndarray | None = None,
    progress: bool = False,
) -> GraphManifest:
    """Partitions ``g`` and writes ``out_dir`` (see graphfeed.common.partition for the layout).

    Args:
        g: the graph.
        out_dir: destination root; created.
        num_partitions: number of partitions.
        method: "metis" or "random" (ignored when ``assignment`` is given).
        seed: seed for the random method.
        assignment: precomputed partition of each node (tests use it for exact layouts).
        progress: show a progress bar over partitions on stderr.
    """
    g.validate()
    t0 = time.perf_counter()
    part = (
        assign_partitions(g, num_partitions, method, seed) if assignment is None else np.asarray(assignment, np.int64)
    )
    log.info(
        "assigned %d nodes to %d partitions (%s) in %.1fs",
        g.num_nodes,
        num_partitions,
        method,
        time.perf_counter() - t0,
    )

    # Ids are type-major in the input, so a stable sort by partition orders the new ids by
    # (partition, node type, input id): every partition's nodes of one type are contiguous.
    order = np.argsort(part, kind="stable")  # new gid i is old node order[i]
    new_of_old = np.empty(g.num_nodes, dtype=np.int64)
    new_of_old[order] = np.arange(g.num_nodes, dtype=np.int64)
    counts = np.bincount(part, minlength=num_partitions)
    offsets = np.concatenate([[0], np.cumsum(counts)]).astype(np.int64)
    in_starts = g.ntype_starts()
    num_types = len(g.ntypes)
    type_of_old = np.repeat(np.arange(num_types, dtype=np.int64), np.diff(in_starts))
    per_type = np.bincount(part * num_types + type_of_old, minlength=num_partitions * num_types).reshape(
        num_partitions, num_types
    )
    ntype_offsets = offsets[:-1, None] + np.concatenate(
        [np.zeros((num_partitions, 1), np.int64), np.cumsum(per_type, axis=1)], axis=1
    )
    schema = GraphSchema(g.ntypes, g.etypes, ntype_offsets, g.etype_starts())

    new_src = new_of_old[g.src]
    new_dst = new_of_old[g.dst]
    etype = np.repeat(np.arange(len(g.etypes), dtype=np.int64), np.diff(g.etype_starts()))
    dst_part = np.searchsorted(offsets[1:], new_dst, side="right")
    # in-CSRs: group edges by destination partition, then edge type, then destination (with
    # timestamps each row in ascending time; ties in input order); one edge type: by destination
    keys = [new_dst, etype, dst_part] if g.edge_ts is None else [g.edge_ts, new_dst, etype, dst_part]
    by_dst = np.lexsort(keys) if len(g.etypes) > 1 or g.edge_ts is not None else np.argsort(new_dst, kind="stable")
    indices_all = new_src[by_dst]
    eids_all = by_dst.astype(np.int64)  # global edge id = position in the (edge-type-major) input edge list
    ts_all = None if g.edge_ts is None else np.asarray(g.edge_ts, np.int64)[by_dst]
    feat_all = None if g.edge_feat is None else np.asarray(g.edge_feat, np.float32)[by_dst]
    dst_sorted, etype_sorted = new_dst[by_dst], etype[by_dst]
    part_edges = np.concatenate([[0], np.cumsum(np.bincount(dst_part, minlength=num_partitions))]).astype(np.int64)
    del new_src, new_dst, by_dst, dst_part, etype

    orig = _orig_ids(g, type_of_old, in_starts)
    tables = {name: _relabeled_table(g, name, order, in_starts) for name in g.node_data}
    split_gids = {name: np.sort(new_of_old[ids]) for name, ids in g.splits.items()}
    edge_rows = {name: _relabeled_edge_rows(rows, new_of_old) for name, rows in g.edge_splits.items()}
    manifest = GraphManifest(
        dataset=g.name,
        num_nodes=g.num_nodes,
        num_edges=g.num_edges,
        num_partitions=num_partitions,
        node_offsets=tuple(int(x) for x in offsets),
        num_classes=int(g.num_classes),
        node_data={
            name: NodeDataSpec(
                str(t.dtype), tuple(t.shape[1:]), rows_per_chunk(t.dtype, tuple(t.shape[1:])), g.table_ntype(name)
            )
            for name, t in tables.items()
        },
        splits=tuple(sorted(g.splits)),
        edge_splits=tuple(sorted(g.edge_splits)),
        partition_method=method if assignment is None else "given",
        has_edge_timestamps=g.edge_ts is not None,
        extra={k: v for k, v in g.extra.items() if k != "node_names"},  # names go to node_names.npy
        graph_version=uuid.uuid4().hex,
        types=schema.to_dict() if schema.is_hetero else {},
    )
    out_dir = Path(out_dir)
    write_graph_manifest(out_dir, manifest)
    np.save(out_dir / ORIG_IDS, orig[order])  # gid -> input id, whole graph
    if "node_names" in g.extra:  # names in the input: orig_ids index them
        np.save(out_dir / NODE_NAMES, np.asarray(g.extra["node_names"], dtype=str))
    for p in tqdm(range(num_partitions), desc="writing partitions", unit="part", disable=not progress):
        lo, hi = int(offsets[p]), int(offsets[p + 1])
        e_lo, e_hi = int(part_edges[p]), int(part_edges[p + 1])
        indices = indices_all[e_lo:e_hi]
        remote = indices[(indices < lo) | (indices >= hi)]
        arrays = PartitionArrays(
            indptr=_etype_indptr(dst_sorted[e_lo:e_hi] - lo, etype_sorted[e_lo:e_hi], hi - lo, len(g.etypes)),
            indices=indices,
            edge_ids=eids_all[e_lo:e_hi],
            orig_ids=orig[order[lo:hi]],
            halo=np.unique(remote),
            node_data={name: t[slice(*schema.typewise_range(p, g.table_ntype(name)))] for name, t in tables.items()},
            splits={name: s[(s >= lo) & (s < hi)] for name, s in split_gids.items()},
            edge_splits={name: r[(r[:, 1] >= lo) & (r[:, 1] < hi)] for name, r in edge_rows.items()},
            edge_ts=None if ts_all is None else ts_all[e_lo:e_hi],
            edge_feat=None if feat_all is None else feat_all[e_lo:e_hi],
        )
        write_partition(out_dir, p, manifest, arrays)
        log.info("partition %d: %d nodes, %d in-edges, %d halo nodes", p, hi - lo, e_hi - e_lo, len(arrays.halo))
    log.info("wrote %s in %.1fs", out_dir, time.perf_counter() - t0)
    return manifest
