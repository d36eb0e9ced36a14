"""Durability of temporal appends: a RocksDB log of acknowledged batches, replayed at open.

GNNFlow keeps its dynamic graph in (GPU/host) memory only; graphfeed acknowledges an append
only once it is durable. Each batch is ONE RocksDB write batch put into the WAL by
:meth:`TemporalLog.write`, and the store acknowledges it only after :meth:`TemporalLog.sync`
(``flush_wal(sync=True)``: fsync of the WAL) has returned. That is the guarantee of a
``sync=True`` write, split in two because rocksdict holds the GIL through a synced write but
releases it in ``flush_wal`` (samples keep running during the fsync), and because appenders
that sync at the same time share one fsync (group commit). The write batch holds:

- ``b/<seq:8 bytes big-endian>``: the batch as stored (sorted by ``(dst, t)``): a 24-byte
  header (``num_edges``, ``edge_feat_dim``, ``first edge seq``, int64) then the raw int64
  ``src``, ``dst``, ``t`` and float32 ``efeat`` bytes;
- ``id/<batch_id>``: the client's batch id -> JSON ``{digest, first_eid, num_edges, visible_seq}``,
  so a retried batch is answered with its original ack and never applied twice (read per
  append with a point lookup: no process holds a long stream's batch ids in memory);
- ``meta/seq``: batches acknowledged so far.

A crash can only lose a batch whose write batch was not synced, i.e. one never acknowledged;
RocksDB applies a write batch atomically, so a batch is either wholly in the log or absent.
Once a snapshot of the compacted graph is on disk (:mod:`~graphfeed.graph_store.temporal.snapshot`),
:meth:`TemporalLog.drop_batches` deletes the batches it covers; the ``id/`` acks are kept.
``meta/layout`` pins the partition and edge-feature width the log was written for.
"""

from __future__ import annotations

import hashlib
import json
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import cast

import numpy as np
from rocksdict import Options, Rdict, WriteBatch, WriteOptions

from graphfeed.common.errors import FailedPrecondition

_BATCH = b"b/"
_ID = b"id/"
_SEQ = b"meta/seq"
_LAYOUT = b"meta/layout"
_HEADER = 3  # int64 words before the arrays


@dataclass(frozen=True)
class LoggedAck:
    """What was answered for a batch id (returned again to a retry)."""

    digest: str
    first_eid: int
    num_edges: int
    visible_seq: int


@dataclass(frozen=True)
class LoggedBatch:
    """One acknowledged batch, as stored: sorted by ``(dst, t)``."""

    seq: int  # the batch's sequence number (1, 2, ...)
    first_edge_seq: int
    src: np.ndarray
    dst: np.ndarray
    t: np.ndarray
    efeat: np.ndarray  # float32 [n, D]


def content_digest(src: np.ndarray, dst: np.ndarray, t: np.ndarray, efeat: np.ndarray) -> str:
    """A digest of a batch's content as the client sent it (int64 / float32 arrays)."""
    h = hashlib.blake2b(digest_size=16)
    for arr in (src, dst, t, efeat):
        h.update(np.ascontiguousarray(arr).data)
    h.update(str(efeat.shape).encode())
    return h.hexdigest()


