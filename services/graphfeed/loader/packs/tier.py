"""The packed-disk tier of the loader's feature store: GPU cache -> host cache -> packs ->
graph-stores.

A loader given a pack root (``LoaderSettings.pack_root``) looks for the packs of each stream's
job and epoch at ``<pack root>/<job_key(job, epoch)>`` (written by ``graphfeed pack``). The
stream's cache misses are served from the step's pack where it has them; the rest (resident
rows the cache does not hold, or everything when a pack is unusable) are fetched from the
graph-stores as before. Packs are read ahead: when step ``s`` is gathered, the packs of steps up
to ``s + lookahead`` are being read, so disk reads overlap the training of earlier steps.
At most ``max_packs`` packs are held in memory per stream.
"""

from __future__ import annotations

import logging
import threading
import time
from concurrent.futures import Future, ThreadPoolExecutor
from dataclasses import dataclass
from pathlib import Path

import numpy as np

from graphfeed.common.errors import FailedPrecondition
from graphfeed.graph_store.types import PartitionInfo, RowsInto
from graphfeed.loader.cache.tiers import TierStats
from graphfeed.loader.job import JobSpec
from graphfeed.loader.packs.format import MANIFEST, GraphIdentity, PackCorrupt, job_key
from graphfeed.loader.packs.reader import LoadedPack, PackReader

log = logging.getLogger(__name__)


@dataclass
class PackStats:
    """Cumulative counters of the pack tier of one loader (all streams)."""

    hits: int = 0  # cache-miss rows served from packs
    misses: int = 0  # cache-miss rows of packed streams fetched from graph-stores instead
    disk_bytes: int = 0  # read from pack files
    fallbacks: int = 0  # packs that failed their checks: their steps went to the graph-stores
    refused: int = 0  # pack directories refused at open (another graph, job or epoch)
    unpacked: int = 0  # streams (one epoch of one rank) that found no packs and read the graph-stores
    reused: int = 0  # streams served from another epoch's packs of their job (none written for theirs)
    read_seconds: float = 0.0

    def __post_init__(self) -> None:
        self.lock = threading.Lock()

    def tier(self) -> TierStats:
        """As a cache tier's counters (tier "pack"), for the per-tier metrics."""
        with self.lock:
            return TierStats("pack", self.hits, self.misses, 0, 0, 0, 0)


class PackTier:
    """Serves one stream's cache misses from its packs (see the module docstring)."""

    def __init__(self, reader: PackReader, stats: PackStats, lookahead_steps: int, max_packs: int = 2) -> None:
        self.reader = reader
        self.stats = stats
        self.lookahead_steps = lookahead_steps
        self.max_packs = max(1, max_packs)
        self._loads: dict[int, Future[LoadedPack]] = {}
        self._io = ThreadPoolExecutor(max_workers=1, thread_name_prefix="pack-read")

    def prefetch(self, step: int) -> None:
        """Starts reading the packs of steps ``[step, step + lookahead]`` not yet read, holding
        at most ``max_packs`` (older packs are dropped: a stream moves forward only)."""
        first = self._pack_of(step)
        last = self._pack_of(step + self.lookahead_steps)
        for i in [i for i in self._loads if i < first]:
            self._loads.pop(i).cancel()
        for i in range(first, min(last, first + self.max_packs - 1) + 1):
            if i not in self._loads:
                self._loads[i] = self._io.submit(self._read, i)

    def place(self, step: int, ids: np.ndarray, into: RowsInto) -> np.ndarray:
        """Puts the rows of the ids of ``step`` its pack holds where ``into`` says (one copy
        each); returns the mask of those ids (none when the pack failed its checks, counted in
        ``fallbacks``)."""
        self.prefetch(step)
        try:
            found = self._loads[self._pack_of(step)].result().place(ids, into.out, into.positions)
        except PackCorrupt:
            found = np.zeros(len(ids), dtype=bool)
        n = int(found.sum())
        with self.stats.lock:
            self.stats.hits += n
            self.stats.misses += len(ids) - n
        return found

    def _pack_of(self, step: int) -> int:
        """The pack serving ``step``: its own, or (packs of another epoch, which may have fewer
        steps) the one at the same place in that epoch."""
        m = self.reader.manifest
        return m.pack_of(min(step, m.num_steps - 1))

    def _read(self, index: int) -> LoadedPack:
        t0 = time.perf_counter()
        before = self.reader.bytes_read
        try:
            return self.reader.read_pack(index)
        except (PackCorrupt, OSError) as exc:
            log.warning(
                "pack %s of %s is unusable, its steps read the graph-stores: %s", index, self.reader.pack_dir, exc
            )
            with self.stats.lock:
                self.stats.fallbacks += 1
            raise PackCorrupt(str(exc)) from exc
        finally:
            with self.stats.lock:
                self.stats.disk_bytes += self.reader.bytes_read - before
                self.stats.read_seconds += time.perf_counter() - t0

    def close(self) -> None:
        """Drops the packs held and stops reading."""
        for fut in self._loads.values():
            fut.cancel()
        self._loads.clear()
        self._io.shutdown(wait=False, cancel_futures=True)
        self.reader.close()


