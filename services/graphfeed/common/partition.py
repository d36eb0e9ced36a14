"""The on-disk layout of a partitioned graph: written by ingest, served by graph-store.

Global ids ("gids"): ingest relabels nodes so that partition ``p`` owns the contiguous range
``[node_offsets[p], node_offsets[p+1])``; the owner of any id is one ``searchsorted`` away and
no id map is needed at serving time. ``orig_ids.npy`` keeps each node's id in the input.

::

    <root>/manifest.json              GraphManifest (the schema version lives here)
    <root>/part-00000/manifest.json   the same manifest plus "partition_id"
    <root>/part-00000/indptr.npy      int64 [n_owned+1]  in-CSR over owned nodes (row = gid - offset); with
                                      several edge types int64 [R, n_owned+1], one CSR per edge type
                                      into the shared arrays below (edges of type r, then r+1, ...)
    <root>/part-00000/indices.npy     int32 [E_p]        gid of each in-neighbor (edge source)
    <root>/part-00000/edge_ids.npy    int32 [E_p]        global edge id
    <root>/part-00000/edge_ts.npy     int64 [E_p]        edge timestamp (only when the input had ts)
    <root>/part-00000/edge_feat.npy   float32 [E_p, D]   edge features, aligned with indices (only when the input
                                                         had them)
    <root>/part-00000/orig_ids.npy    int64 [n_owned]    input id of each owned node
    <root>/part-00000/halo.npy        int64 [H]          sorted unique non-owned gids in indices
    <root>/part-00000/db/             RocksDB: node data in row chunks, splits
    <root>/part-00000/node_data/<name>.bin  the same node data as flat C-order rows (no header),
                                      read at random by a graph-store with a memory budget

Types (:mod:`graphfeed.common.schema`): the manifest lists node types, canonical edge types
and their id ranges; a node-data table covers the owned nodes of its type only (its rows are
``gid - ntype_offsets[p][t]``). A graph without types is the one-type case.

RocksDB keys: ``nd/<name>/<chunk:08d>`` -> raw C-order rows ``[chunk*rows_per_chunk, ...)`` of
the owned-node table; ``split/<name>`` -> int64 gids (ascending); ``edge_split/<name>`` -> int64
rows ``(src, dst, etype, eid, rev_eid)`` of the split's edges whose dst the partition owns
(link prediction, :mod:`graphfeed.ingest.edge_split`). Arrays are ``.npy`` so that
graph-store memory-maps them.

``indices`` and ``edge_ids`` are int32 while the graph's node / edge count fits (< 2**31),
else int64 (readers take either): sampling reads them at random, and half the bytes per
neighbor list made one-hop sampling ~35 % faster on the large benchmark graph.
"""

from __future__ import annotations

import json
import os
import tempfile
from collections.abc import Iterable, Iterator
from dataclasses import asdict, dataclass, field
from pathlib import Path
from typing import cast

import numpy as np
from rocksdict import AccessType, Options, Rdict, WriteOptions

from graphfeed.common.errors import FailedPrecondition
from graphfeed.common.limits import ROCKSDB_VALUE_BYTES
from graphfeed.common.schema import DEFAULT_NTYPE, GraphSchema

SCHEMA_VERSION = 2  # 2: node and edge types (a version-1 layout reads as one type)
READABLE_VERSIONS = (1, 2)
MANIFEST = "manifest.json"
EDGE_SPLITS = ("train", "val", "test")
"""The edge splits ingest --edge-split writes."""
EDGE_SPLIT_PREFIX = "edges/"
"""GetSplit("edges/<name>") answers edge split ``name``'s rows (int64 [n, 5]) instead of node ids."""


def part_dir_name(p: int) -> str:
    return f"part-{p:05d}"


@dataclass(frozen=True)
class NodeDataSpec:
    """One per-node tensor: element type and the shape of one row."""

    dtype: str
    row_shape: tuple[int, ...]
    rows_per_chunk: int
    ntype: str = DEFAULT_NTYPE  # the node type whose rows the table holds

    @property
    def row_bytes(self) -> int:
        return int(np.dtype(self.dtype).itemsize * int(np.prod(self.row_shape, dtype=np.int64)))