class TemporalLog:
    """The RocksDB log at ``log_dir`` (created if missing), opened read-write (exclusively).

    Args:
        log_dir: the database directory.
        layout: ``{"partition_id", "num_partitions", "edge_feat_dim"}``; a log written for
            another layout is refused (FailedPrecondition).
    """

    def __init__(self, log_dir: Path, layout: dict[str, int]) -> None:
        Path(log_dir).mkdir(parents=True, exist_ok=True)
        opt = Options(raw_mode=True)
        opt.create_if_missing(True)
        self.path = Path(log_dir)
        self.layout = layout
        self._db = Rdict(str(self.path), options=opt)
        self._sync = WriteOptions()
        self._sync.sync = True
        self._wal_only = WriteOptions()  # into the WAL (not synced): write() syncs it without the GIL
        self.bytes_written = 0
        stored = cast("bytes | None", self._db.get(_LAYOUT))
        if stored is None:
            self._db.put(_LAYOUT, json.dumps(layout, sort_keys=True).encode(), self._sync)
        elif json.loads(stored) != layout:
            self._db.close()
            raise FailedPrecondition(f"append log {self.path} was written for {stored.decode()}, not {layout}")

    def seq(self) -> int:
        """Batches acknowledged so far."""
        value = cast("bytes | None", self._db.get(_SEQ))
        return 0 if value is None else int.from_bytes(value, "big")

    def ack(self, batch_id: str) -> LoggedAck | None:
        """The ack of ``batch_id`` if it was written (synced or not yet), else None: a point
        read, so no process holds every batch id of a long stream in memory."""
        value = cast("bytes | None", self._db.get(_ID + batch_id.encode()))
        return None if value is None else LoggedAck(**json.loads(value))

    def batches(self, from_seq: int = 1) -> Iterator[LoggedBatch]:
        """The acknowledged batches in sequence order, from ``from_seq`` on (earlier ones may be dropped)."""
        for key, value in self._items(_BATCH + from_seq.to_bytes(8, "big")):
            if not key.startswith(_BATCH):
                break
            yield _decode(int.from_bytes(key[len(_BATCH) :], "big"), value)

    def _items(self, prefix: bytes) -> Iterator[tuple[bytes, bytes]]:
        # raw_mode: keys and values are bytes (the stub types them as any value)
        return cast("Iterator[tuple[bytes, bytes]]", iter(self._db.items(from_key=prefix)))

    def sync(self) -> None:
        """Fsyncs the WAL (GIL released): every batch written before the call is durable after it."""
        self._db.flush_wal(True)

    def write(
        self,
        batch_id: str,
        ack: LoggedAck,
        first_edge_seq: int,
        src: np.ndarray,
        dst: np.ndarray,
        t: np.ndarray,
        efeat: np.ndarray,
    ) -> None:
        """Writes one batch, its ack and the new seq atomically into the WAL; durable after :meth:`sync`."""
        n, dim = len(src), efeat.shape[1]
        header = np.array([n, dim, first_edge_seq], dtype=np.int64)
        value = b"".join(
            np.ascontiguousarray(a).tobytes() for a in (header, src, dst, t, efeat.astype(np.float32, copy=False))
        )
        wb = WriteBatch(raw_mode=True)
        wb.put(_BATCH + ack.visible_seq.to_bytes(8, "big"), value)
        record = {
            "digest": ack.digest,
            "first_eid": ack.first_eid,
            "num_edges": ack.num_edges,
            "visible_seq": ack.visible_seq,
        }
        wb.put(_ID + batch_id.encode(), json.dumps(record).encode())
        wb.put(_SEQ, ack.visible_seq.to_bytes(8, "big"))
        self._db.write(wb, self._wal_only)
        self.bytes_written += len(value)

    def drop_batches(self, upto_seq: int) -> None:
        """Deletes batches ``<= upto_seq`` (a persisted snapshot holds them); their acks stay.

        Not synced: a crash may bring them back, and replay skips what the snapshot covers.
        The range is compacted away at once, so the space is given back now, not eventually.
        """
        begin, end = _BATCH + (0).to_bytes(8, "big"), _BATCH + (upto_seq + 1).to_bytes(8, "big")
        self._db.delete_range(begin, end)
        self._db.compact_range(begin, end)

    def close(self) -> None:
        """Closes the database (idempotent)."""
        if self._db is not None:
            self._db.close()
            self._db = None  # type: ignore[assignment]


def _decode(seq: int, value: bytes) -> LoggedBatch:
    header = np.frombuffer(value, dtype=np.int64, count=_HEADER)
    n, dim, first = (int(x) for x in header)
    ints = np.frombuffer(value, dtype=np.int64, count=3 * n, offset=8 * _HEADER)
    efeat = np.frombuffer(value, dtype=np.float32, count=n * dim, offset=8 * (_HEADER + 3 * n)).reshape(n, dim)
    return LoggedBatch(seq, first, ints[:n], ints[n : 2 * n], ints[2 * n :], efeat)