def open_pack_tier(
    root: Path,
    info: PartitionInfo,
    job: JobSpec,
    epoch: int,
    stats: PackStats,
    *,
    lookahead_steps: int,
    threads: int,
    direct: bool,
    reuse: bool = True,
) -> PackTier | None:
    """The pack tier of ``job``'s ``epoch`` when ``root`` has usable packs for it; else, with
    ``reuse``, the packs of the job's nearest packed epoch (counted in ``reused``: the rows are
    the same, so what they hold is served exactly, and the rest comes from the graph-stores; packs
    sized to a few per epoch hold most of the table, so most of a step's misses); else None, with
    a warning and a count either way (none written for the job: ``unpacked``; refused, e.g.
    another graph version: ``refused``), since a loader given packs that serves an epoch without
    them reads every miss from the graph-stores."""
    pack_dir = Path(root) / job_key(job, epoch)
    packed = epoch
    if not (pack_dir / MANIFEST).exists() and reuse:
        packed = _nearest_packed_epoch(Path(root), job, epoch)
        pack_dir = Path(root) / job_key(job, packed)
    if not (pack_dir / MANIFEST).exists():
        log.warning(
            "no packs for job=%s rank=%d epoch=%d under %s: this epoch reads every miss from the graph-stores "
            "(graphfeed pack ahead of it)",
            job.job_id,
            job.rank,
            epoch,
            root,
        )
        with stats.lock:
            stats.unpacked += 1
        return None
    try:
        reader = PackReader.open(pack_dir, GraphIdentity.of(info), job, packed, threads=threads, direct=direct)
    except FailedPrecondition as exc:
        log.warning("packs in %s refused for job=%s epoch=%d: %s", pack_dir, job.job_id, epoch, exc)
        with stats.lock:
            stats.refused += 1
        return None
    if packed != epoch:
        log.warning(
            "no packs for job=%s rank=%d epoch=%d: serving its misses from epoch %d's packs (rows they lack are read "
            "from the graph-stores; graphfeed pack ahead for every one)",
            job.job_id,
            job.rank,
            epoch,
            packed,
        )
        with stats.lock:
            stats.reused += 1
    return PackTier(reader, stats, lookahead_steps)


def _nearest_packed_epoch(root: Path, job: JobSpec, epoch: int) -> int:
    """The packed epoch of ``job`` under ``root`` closest before ``epoch`` (else the first after);
    ``epoch`` itself when there is none."""
    prefix = job_key(job, epoch).rpartition("-e")[0]
    packed = sorted(
        int(d.name.rpartition("-e")[2])
        for d in root.glob(f"{prefix}-e*")
        if d.name.rpartition("-e")[2].isdigit() and (d / MANIFEST).exists()
    )
    before = [e for e in packed if e < epoch]
    return before[-1] if before else (packed[0] if packed else epoch)