@dataclass(frozen=True)
class GraphManifest:
    """Describes the whole partitioned graph; written once by ingest."""

    dataset: str
    num_nodes: int
    num_edges: int
    num_partitions: int
    node_offsets: tuple[int, ...]
    num_classes: int
    node_data: dict[str, NodeDataSpec]
    splits: tuple[str, ...]
    partition_method: str
    has_edge_timestamps: bool = False
    schema_version: int = SCHEMA_VERSION
    extra: dict = field(default_factory=dict)
    # A random hex id per ingest run (uuid4): tells a restarted graph-store serving a
    # re-ingested graph from one serving the same graph ("" for graphs ingested before it).
    graph_version: str = ""
    # GraphSchema.to_dict() of a typed graph; empty for the one-type case
    types: dict = field(default_factory=dict)
    # link prediction (ingest --edge-split): names of the edge splits ("train", "val", "test")
    edge_splits: tuple[str, ...] = ()

    def schema(self) -> GraphSchema:
        """The graph's node and edge types and their id ranges."""
        if not self.types:
            return GraphSchema.homogeneous(self.node_offsets, self.num_edges)
        return GraphSchema.from_dict(self.types)

    def owner(self, gids: np.ndarray) -> np.ndarray:
        """Owning partition of each gid (gids must lie in [0, num_nodes))."""
        return np.searchsorted(np.asarray(self.node_offsets[1:]), gids, side="right")

    def to_json(self) -> str:
        d = asdict(self)
        d["node_data"] = {k: asdict(v) for k, v in self.node_data.items()}
        return json.dumps(d, indent=2, sort_keys=True)

    @classmethod
    def from_json(cls, text: str) -> GraphManifest:
        d = json.loads(text)
        d.pop("partition_id", None)
        version = d.get("schema_version")
        if version not in READABLE_VERSIONS:
            raise FailedPrecondition(
                f"partition layout version {version} is not supported "
                f"(this build reads {list(READABLE_VERSIONS)}); re-run ingest"
            )
        d["node_offsets"] = tuple(d["node_offsets"])
        d["splits"] = tuple(d["splits"])
        d["edge_splits"] = tuple(d.get("edge_splits", ()))
        d["node_data"] = {
            k: NodeDataSpec(
                dtype=v["dtype"],
                row_shape=tuple(v["row_shape"]),
                rows_per_chunk=v["rows_per_chunk"],
                ntype=v.get("ntype", DEFAULT_NTYPE),
            )
            for k, v in d["node_data"].items()
        }
        return cls(**d)

    @classmethod
    def load(cls, path: Path) -> GraphManifest:
        """Reads ``path/manifest.json`` (a graph root or a partition directory)."""
        f = Path(path) / MANIFEST
        if not f.exists():
            raise FailedPrecondition(f"{f} not found: not a graphfeed partition directory (run `graphfeed ingest`)")
        return cls.from_json(f.read_text())


