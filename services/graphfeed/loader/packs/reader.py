"""Reading packed minibatch features (format: :mod:`graphfeed.loader.packs.format`).

:class:`PackReader` reads one pack file with a few large ``preadv`` calls (chunks of
``chunk_bytes`` spread over a thread pool; optionally ``O_DIRECT``, so the page cache is
neither used nor polluted), checks every checksum, and hands back a :class:`LoadedPack` that
answers "which of these ids are packed, and their rows" with one ``searchsorted``. A pack that
is shorter than its manifest says or fails a checksum raises :class:`PackCorrupt`: the caller
fetches the rows from the base store instead, never serving a wrong row.
"""

from __future__ import annotations

import dataclasses
import mmap
import os
import threading
import zlib
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass
from pathlib import Path

import numpy as np

from graphfeed.common.limits import PACK_READ_CHUNK_BYTES
from graphfeed.common.rows import scatter_rows
from graphfeed.loader.job import JobSpec
from graphfeed.loader.packs.format import ALIGN, RESIDENT, GraphIdentity, PackCorrupt, PackFile, PackManifest

__all__ = ["LoadedPack", "PackReader"]


@dataclass(frozen=True)
class LoadedPack:
    """One pack in memory: its rows, and its gids sorted for lookup."""

    index: int
    rows: np.ndarray  # [num_rows, *row_shape], in pack order
    sorted_ids: np.ndarray  # int64, ascending
    row_of: np.ndarray  # rows[row_of[i]] is the row of sorted_ids[i]
    dense: np.ndarray | None = None  # int32 per gid: its pack row, -1 if not packed (see with_dense)

    def with_dense(self, num_nodes: int) -> LoadedPack:
        """The same pack, found through a gid -> row table (4 bytes a node) instead of a binary
        search: a step's ~10^5 misses searched in ~10^6 sorted ids cost more than the table's
        one random read each (1M-node graph: searchsorted was a tenth of a packed epoch's CPU)."""
        dense = np.full(num_nodes, -1, dtype=np.int32)
        dense[self.sorted_ids] = self.row_of
        return dataclasses.replace(self, dense=dense)

    def find(self, ids: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
        """``(found_mask, the pack row of each found id)`` in ``ids`` order."""
        ids = np.asarray(ids, dtype=np.int64)
        if self.dense is not None:
            at = self.dense[ids]
            found = at >= 0
            return found, at[found].astype(np.int64)
        if not len(self.sorted_ids):
            return np.zeros(len(ids), dtype=bool), np.empty(0, dtype=np.int64)
        pos = np.minimum(np.searchsorted(self.sorted_ids, ids), len(self.sorted_ids) - 1)
        found = self.sorted_ids[pos] == ids
        return found, self.row_of[pos[found]]

    def lookup(self, ids: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
        """``(found_mask, rows of ids[found_mask])`` in ``ids`` order."""
        found, at = self.find(ids)
        return found, self.rows[at]

    def place(self, ids: np.ndarray, out: np.ndarray, positions: np.ndarray) -> np.ndarray:
        """``out[positions[i]] = row of ids[i]`` for the ids the pack holds, each row copied
        once from the pack (no temporary: a step's misses are tens of MiB); returns the mask."""
        found, at = self.find(ids)
        where = np.asarray(positions, dtype=np.int64)[found]
        if out.dtype == self.rows.dtype and out.shape[1:] == self.rows.shape[1:] and out.flags.c_contiguous:
            scatter_rows(self.rows, np.asarray(at, dtype=np.int64), out, where)
        else:  # another dtype (a wire dtype): numpy converts
            out[where] = self.rows[at]
        return found


class PackReader:
    """Reads the packs of one epoch of one job's rank.

    Args:
        pack_dir: the pack directory (``<pack root>/<job_key(job, epoch)>``).
        manifest: its manifest (see :meth:`open`, which checks it first).
        threads: preads in flight for one pack (>= 1).
        direct: open files with ``O_DIRECT`` (bypasses the page cache; falls back to buffered
            reads where the file system refuses it).
        chunk_bytes: bytes per pread (a multiple of the 4 KiB alignment).
    """

    def __init__(
        self,
        pack_dir: Path,
        manifest: PackManifest,
        *,
        threads: int = 4,
        direct: bool = False,
        chunk_bytes: int = PACK_READ_CHUNK_BYTES,
    ) -> None:
        self.pack_dir = Path(pack_dir)
        self.manifest = manifest
        self.direct = direct
        self.chunk_bytes = max(ALIGN, chunk_bytes // ALIGN * ALIGN)
        self._pool = ThreadPoolExecutor(max_workers=max(1, threads), thread_name_prefix="pack-pread")
        self._lock = threading.Lock()
        self.bytes_read = 0  # from disk, by this reader (every pread, padding included)

    @classmethod
    def open(cls, pack_dir: Path, graph: GraphIdentity, job: JobSpec, epoch: int, **kw: int | bool) -> PackReader:
        """Opens ``pack_dir`` for ``job``'s ``epoch`` on ``graph``; ``kw`` as the constructor's.

        Raises:
            PackMismatch: the packs are for another graph, job or epoch.
            FailedPrecondition: no readable manifest there.
        """
        manifest = PackManifest.load(pack_dir)
        manifest.check(graph, job, epoch)
        return cls(pack_dir, manifest, **kw)  # type: ignore[arg-type]

    def resident_ids(self) -> np.ndarray:
        """The gids left out of the packs for a memory tier to hold (int64, ascending).

        Raises:
            PackCorrupt: the list fails its checksum.
        """
        ids = np.load(self.pack_dir / RESIDENT)
        if len(ids) != self.manifest.num_resident or zlib.crc32(ids.tobytes()) != self.manifest.resident_crc32:
            raise PackCorrupt(f"{self.pack_dir / RESIDENT} does not match its manifest")
        return ids

    def read_pack(self, index: int) -> LoadedPack:
        """Reads and checks pack ``index``.

        Raises:
            PackCorrupt: the file is short, or a step range or the gids fail their checksum.
            OSError: the file cannot be read.
        """
        pf = self.manifest.packs[index]
        path = self.pack_dir / pf.file
        buf = self._read(path, pf)
        view = memoryview(buf)
        for s in pf.steps:
            if zlib.crc32(view[s.offset : s.offset + s.nbytes]) != s.crc32:
                raise PackCorrupt(f"{path}: the rows of step {s.step} fail their checksum")
        ids_end = pf.ids_offset + 8 * pf.num_rows
        if zlib.crc32(view[pf.ids_offset : ids_end]) != pf.ids_crc32:
            raise PackCorrupt(f"{path}: the gids fail their checksum")
        m = self.manifest
        rows = np.frombuffer(buf, dtype=m.dtype, count=pf.num_rows * m.row_bytes // np.dtype(m.dtype).itemsize)
        ids = np.frombuffer(buf, dtype=np.int64, count=pf.num_rows, offset=pf.ids_offset)
        row_of = np.argsort(ids, kind="stable")
        pack = LoadedPack(index, rows.reshape(pf.num_rows, *m.row_shape), ids[row_of], row_of)
        # the gid -> row table where it costs at most a quarter of the pack's rows
        return pack.with_dense(m.graph.num_nodes) if 16 * m.graph.num_nodes <= len(buf) else pack

    def rows(self, step: int, ids: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
        """``(found_mask, rows of ids[found_mask])`` for minibatch ``step`` (reads its pack)."""
        return self.read_pack(self.manifest.pack_of(step)).lookup(ids)

    def _read(self, path: Path, pf: PackFile) -> mmap.mmap:
        """The whole file in a page-aligned buffer, read by ``chunk_bytes`` preads in parallel."""
        fd = self._open(path)
        try:
            size = os.fstat(fd).st_size
            if size < pf.file_bytes:
                raise PackCorrupt(f"{path} has {size} bytes, its manifest says {pf.file_bytes}: truncated")
            buf = mmap.mmap(-1, max(pf.file_bytes, 1))  # anonymous: page-aligned, as O_DIRECT needs
            view = memoryview(buf)
            starts = range(0, pf.file_bytes, self.chunk_bytes)
            reads = [self._pool.submit(_pread_full, fd, view[o : o + self.chunk_bytes], o, path) for o in starts]
            got = sum(f.result() for f in reads)
            with self._lock:
                self.bytes_read += got
            return buf
        finally:
            os.close(fd)

    def _open(self, path: Path) -> int:
        if self.direct and hasattr(os, "O_DIRECT"):
            try:
                return os.open(path, os.O_RDONLY | os.O_DIRECT)
            except OSError:  # tmpfs and some others refuse O_DIRECT: read through the page cache
                self.direct = False
        return os.open(path, os.O_RDONLY)

    def close(self) -> None:
        """Stops the pread threads."""
        self._pool.shutdown(wait=False, cancel_futures=True)


def _pread_full(fd: int, into: memoryview, offset: int, path: Path) -> int:
    """Fills ``into`` from ``offset`` (retrying short reads); bytes read.

    Raises:
        PackCorrupt: the file ended first.
    """
    done = 0
    while done < len(into):
        n = os.preadv(fd, [into[done:]], offset + done)
        if n == 0:
            raise PackCorrupt(f"{path} ended at byte {offset + done}: truncated")
        done += n
    return done
