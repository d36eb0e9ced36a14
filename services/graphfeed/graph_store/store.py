"""The graph-store core: one partition's topology, node data and splits, without gRPC.

The servicer (:mod:`graphfeed.graph_store.servicer`) adapts it to the wire; samplers and
loaders use it in-process through :class:`graphfeed.graph_store.client.LocalPartitionSet`.
"""

from __future__ import annotations

import logging
from collections.abc import Iterator, Sequence
from pathlib import Path
from typing import Any

import numpy as np

from graphfeed.common.errors import FailedPrecondition, InvalidArgument, NotFound, ResourceExhausted, name_ids
from graphfeed.common.limits import (
    GRAPH_STORE_MAX_IDS_PER_REQUEST,
    MAX_ANSWER_BYTES,
    MAX_FANOUT,
    NODE_DATA_CHUNK_BYTES,
)
from graphfeed.common.partition import EDGE_SPLIT_PREFIX, PartitionReader
from graphfeed.graph_store.embeddings.store import EmbeddingStore
from graphfeed.graph_store.requests import check_answer_size, check_draw_position, check_fanouts, local_exclusion
from graphfeed.graph_store.rowstore import RowSource, RowSources, RowStats
from graphfeed.graph_store.sampling import Alloc, etype_row_ranges, sample_typed
from graphfeed.graph_store.temporal.store import TemporalStore
from graphfeed.graph_store.types import Exclusion, NodeDataInfo, PartitionInfo, SampledNeighbors

log = logging.getLogger(__name__)


def _load_splits(reader: PartitionReader) -> dict[str, np.ndarray]:
    """Every split of the partition, read from RocksDB into memory (they are small)."""
    splits: dict[str, np.ndarray] = {}
    found = [(name, reader.split(name)) for name in reader.manifest.splits]
    found += [(EDGE_SPLIT_PREFIX + n, reader.edge_split(n)) for n in reader.manifest.edge_splits]  # rows, not ids
    for name, values in found:
        if values is not None:
            own = np.array(values, dtype=np.int64)  # own copy, not RocksDB's buffer
            own.flags.writeable = False  # handed out as is by get_split
            splits[name] = own
    return splits


def _partition_info(reader: PartitionReader) -> PartitionInfo:
    m = reader.manifest
    return PartitionInfo(
        partition_id=reader.partition_id,
        num_partitions=m.num_partitions,
        num_nodes=m.num_nodes,
        num_edges=m.num_edges,
        node_offsets=np.asarray(m.node_offsets, dtype=np.int64),
        node_data={n: NodeDataInfo(n, np.dtype(s.dtype), tuple(s.row_shape), s.ntype) for n, s in m.node_data.items()},
        num_classes=m.num_classes,
        dataset=m.dataset,
        schema_version=m.schema_version,
        num_local_edges=len(reader.indices),
        schema=reader.schema,
        num_halo_nodes=len(reader.halo),
        graph_version=m.graph_version,
    )