def rows_per_chunk(dtype: np.dtype, row_shape: tuple[int, ...]) -> int:
    row_bytes = np.dtype(dtype).itemsize * max(1, int(np.prod(row_shape, dtype=np.int64)))
    return max(1, ROCKSDB_VALUE_BYTES // row_bytes)


def _db_options() -> Options:
    opt = Options(raw_mode=True)
    opt.create_if_missing(True)
    return opt


@dataclass
class PartitionArrays:
    """Everything ingest writes for one partition (all gids are global)."""

    indptr: np.ndarray
    indices: np.ndarray
    edge_ids: np.ndarray
    orig_ids: np.ndarray
    halo: np.ndarray
    node_data: dict[str, np.ndarray]
    splits: dict[str, np.ndarray]
    edge_ts: np.ndarray | None = None
    edge_feat: np.ndarray | None = None
    # per edge split, the rows (src, dst, etype, eid, rev_eid; gids) of the edges whose dst this partition owns
    edge_splits: dict[str, np.ndarray] = field(default_factory=dict)


def id_dtype(count: int) -> np.dtype:
    """The narrowest of int32/int64 that holds ids in ``[0, count)``."""
    return np.dtype(np.int32 if count <= 2**31 else np.int64)


def flat_node_data_path(part_dir: Path, name: str) -> Path:
    """Where the flat copy of node-data table ``name`` of a partition lives."""
    parts = name.split("/")  # "ntype/name" in a typed graph: a directory per type
    if len(parts) > 2 or any(not part or part.startswith(".") for part in parts):
        raise FailedPrecondition(f"node-data name {name!r} cannot name a file")
    return Path(part_dir, "node_data", *parts[:-1], f"{parts[-1]}.bin")


def write_flat_node_data(part_dir: Path, name: str, chunks: Iterable[bytes | memoryview]) -> Path:
    """Writes the flat copy of ``name`` from its row bytes in order, atomically: a temporary
    file is synced and renamed into place, so a reader never sees a partial table."""
    path = flat_node_data_path(part_dir, name)
    path.parent.mkdir(parents=True, exist_ok=True)
    fd, name_tmp = tempfile.mkstemp(
        dir=path.parent, prefix=f".{path.name}."
    )  # unique: concurrent exports do not collide
    tmp = Path(name_tmp)
    try:
        with os.fdopen(fd, "wb") as f:
            for chunk in chunks:
                f.write(chunk)
            f.flush()
            os.fsync(f.fileno())
        os.replace(tmp, path)
    finally:
        tmp.unlink(missing_ok=True)
    dir_fd = os.open(path.parent, os.O_RDONLY)
    try:
        os.fsync(dir_fd)  # the rename itself survives a crash
    finally:
        os.close(dir_fd)
    return path


def write_partition(root: Path, p: int, manifest: GraphManifest, arrays: PartitionArrays) -> Path:
    """Writes partition ``p`` under ``root``; RocksDB writes are synced before returning."""
    d = Path(root) / part_dir_name(p)
    d.mkdir(parents=True, exist_ok=True)
    np.save(d / "indptr.npy", np.ascontiguousarray(arrays.indptr, dtype=np.int64))
    np.save(d / "indices.npy", np.ascontiguousarray(arrays.indices, dtype=id_dtype(manifest.num_nodes)))
    np.save(d / "edge_ids.npy", np.ascontiguousarray(arrays.edge_ids, dtype=id_dtype(manifest.num_edges)))
    np.save(d / "orig_ids.npy", np.ascontiguousarray(arrays.orig_ids, dtype=np.int64))
    np.save(d / "halo.npy", np.ascontiguousarray(arrays.halo, dtype=np.int64))
    if arrays.edge_ts is not None:
        np.save(d / "edge_ts.npy", np.ascontiguousarray(arrays.edge_ts, dtype=np.int64))
    if arrays.edge_feat is not None:
        np.save(d / "edge_feat.npy", np.ascontiguousarray(arrays.edge_feat, dtype=np.float32))
    db = Rdict(str(d / "db"), options=_db_options())
    try:
        wo = WriteOptions()
        wo.sync = True
        for name, table in arrays.node_data.items():
            spec = manifest.node_data[name]
            table = np.ascontiguousarray(table, dtype=np.dtype(spec.dtype))
            for c, start in enumerate(range(0, len(table), spec.rows_per_chunk)):
                db.put(f"nd/{name}/{c:08d}".encode(), table[start : start + spec.rows_per_chunk].tobytes(), wo)
            write_flat_node_data(d, name, [table.reshape(-1).view(np.uint8).data])
        for name, gids in arrays.splits.items():
            db.put(f"split/{name}".encode(), np.sort(np.asarray(gids, dtype=np.int64)).tobytes(), wo)
        for name, rows in arrays.edge_splits.items():
            db.put(f"edge_split/{name}".encode(), np.ascontiguousarray(rows, dtype=np.int64).tobytes(), wo)
        db.flush()
    finally:
        db.close()
    part_manifest = json.loads(manifest.to_json())
    part_manifest["partition_id"] = p
    (d / MANIFEST).write_text(json.dumps(part_manifest, indent=2, sort_keys=True))
    return d


def write_graph_manifest(root: Path, manifest: GraphManifest) -> None:
    Path(root).mkdir(parents=True, exist_ok=True)
    (Path(root) / MANIFEST).write_text(manifest.to_json())


def _check_edge_feat(path: Path, feat: np.ndarray, num_edges: int) -> None:
    if feat.dtype != np.float32 or feat.ndim != 2 or len(feat) != num_edges:
        raise FailedPrecondition(
            f"{path}: edge_feat.npy is {feat.dtype} {feat.shape}; expected float32 [{num_edges}, D]"
        )


class PartitionReader:
    """Read access to one partition directory (what a graph-store pod mounts).

    Topology arrays are memory-mapped; node data and splits come from RocksDB.
    """

    def __init__(self, part_dir: Path) -> None:
        self.path = Path(part_dir)
        self.manifest = GraphManifest.load(self.path)
        raw = json.loads((self.path / MANIFEST).read_text())
        if "partition_id" not in raw:
            raise FailedPrecondition(
                f"{self.path} is a graph root, not a partition directory (use {self.path}/part-00000)"
            )
        self.partition_id: int = int(raw["partition_id"])
        m = self.manifest
        self.schema = m.schema()
        self.start = int(m.node_offsets[self.partition_id])
        self.stop = int(m.node_offsets[self.partition_id + 1])
        load = lambda name: np.load(self.path / name, mmap_mode="r")  # noqa: E731
        indptr = load("indptr.npy")
        # [R, n_owned+1]: one in-CSR per edge type over the shared indices/edge_ids
        self.etype_indptr: np.ndarray = indptr if indptr.ndim == 2 else indptr[None, :]
        self.indices: np.ndarray = load("indices.npy")
        self.edge_ids: np.ndarray = load("edge_ids.npy")
        self.orig_ids: np.ndarray = load("orig_ids.npy")
        self.halo: np.ndarray = load("halo.npy")
        ts = self.path / "edge_ts.npy"
        self.edge_ts: np.ndarray | None = np.load(ts, mmap_mode="r") if ts.exists() else None
        ef = self.path / "edge_feat.npy"  # absent in partitions written before edge features
        self.edge_feat: np.ndarray | None = np.load(ef, mmap_mode="r") if ef.exists() else None
        num_etypes = len(self.schema.etypes)
        if self.etype_indptr.shape != (num_etypes, self.num_owned + 1):
            raise FailedPrecondition(
                f"{self.path}: indptr has shape {list(indptr.shape)} for {num_etypes} edge type(s) and "
                f"{self.num_owned} owned nodes"
            )
        num_local = int(self.etype_indptr[-1, -1])
        for name in ("indices", "edge_ids"):
            arr = getattr(self, name)
            if arr.dtype not in (np.int32, np.int64) or len(arr) != num_local:
                raise FailedPrecondition(
                    f"{self.path}: {name}.npy is {arr.dtype} [{len(arr)}]; expected int32/int64 [{num_local}]"
                )
        if self.edge_feat is not None:
            _check_edge_feat(self.path, self.edge_feat, len(self.indices))
        # Read-only: no exclusive lock, so several readers (and a restarting server) can open it.
        self._db = Rdict(str(self.path / "db"), options=_db_options(), access_type=AccessType.read_only())

    @property
    def num_owned(self) -> int:
        return self.stop - self.start

    @property
    def indptr(self) -> np.ndarray:
        """The in-CSR over owned nodes of a graph with one edge type (temporal sampling, appends)."""
        if len(self.etype_indptr) != 1:
            raise FailedPrecondition(
                f"{self.path}: the partition has {len(self.etype_indptr)} edge types, so no single in-CSR "
                "(temporal graphs and appends need one edge type)"
            )
        return self.etype_indptr[0]

    def in_degrees(self) -> np.ndarray:
        """int64 [num_owned]: in-degree of each owned node over all edge types."""
        return np.diff(np.asarray(self.etype_indptr, dtype=np.int64), axis=1).sum(axis=0)

    def table_range(self, name: str) -> tuple[int, int]:
        """Global ids ``[lo, hi)`` whose rows node-data table ``name`` holds (its type's owned nodes)."""
        return self.schema.owned_range(self.partition_id, self.manifest.node_data[name].ntype)

    def table_rows(self, name: str) -> int:
        lo, hi = self.table_range(name)
        return hi - lo

    def node_data(self, name: str) -> np.ndarray:
        """The table ``name`` of the owned nodes of its type (shape [table_rows, *row_shape]), from RocksDB."""
        spec = self.manifest.node_data[name]
        dtype = np.dtype(spec.dtype)
        rows_total = self.table_rows(name)
        out = np.empty((rows_total, *spec.row_shape), dtype=dtype)
        flat = out.reshape(rows_total, -1) if rows_total else out
        n_chunks = -(-rows_total // spec.rows_per_chunk)
        keys = [f"nd/{name}/{c:08d}".encode() for c in range(n_chunks)]
        # rocksdict's stub omits get()'s list-of-keys form (a multi_get), which returns a list.
        values = cast("list[bytes | None]", self._db.get(keys))  # type: ignore[arg-type]
        for c, value in enumerate(values):
            if value is None:
                raise FailedPrecondition(f"{self.path}: node data {name!r} chunk {c} missing from RocksDB")
            rows = (
                np.frombuffer(value, dtype=dtype).reshape(-1, *flat.shape[1:])
                if flat.ndim > 1
                else np.frombuffer(value, dtype=dtype)
            )
            start = c * spec.rows_per_chunk
            flat[start : start + len(rows)] = rows
        return out

    def node_data_chunks(self, name: str) -> Iterator[bytes]:
        """The row bytes of ``name`` chunk by chunk, in order (one RocksDB value in memory at a time)."""
        spec = self.manifest.node_data[name]
        for c in range(-(-self.table_rows(name) // spec.rows_per_chunk)):
            value = self._db.get(f"nd/{name}/{c:08d}".encode())
            if value is None:
                raise FailedPrecondition(f"{self.path}: node data {name!r} chunk {c} missing from RocksDB")
            yield value

    def split(self, name: str) -> np.ndarray | None:
        """Owned gids in split ``name`` (ascending), or None if the split does not exist."""
        value = self._db.get(f"split/{name}".encode())
        return None if value is None else np.frombuffer(value, dtype=np.int64)

    def edge_split(self, name: str) -> np.ndarray | None:
        """Rows ``(src, dst, etype, eid, rev_eid)`` (int64 [n, 5]) of edge split ``name`` whose
        dst this partition owns (see :mod:`graphfeed.ingest.edge_split`), or None."""
        value = self._db.get(f"edge_split/{name}".encode())
        return None if value is None else np.frombuffer(value, dtype=np.int64).reshape(-1, 5)

    def close(self) -> None:
        self._db.close()
