"""Node-data rows of a graph-store: all in memory, or the hottest within a memory budget.

With no budget (the default) every table is read from RocksDB into memory at open, as it
always was. With ``memory_budget`` bytes, each table keeps the rows of the highest in-degree
nodes (the most reused: sampled as neighbors most often, the MassiveGNN/DiskGNN argument) in
one contiguous array, found through an id -> slot map, and reads the others on demand from a
flat copy of the table on disk (:class:`~graphfeed.graph_store.diskrows.FlatRows`).

Why a flat file and not RocksDB ``multi_get`` (``graphfeed bench rowstore``, 500k rows of 512
bytes, batches of sorted random ids, page cache dropped, 2-core VM with a virtio disk):
RocksDB holds node data in 1 MiB chunks of rows (``common.partition``), so one wanted row
costs its whole chunk: a 10k-row batch read 50x the bytes asked for (5.0k rows/s). Keys per
row still read 13x (a 4 KiB block per row, plus index blocks) and were the slowest (2.6k
rows/s: a key built and looked up per row). The flat file with ``O_DIRECT`` reads exactly the
rows (1.00x: 512-byte reads on a 512-byte logical block device), 12.9k rows/s with 8 threads
(2.7k with one: the disk wants several reads in flight), and it keeps the page cache out of the
budget. (``np.memmap`` of the same file was faster cold only because its 8 MiB readahead pulled
the whole small table into the page cache, 26x the bytes asked: the memory a budget forbids.)

The file is written at ingest (``node_data/<name>.bin``) and, for a partition ingested before,
exported once from RocksDB at the first budgeted open (a temp file renamed into place); a
missing or wrong-sized file is exported again, never read.
"""

from __future__ import annotations

import logging
import threading
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass

import numpy as np

from graphfeed.common.errors import FailedPrecondition, InvalidArgument
from graphfeed.common.partition import PartitionReader, flat_node_data_path, write_flat_node_data
from graphfeed.common.rows import scatter_rows, take_rows
from graphfeed.graph_store.diskrows import FlatRows

log = logging.getLogger(__name__)

_SLOT_BYTES = 4  # int32 id -> slot map entry, counted in the budget


@dataclass(frozen=True)
class RowStats:
    """Counters of rows served since open (all tables together)."""

    rows_memory: int = 0
    rows_disk: int = 0
    disk_bytes: int = 0
    disk_reads: int = 0


class _Counters:
    def __init__(self) -> None:
        self._lock = threading.Lock()
        self._stats = RowStats()

    def add(self, memory: int, disk: int = 0, nbytes: int = 0, reads: int = 0) -> None:
        with self._lock:
            s = self._stats
            self._stats = RowStats(
                s.rows_memory + memory, s.rows_disk + disk, s.disk_bytes + nbytes, s.disk_reads + reads
            )

    def snapshot(self) -> RowStats:
        return self._stats


class RowSource:
    """Rows of one node-data table by local row index (``gid - start``).

    :meth:`gather` validates the target and calls ``_gather``, which a backend implements.
    """

    def __init__(self, dtype: np.dtype, row_shape: tuple[int, ...], num_rows: int, counters: _Counters) -> None:
        self.dtype, self.row_shape, self.num_rows = np.dtype(dtype), tuple(row_shape), num_rows
        self._counters = counters

    @property
    def row_bytes(self) -> int:
        """Bytes of one row."""
        return self.dtype.itemsize * int(np.prod(self.row_shape, dtype=np.int64))

    def gather(self, rows: np.ndarray, out: np.ndarray, positions: np.ndarray | None = None) -> None:
        """``out[positions[i]] = row rows[i]`` (``out[i]`` when ``positions`` is None).

        Args:
            rows: int64 local rows, each in ``[0, num_rows)`` (validated by the caller).
            out: C-contiguous, writable ``[m, *row_shape]`` of the table's dtype.
            positions: int64 rows of ``out``, one per row, each in ``[0, m)``.

        Raises:
            InvalidArgument: ``out`` does not take this table's rows.
        """
        if (
            out.dtype != self.dtype
            or out.shape[1:] != self.row_shape
            or not out.flags.c_contiguous
            or not out.flags.writeable
        ):
            raise InvalidArgument(
                f"target must be writable C-contiguous [n, {list(self.row_shape)}] {self.dtype}, "
                f"got {list(out.shape)} {out.dtype}"
            )
        if positions is None and len(out) < len(rows):
            raise InvalidArgument(f"target has {len(out)} rows for {len(rows)} ids")
        self._gather(np.asarray(rows, dtype=np.int64), out, positions)

    def _gather(self, rows: np.ndarray, out: np.ndarray, positions: np.ndarray | None) -> None:
        raise NotImplementedError

    def close(self) -> None:
        """Releases the rows (and files); idempotent."""


