"""The write-ahead log of one embedding table's pushes: a push is acknowledged only once its
record is in this file and the file is fsync'd.

A flat append-only file: each record is a 16-byte header (magic ``GFEP``, header length,
payload length, CRC-32 of both) then a JSON header (step, rank, world size, digest, row count)
and the payload (the local rows as int64, then the float32 gradients). A crash can leave only a
torn last record (never acknowledged); :class:`PushLog` drops it when it opens. Rewriting the
log (after a flush or a restore) writes a new file and renames it over the old one.
"""

from __future__ import annotations

import json
import os
import struct
import zlib
from collections.abc import Iterable, Iterator
from dataclasses import dataclass
from pathlib import Path

import numpy as np

from graphfeed.graph_store.embeddings.types import StepKey, StepPush

_MAGIC = b"GFEP"
_HEAD = struct.Struct("<4sIII")


@dataclass(frozen=True)
class LoggedPush:
    """One logged push: who sent it and what (``rows``: local row numbers of the table)."""

    push: StepPush
    rows: np.ndarray  # int64 [n]
    grads: np.ndarray  # float32 [n, dim]


def _encode(rec: LoggedPush) -> bytes:
    p = rec.push
    header = json.dumps(
        {"epoch": p.key.epoch, "step": p.key.step, "rank": p.rank, "world_size": p.world_size, "digest": p.digest}
    ).encode()
    payload = np.ascontiguousarray(rec.rows, np.int64).tobytes() + np.ascontiguousarray(rec.grads, np.float32).tobytes()
    crc = zlib.crc32(header + payload)
    return _HEAD.pack(_MAGIC, len(header), len(payload), crc) + header + payload


def _read(data: bytes, dim: int) -> tuple[list[LoggedPush], int]:
    """The whole records in ``data`` and the byte length they fill (a torn tail is left out)."""
    out, at = [], 0
    while at + _HEAD.size <= len(data):
        magic, hlen, plen, crc = _HEAD.unpack_from(data, at)
        end = at + _HEAD.size + hlen + plen
        body = data[at + _HEAD.size : end]
        if magic != _MAGIC or end > len(data) or zlib.crc32(body) != crc:
            break
        h = json.loads(body[:hlen])
        n = plen // (8 + 4 * dim)
        rows = np.frombuffer(body, np.int64, n, hlen).copy()
        grads = np.frombuffer(body, np.float32, n * dim, hlen + 8 * n).reshape(n, dim).copy()
        push = StepPush(StepKey(h["epoch"], h["step"]), h["rank"], h["world_size"], h["digest"])
        out.append(LoggedPush(push, rows, grads))
        at = end
    return out, at


def _fsync_dir(path: Path) -> None:
    fd = os.open(path, os.O_RDONLY)
    try:
        os.fsync(fd)
    finally:
        os.close(fd)


class PushLog:
    """The log file at ``path`` (created if missing) of a table whose rows are ``dim`` wide."""

    def __init__(self, path: Path, dim: int) -> None:
        self.path = Path(path)
        self.dim = dim
        self.bytes_written = 0
        if not self.path.exists():
            self.rewrite([])
        self._file = open(self.path, "r+b")  # noqa: SIM115 - held open for appends until close()
        records, good = _read(self._file.read(), dim)
        self._records = records
        self._file.truncate(good)  # a torn last record was never acknowledged
        self._file.seek(good)

    def records(self) -> list[LoggedPush]:
        """The records found when the log was opened, in file order."""
        return list(self._records)

    def append(self, rec: LoggedPush) -> None:
        """Appends ``rec`` and fsyncs: once this returns the push survives a crash."""
        data = _encode(rec)
        self._file.write(data)
        self._file.flush()
        os.fsync(self._file.fileno())
        self.bytes_written += len(data)

    def rewrite(self, keep: Iterable[LoggedPush]) -> None:
        """Replaces the log by ``keep`` (atomically: a crash leaves the old or the new file)."""
        tmp = self.path.with_suffix(".tmp")
        with open(tmp, "wb") as f:
            for rec in keep:
                f.write(_encode(rec))
            f.flush()
            os.fsync(f.fileno())
        old = getattr(self, "_file", None)
        os.replace(tmp, self.path)
        _fsync_dir(self.path.parent)
        if old is not None:
            old.close()
            self._file = open(self.path, "r+b")  # noqa: SIM115
            self._file.seek(0, os.SEEK_END)

    def __iter__(self) -> Iterator[LoggedPush]:
        return iter(self._records)

    def close(self) -> None:
        self._file.close()