class GraphStore:
    """Serves one partition: neighbor sampling, node-data rows, degrees and splits.

    Topology (``indptr``/``indices``/``edge_ids``) stays memory-mapped from the ``.npy`` files.
    Splits are read from RocksDB into memory when the store opens, and the RocksDB handle is
    then closed. Node data comes from :class:`~graphfeed.graph_store.rowstore.RowSources`:
    every table in memory (the default), or, with ``memory_budget``, the rows of the
    highest in-degree nodes in memory and the others read on demand from a flat copy on disk.

    Every public method validates its input through :meth:`_owned_rows` and raises
    :class:`~graphfeed.common.errors.GraphfeedError` subclasses with a message saying what
    was wrong; instances are safe to share between threads (all state is read-only).

    Args:
        reader: the opened partition; the store owns it (its RocksDB handle is closed once
            node data and splits are loaded; its memory-mapped topology stays in use).
        max_ids_per_request: most seeds/ids accepted in one call (default 4,000,000).
        max_fanout: largest ``fanout`` accepted besides ``-1`` (default 1000).
        max_answer_bytes: most bytes of sampled edges one call may answer with (default
            :data:`~graphfeed.common.limits.MAX_ANSWER_BYTES`; also the temporal graph's).
        chunk_bytes: most bytes of rows per chunk from :meth:`iter_node_data` (default 4 MiB;
            a chunk always holds at least one row).
        memory_budget: bytes of node data kept in memory; 0 (default) keeps all of it.
        direct_io: with a budget, read the other rows with ``O_DIRECT`` (no page cache).
        io_threads: with a budget, threads reading rows from disk (default 8).
        append_dir: the temporal append log (RocksDB); with it, :attr:`temporal` takes appends.
        embeddings_dir: where trainable embedding tables live (default ``<partition dir>/embeddings``).
        temporal_limits: limits of the :class:`~graphfeed.graph_store.temporal.store.TemporalStore`.

    Attributes:
        temporal: the partition's temporal graph (appends, temporal sampling), created when the
            partition has edge timestamps or ``append_dir`` is given; else None.
        embeddings: the partition's trainable embedding tables (issue 25), reopened from disk.
    """

    def __init__(
        self,
        reader: PartitionReader,
        *,
        max_ids_per_request: int = GRAPH_STORE_MAX_IDS_PER_REQUEST,
        max_fanout: int = MAX_FANOUT,
        max_answer_bytes: int = MAX_ANSWER_BYTES,
        chunk_bytes: int = NODE_DATA_CHUNK_BYTES,
        memory_budget: int = 0,
        direct_io: bool = False,
        io_threads: int = 8,
        append_dir: Path | None = None,
        embeddings_dir: Path | None = None,
        **temporal_limits: int,
    ) -> None:
        self._reader = reader
        # Typed graphs: the rows each edge type's edges end in (sampling reads no others).
        self._row_ranges = etype_row_ranges(reader.etype_indptr) if len(reader.etype_indptr) > 1 else None
        self._closed = False
        self.max_ids_per_request = max_ids_per_request
        self.max_fanout = max_fanout
        self.max_answer_bytes = max_answer_bytes
        self.chunk_bytes = chunk_bytes
        self.partition_id: int = reader.partition_id
        self.start: int = reader.start
        self.stop: int = reader.stop
        try:
            if max_ids_per_request < 1 or max_fanout < 0 or chunk_bytes < 1 or memory_budget < 0 or io_threads < 1:
                raise ValueError(
                    f"bad limits: max_ids_per_request={max_ids_per_request} (>= 1), "
                    f"max_fanout={max_fanout} (>= 0), chunk_bytes={chunk_bytes} (>= 1), "
                    f"memory_budget={memory_budget} (>= 0), io_threads={io_threads} (>= 1)"
                )
            self._degrees = reader.in_degrees()
            self._splits = _load_splits(reader)
            self._tables = RowSources.open(reader, self._degrees, memory_budget, bool(direct_io), io_threads)
        finally:
            # What RocksDB holds is in memory or in flat files now. Closing the handle drops
            # RocksDB's exclusive LOCK, so other stores (tests, a restarted pod) can open the
            # same partition.
            reader.close()
        self.schema = reader.schema
        self._table_ranges = {name: reader.table_range(name) for name in reader.manifest.node_data}
        self.temporal: TemporalStore | None = None
        if append_dir is not None and self.schema.is_hetero:
            raise FailedPrecondition(
                f"partition {self.partition_id}: appends need a graph of one node type and one edge type; "
                f"this one has node types {list(self.schema.ntypes)}"
            )
        if reader.edge_ts is not None or append_dir is not None:
            self.temporal = TemporalStore.open(
                reader,
                append_dir,
                max_ids_per_request=max_ids_per_request,
                max_fanout=max_fanout,
                max_answer_bytes=max_answer_bytes,
                **temporal_limits,
            )
        self._info = _partition_info(reader)
        emb_dir = reader.path / "embeddings" if embeddings_dir is None else Path(embeddings_dir)
        self.embeddings = EmbeddingStore(emb_dir, self.schema, self.partition_id, max_ids_per_request, chunk_bytes)
        log.info(
            "partition %d of %r: gids [%d, %d), %d in-edges, node data %s",
            self.partition_id,
            reader.manifest.dataset,
            self.start,
            self.stop,
            len(reader.indices),
            self._tables.names,
        )

    @classmethod
    def open(cls, part_dir: Path, append_dir: Path | None = None, **limits: Any) -> GraphStore:
        """Opens a partition directory (``<root>/part-NNNNN``); ``append_dir``, ``limits`` as in the constructor."""
        return cls(PartitionReader(Path(part_dir)), append_dir=append_dir, **limits)

    def info(self) -> PartitionInfo:
        """Describes this partition and the whole graph."""
        return self._info

    # -- validation -----------------------------------------------------------------------

    def _owned_rows(self, ids: np.ndarray, what: str, *, allow_empty: bool, table: str | None = None) -> np.ndarray:
        """Checks that ``ids`` is a 1-D integer array of owned gids (of the type of node-data
        ``table``, if given); returns local rows (int64) of the partition (or of the table).

        Raises:
            InvalidArgument: not 1-D, not integer, or empty when not allowed.
            ResourceExhausted: more than ``max_ids_per_request`` ids.
            NotFound: an id outside ``[start, stop)`` (up to 5 are named).
        """
        self._check_open()
        arr = np.asarray(ids)
        if arr.ndim != 1:
            raise InvalidArgument(f"{what} must be 1-D, got shape {arr.shape}")
        if arr.size and arr.dtype.kind not in "iu":
            raise InvalidArgument(f"{what} must be integer global ids, got dtype {arr.dtype}")
        if arr.size == 0 and not allow_empty:
            raise InvalidArgument(f"{what} must not be empty")
        if arr.size > self.max_ids_per_request:
            raise ResourceExhausted(
                f"{what}: {arr.size} ids in one request exceed the limit of {self.max_ids_per_request}; "
                "split the request"
            )
        gids = arr.astype(np.int64, copy=False)
        lo, hi = (self.start, self.stop) if table is None else self._table_ranges[table]
        bad = (gids < lo) | (gids >= hi)
        if bad.any():
            if table is None or not self.schema.is_hetero:
                raise NotFound(
                    f"{what} {name_ids(gids[bad])} are not owned by partition {self.partition_id}, "
                    f"which owns [{self.start}, {self.stop})"
                )
            ntype = table.partition("/")[0]
            raise NotFound(
                f"{what} {name_ids(gids[bad])} are not {ntype} nodes owned by partition {self.partition_id} "
                f"(those are [{lo}, {hi})), so node data {table!r} has no row for them"
            )
        return gids - lo

    def _check_open(self) -> None:
        if self._closed:
            raise FailedPrecondition(f"graph-store of partition {self.partition_id} is closed")

    def _table(self, name: str) -> RowSource:
        self._check_open()
        table = self._tables.get(name)
        if table is None:
            raise NotFound(f"node data {name!r} does not exist; available: {self._tables.names}")
        return table

    def _rows(self, name: str, rows: np.ndarray, out: np.ndarray | None = None) -> np.ndarray:
        table = self._table(name)
        if out is None:
            out = np.empty((len(rows), *table.row_shape), dtype=table.dtype)
        table.gather(rows, out)
        return out

    def row_stats(self) -> RowStats:
        """Node-data rows served from memory and from disk, and disk bytes and reads, since open."""
        return self._tables.stats()

    # -- public API -----------------------------------------------------------------------

    def sample_neighbors(
        self,
        seeds: np.ndarray,
        fanout: int | Sequence[int],
        replace: bool,
        rng_seed: int,
        alloc: Alloc | None = None,
        first_position: int = 0,
        exclude: Exclusion | None = None,
    ) -> SampledNeighbors:
        """Samples in-neighbors of owned seeds (see :func:`~graphfeed.graph_store.sampling.sample_csr`).

        Args:
            seeds: int64 [N] owned global ids, non-empty; duplicates are sampled independently.
            fanout: ``-1`` for all in-neighbors, else in ``[0, max_fanout]``; one for every edge
                type, or a sequence of one per edge type (:func:`~graphfeed.graph_store.sampling.sample_typed`).
            replace: sample with replacement (exactly ``fanout`` per seed of degree > 0).
            rng_seed: seed of the counter-based draws, in ``[0, 2**64)``; the same arguments
                always give the same sample (on CPU and GPU alike).
            alloc: where to write ``src``/``edge_ids`` (see :func:`~graphfeed.graph_store.sampling.sample_csr`).
            first_position: batch position of ``seeds[0]`` (a chunk of a larger request).
            exclude: edges to leave out (DGL's ``exclude_eids``, before selection), as int64
                ``(dst gids, edge ids)`` pairs of equal length, edge ``eids[i]`` an in-edge of
                ``dst[i]``; pairs whose dst this partition does not own are ignored.

        Returns:
            The sample in CSR order per seed; ``src`` and ``edge_ids`` are global ids.

        Raises:
            InvalidArgument: a bad argument, e.g. ``exclude`` not int64 pairs of equal length.
        """
        fanouts = check_fanouts(fanout, len(self.schema.etypes), self.max_fanout)
        check_draw_position(rng_seed, first_position)
        rows = self._owned_rows(seeds, "seeds", allow_empty=False)
        excluded = local_exclusion(exclude, self.start, self.stop, self.max_ids_per_request)
        r = self._reader
        # Counts excluded edges too: a bound, exact when nothing is excluded.
        check_answer_size(r.etype_indptr, rows, fanouts, bool(replace), self.max_answer_bytes)
        offsets, src, eids = sample_typed(
            r.etype_indptr,
            r.indices,
            r.edge_ids,
            rows,
            fanouts,
            bool(replace),
            int(rng_seed),
            alloc,
            int(first_position),
            excluded,
            self._row_ranges,
        )
        return SampledNeighbors(offsets=offsets, src=src, edge_ids=eids)

    def get_node_data(self, name: str, ids: np.ndarray, out: np.ndarray | None = None) -> np.ndarray:
        """Rows of node data ``name`` for owned ``ids``, in request order.

        Args:
            name: node-data name.
            ids: owned gids.
            out: where to gather the rows (e.g. a shared-memory segment), shape
                ``[len(ids), *row_shape]`` of the table's dtype; a new array if None.

        Returns:
            Array of shape ``[len(ids), *row_shape]`` (empty ``ids`` give zero rows).
        """
        self._table(name)  # unknown name is reported before id problems
        rows = self._owned_rows(ids, "ids", allow_empty=True, table=name)
        return self._rows(name, rows, out)

    def scatter_node_data(self, name: str, ids: np.ndarray, out: np.ndarray, positions: np.ndarray) -> int:
        """Writes the rows of owned ``ids`` into ``out[positions]`` (one pass, no temporary):
        how rows land directly in a loader's shared-memory minibatch.

        Args:
            out: ``[num_rows, *row_shape]`` of the table's dtype, C-contiguous and writable.
            positions: int64 [len(ids)] rows of ``out``, each in ``[0, num_rows)``.

        Returns:
            The number of rows written.

        Raises:
            InvalidArgument: ``out`` of the wrong shape/dtype or positions out of range.
        """
        table = self._table(name)
        rows = self._owned_rows(ids, "ids", allow_empty=True, table=name)
        positions = np.asarray(positions)
        if out.dtype != table.dtype or out.shape[1:] != table.row_shape or not out.flags.c_contiguous:
            raise InvalidArgument(
                f"target must be [n, {list(table.row_shape)}] {table.dtype}, got {list(out.shape)} {out.dtype}"
            )
        if positions.shape != rows.shape or positions.dtype != np.int64:
            raise InvalidArgument(
                f"positions must be int64 [{len(rows)}], got {positions.dtype} {list(positions.shape)}"
            )
        if len(positions) and (positions.min() < 0 or positions.max() >= len(out)):
            raise InvalidArgument(f"positions must be in [0, {len(out)}), got [{positions.min()}, {positions.max()}]")
        table.gather(rows, out, positions.astype(np.int64, copy=False))
        return len(rows)

    def iter_node_data(self, name: str, ids: np.ndarray) -> Iterator[tuple[int, np.ndarray]]:
        """Like :meth:`get_node_data`, in chunks of at most ``chunk_bytes`` (at least one row).

        Validation happens before the first chunk (the call raises, not the iteration).

        Yields:
            ``(start, rows)``: ``rows`` are those of ``ids[start:start + len(rows)]``. Empty
            ``ids`` yield one empty chunk, so a receiver still learns dtype and row shape.
        """
        table = self._table(name)
        rows = self._owned_rows(ids, "ids", allow_empty=True, table=name)
        row_bytes = max(1, table.row_bytes)
        per_chunk = max(1, self.chunk_bytes // row_bytes)
        return self._chunks(name, rows, per_chunk)

    def _chunks(self, name: str, rows: np.ndarray, per_chunk: int) -> Iterator[tuple[int, np.ndarray]]:
        if len(rows) == 0:
            yield 0, self._rows(name, rows)
            return
        for start in range(0, len(rows), per_chunk):
            yield start, self._rows(name, rows[start : start + per_chunk])

    def get_degrees(self, ids: np.ndarray) -> np.ndarray:
        """In-degree (int64) of each owned id, in request order; empty ``ids`` allowed."""
        return self._degrees[self._owned_rows(ids, "ids", allow_empty=True)]

    def get_split(self, name: str) -> np.ndarray:
        """Owned global ids in split ``name`` ("train", "val", "test"), ascending."""
        self._check_open()
        gids = self._splits.get(name)
        if gids is None:
            raise NotFound(f"split {name!r} does not exist; available: {sorted(self._splits)}")
        return gids

    def temporal_graph(self) -> TemporalStore:
        """:attr:`temporal`; FailedPrecondition when the partition has none."""
        if self.temporal is None:
            raise FailedPrecondition(
                f"partition {self.partition_id} has no temporal graph "
                "(no edge timestamps at ingest and appends disabled)"
            )
        return self.temporal

    def close(self) -> None:
        """Releases the store's data; it must not be used afterwards. Idempotent.

        The RocksDB handle is already closed at open; the topology mmaps are released when
        the last reference to the arrays goes.
        """
        self._closed = True
        self.embeddings.close()
        self._tables.close()
        self._splits = {}
        if self.temporal is not None:
            self.temporal.close()