class InMemoryRows(RowSource):
    """A whole table in memory."""

    def __init__(self, table: np.ndarray, counters: _Counters) -> None:
        super().__init__(table.dtype, table.shape[1:], len(table), counters)
        self._table = table

    def _gather(self, rows: np.ndarray, out: np.ndarray, positions: np.ndarray | None) -> None:
        if positions is None:
            take_rows(self._table, rows, out)
        else:
            scatter_rows(self._table, rows, out, positions)
        self._counters.add(memory=len(rows))

    def close(self) -> None:
        self._table = np.empty((0, *self.row_shape), self.dtype)


class BudgetedRows(RowSource):
    """The hot rows in memory (``hot[slot[r]]`` for ``slot[r] >= 0``), the others from ``disk``."""

    def __init__(self, hot: np.ndarray, slot: np.ndarray, disk: FlatRows, counters: _Counters) -> None:
        super().__init__(hot.dtype, hot.shape[1:], len(slot), counters)
        self._hot, self._slot, self._disk = hot, slot, disk

    def _gather(self, rows: np.ndarray, out: np.ndarray, positions: np.ndarray | None) -> None:
        slots = self._slot[rows].astype(np.int64)
        hot = slots >= 0
        n_hot = int(np.count_nonzero(hot))
        if n_hot == len(rows):
            if positions is None:
                take_rows(self._hot, slots, out)
            else:
                scatter_rows(self._hot, slots, out, positions)
            self._counters.add(memory=n_hot)
            return
        pos = np.arange(len(rows), dtype=np.int64) if positions is None else np.asarray(positions, dtype=np.int64)
        hit = np.flatnonzero(hot)
        scatter_rows(self._hot, slots[hit], out, pos[hit])
        miss = np.flatnonzero(~hot)
        count = self._disk.read(rows[miss], out, pos[miss])
        self._counters.add(memory=n_hot, disk=len(miss), nbytes=count.bytes, reads=count.reads)

    def close(self) -> None:
        self._disk.close()
        self._hot = np.empty((0, *self.row_shape), self.dtype)


class RowSources:
    """Every node-data table of one partition, and the counters and I/O threads they share.

    Open with :meth:`open`; look a table up with :meth:`get`.
    """

    def __init__(self, sources: dict[str, RowSource], counters: _Counters, pool: ThreadPoolExecutor | None) -> None:
        self._sources, self._counters, self._pool = sources, counters, pool

    @classmethod
    def open(
        cls,
        reader: PartitionReader,
        hotness: np.ndarray,
        memory_budget: int = 0,
        direct_io: bool = False,
        io_threads: int = 8,
    ) -> RowSources:
        """Opens the node data of ``reader``'s partition (its RocksDB handle must be open).

        Args:
            reader: the partition.
            hotness: one score per owned node; the highest-scoring nodes' rows stay in memory.
            memory_budget: bytes for node-data rows plus the id -> slot map; 0 keeps every table
                in memory (read from RocksDB), as does a budget that holds them all.
            direct_io: read rows beyond the budget with ``O_DIRECT`` (bypassing the page cache).
            io_threads: threads reading from disk (1 reads in the calling thread).

        Raises:
            FailedPrecondition: a flat copy is missing and cannot be written (read-only mount).
        """
        counters = _Counters()
        m, n = reader.manifest, reader.num_owned
        per_type: dict[str, int] = {}  # bytes of one node's rows, by node type
        for spec in m.node_data.values():
            per_type[spec.ntype] = per_type.get(spec.ntype, 0) + spec.row_bytes
        per_row = max(per_type.values(), default=0)
        keep = (
            n
            if memory_budget <= 0 or per_row == 0
            else int(np.clip((memory_budget - _SLOT_BYTES * n) // per_row, 0, n))
        )
        if keep == n:
            return cls({name: InMemoryRows(reader.node_data(name), counters) for name in m.node_data}, counters, None)
        hot_rows = np.sort(np.argsort(-np.asarray(hotness, dtype=np.int64), kind="stable")[:keep])
        pool = ThreadPoolExecutor(io_threads, thread_name_prefix="graph-store-io") if io_threads > 1 else None
        sources: dict[str, RowSource] = {}
        try:
            for name, spec in m.node_data.items():
                lo, hi = (x - reader.start for x in reader.table_range(name))  # the table's owned rows
                if spec.row_bytes == 0:  # nothing to read (rows of zero elements)
                    sources[name] = InMemoryRows(np.empty((hi - lo, *spec.row_shape), np.dtype(spec.dtype)), counters)
                    continue
                table_hot = hot_rows[(hot_rows >= lo) & (hot_rows < hi)] - lo
                slot = np.full(hi - lo, -1, dtype=np.int32)
                slot[table_hot] = np.arange(len(table_hot), dtype=np.int32)
                disk = _flat_rows(reader, name, direct_io, pool)
                sources[name] = BudgetedRows(
                    _read_hot(disk, table_hot, spec.row_shape, np.dtype(spec.dtype)), slot, disk, counters
                )
        except BaseException:
            for s in sources.values():
                s.close()
            if pool is not None:
                pool.shutdown()
            raise
        log.info(
            "partition %d node data: %d of %d rows in memory (%d bytes of a %d-byte budget), the rest read from disk%s",
            reader.partition_id,
            keep,
            n,
            keep * per_row + _SLOT_BYTES * n,
            memory_budget,
            " with O_DIRECT" if direct_io else "",
        )
        return cls(sources, counters, pool)

    def get(self, name: str) -> RowSource | None:
        """The rows of table ``name``, or None if there is no such table."""
        return self._sources.get(name)

    @property
    def names(self) -> list[str]:
        """Table names, sorted."""
        return sorted(self._sources)

    def stats(self) -> RowStats:
        """Rows served from memory and from disk, and disk bytes and reads, since open."""
        return self._counters.snapshot()

    def close(self) -> None:
        """Closes every table and stops the I/O threads; idempotent."""
        for s in self._sources.values():
            s.close()
        self._sources = {}
        if self._pool is not None:
            self._pool.shutdown()
            self._pool = None


_FILL_BYTES = 4 << 20  # the table is read in pieces of this size to fill the hot rows


def _read_hot(disk: FlatRows, hot_rows: np.ndarray, row_shape: tuple[int, ...], dtype: np.dtype) -> np.ndarray:
    """The rows ``hot_rows`` (ascending) of ``disk``, read by streaming the whole table in
    pieces: sequential reads beat random ones as soon as a few percent of the rows are hot
    (bench rowstore: ~40k random rows/s against ~1M sequential rows/s)."""
    hot = np.empty((len(hot_rows), *row_shape), dtype=dtype)
    step = max(1, _FILL_BYTES // disk.row_bytes)
    piece = np.empty((step, *row_shape), dtype=dtype)
    for lo in range(0, disk.num_rows, step):
        hi = min(disk.num_rows, lo + step)
        a, b = np.searchsorted(hot_rows, [lo, hi])
        if a < b:
            disk.read(np.arange(lo, hi, dtype=np.int64), piece, np.arange(hi - lo, dtype=np.int64))
            hot[a:b] = piece[hot_rows[a:b] - lo]
    return hot


def _flat_rows(reader: PartitionReader, name: str, direct_io: bool, pool: ThreadPoolExecutor | None) -> FlatRows:
    """The flat copy of ``name``, exported from RocksDB first when it is missing or of the wrong size."""
    spec = reader.manifest.node_data[name]
    path = flat_node_data_path(reader.path, name)
    expected = reader.table_rows(name) * spec.row_bytes
    size = path.stat().st_size if path.exists() else None
    if size != expected:
        what = "missing" if size is None else f"{size} bytes, expected {expected}"
        log.warning("%s is %s: exporting node data %r from RocksDB (once)", path, what, name)
        try:
            write_flat_node_data(reader.path, name, reader.node_data_chunks(name))
        except OSError as e:
            raise FailedPrecondition(
                f"cannot write {path} ({e}); run `graphfeed ingest` again or mount the partition writable"
            ) from e
    return FlatRows(path, reader.table_rows(name), spec.row_bytes, direct=direct_io, pool=pool)
