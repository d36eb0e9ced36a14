"""Writing one epoch's packs (format: :mod:`graphfeed.loader.pack_format`).

:func:`pack_epoch` samples the epoch (:mod:`graphfeed.pack.offline`), picks the
memory-resident rows (the most reused over the epoch, or the highest in-degree ones, which is
what a ``static_degree`` cache of the same size holds), groups consecutive steps into packs,
and for each pack fetches the union of its steps' other rows from the graph-stores (one
fan-out) and writes it with large writes, while the next pack's rows are fetched.
"""

from __future__ import annotations

import logging
import os
import shutil
import time
import zlib
from concurrent.futures import Future, ThreadPoolExecutor
from dataclasses import dataclass
from pathlib import Path
from typing import Literal

import numpy as np

from graphfeed.common.errors import InvalidArgument
from graphfeed.graph_store.types import PartitionSet
from graphfeed.loader.cache import in_degrees, top_by_degree
from graphfeed.loader.fetch import DEFAULT_MAX_IDS_PER_REQUEST, fetch_rows
from graphfeed.loader.job import JobSpec
from graphfeed.loader.pack_format import MANIFEST, RESIDENT, GraphIdentity, PackedJob, PackFile, PackManifest, StepRange, align, job_key
from graphfeed.pack.offline import SampledEpoch, sample_epoch
from graphfeed.sampler.core import MultiHopSampler
from graphfeed.sampler.types import BlockSampler

log = logging.getLogger(__name__)

__all__ = ["PackOptions", "pack_epoch"]


@dataclass(frozen=True)
class PackOptions:
    """How to pack.

    Attributes:
        steps_per_pack: most consecutive steps in one pack (>= 1).
        max_pack_bytes: a pack closes before its steps' rows (counted with repeats) pass this;
            bounds what a reader holds in memory per pack.
        resident: "reuse": leave out the rows most steps of the epoch read; "degree": the
            highest in-degree rows (exactly what a ``static_degree`` cache of
            ``resident_bytes`` holds).
        resident_bytes: bytes of rows left out of the packs (0: pack every row).
        sample_workers: threads sampling ahead.
        max_ids_per_request: ids per graph-store request.
    """

    steps_per_pack: int = 16
    max_pack_bytes: int = 64 << 20
    resident: Literal["reuse", "degree"] = "reuse"
    resident_bytes: int = 0
    sample_workers: int = 2
    max_ids_per_request: int = DEFAULT_MAX_IDS_PER_REQUEST


def pack_epoch(
    partitions: PartitionSet, job: JobSpec, epoch: int, root: Path, options: PackOptions | None = None,
    sampler: BlockSampler | None = None,
) -> PackManifest:  # fmt: skip
    """Samples ``epoch`` of ``job``'s rank and writes its packs to ``root/<job_key(job, epoch)>``
    (replacing an older copy only once the new one is complete).

    Returns:
        The manifest written; its ``stats`` hold the blow-up and the time of each phase.

    Raises:
        InvalidArgument: bad options or job. NotFound: unknown split or feature.
    """
    opts = options or PackOptions()
    if opts.steps_per_pack < 1 or opts.max_pack_bytes < 1 or opts.resident not in ("reuse", "degree"):
        raise InvalidArgument(f"bad pack options {opts}")
    t0 = time.perf_counter()
    sampled = sample_epoch(partitions, sampler or MultiHopSampler(partitions), job, epoch, opts.sample_workers)
    info = partitions.info
    spec = info.node_data[job.feature_name]
    row_bytes = np.dtype(spec.dtype).itemsize * int(np.prod(spec.row_shape, dtype=np.int64))
    resident = _resident(partitions, sampled, opts, row_bytes)
    final = Path(root) / job_key(job, epoch)
    tmp = final.with_name(f"{final.name}.tmp-{os.getpid()}")
    shutil.rmtree(tmp, ignore_errors=True)
    tmp.mkdir(parents=True)
    np.save(tmp / RESIDENT, resident)
    packs, times = _write_packs(partitions, job.feature_name, sampled, resident, opts, row_bytes, tmp)
    packed = sum(p.rows_bytes for p in packs)
    stats = {
        "packed_bytes": packed, "file_bytes": sum(p.file_bytes for p in packs), "table_bytes": info.num_nodes * row_bytes,
        "blow_up": packed / max(1, info.num_nodes * row_bytes), "resident_bytes": len(resident) * row_bytes,
        "needed_bytes": sum(s.num_packed for p in packs for s in p.steps) * row_bytes,
        "sample_seconds": sampled.sample_seconds, **times, "total_seconds": time.perf_counter() - t0,
    }  # fmt: skip
    manifest = PackManifest(
        GraphIdentity.of(info), PackedJob.of(job), epoch, np.dtype(spec.dtype).str, tuple(spec.row_shape),
        sampled.plan.num_steps, len(resident), zlib.crc32(resident.tobytes()), tuple(packs), stats,
    )  # fmt: skip
    _write_atomic(tmp / MANIFEST, manifest.to_json().encode())
    _replace_dir(tmp, final)
    log.info("packed job seed %d rank %d epoch %d: %d steps in %d packs, blow-up %.2fx, %.1f s",
             job.job_seed, job.rank, epoch, manifest.num_steps, len(packs), stats["blow_up"], stats["total_seconds"])  # fmt: skip
    return manifest


def _resident(partitions: PartitionSet, sampled: SampledEpoch, opts: PackOptions, row_bytes: int) -> np.ndarray:
    """The gids kept out of the packs (int64, ascending)."""
    n = partitions.info.num_nodes
    cap = min(n, opts.resident_bytes // row_bytes)
    if cap == 0:
        return np.empty(0, dtype=np.int64)
    if opts.resident == "degree":
        return np.sort(top_by_degree(in_degrees(partitions, n, opts.max_ids_per_request), cap)).astype(np.int64)
    reuse = np.bincount(np.concatenate(sampled.input_nodes), minlength=n) if sampled.input_nodes else np.zeros(n, np.int64)
    top = np.argsort(-reuse, kind="stable")[:cap]
    return np.sort(top[reuse[top] > 1]).astype(np.int64)  # a row read once gains nothing from memory


def _groups(lengths: list[int], opts: PackOptions, row_bytes: int) -> list[tuple[int, int]]:
    """Consecutive step ranges ``[first, end)``: at most ``steps_per_pack`` steps and (but for
    a lone step) ``max_pack_bytes`` of rows counted with repeats."""
    groups, first, rows = [], 0, 0
    for step, n in enumerate(lengths):
        if step > first and (step - first >= opts.steps_per_pack or (rows + n) * row_bytes > opts.max_pack_bytes):
            groups.append((first, step))
            first, rows = step, 0
        rows += n
    if lengths:
        groups.append((first, len(lengths)))
    return groups


@dataclass(frozen=True)
class _Pack:
    """One pack's plan: its rows' gids in pack order and where each step's new rows end."""

    index: int
    first_step: int
    ids: np.ndarray
    ends: np.ndarray  # ids[ends[j-1]:ends[j]] are the rows step first_step + j reads first
    num_input: list[int]
    num_packed: list[int]


def _plan_pack(index: int, first: int, steps: list[np.ndarray], inputs: list[np.ndarray]) -> _Pack:
    """The union of ``steps`` (each the non-resident input nodes of one step), by first appearance."""
    cat = np.concatenate(steps) if steps else np.empty(0, dtype=np.int64)
    uniq, first_at = np.unique(cat, return_index=True)
    order = np.argsort(first_at, kind="stable")
    step_ends = np.cumsum([len(s) for s in steps])
    ends = np.searchsorted(first_at[order], step_ends, side="left")
    return _Pack(index, first, uniq[order], ends, [len(x) for x in inputs], [len(s) for s in steps])


def _write_packs(
    partitions: PartitionSet, name: str, sampled: SampledEpoch, resident: np.ndarray, opts: PackOptions, row_bytes: int, out: Path
) -> tuple[list[PackFile], dict[str, float]]:
    """Fetches and writes every pack; fetching pack i+1 overlaps writing pack i."""
    is_resident = np.zeros(partitions.info.num_nodes, dtype=bool)
    is_resident[resident] = True
    packed_steps = [ids[~is_resident[ids]] for ids in sampled.input_nodes]
    groups = _groups([len(s) for s in packed_steps], opts, row_bytes)
    times = {"fetch_seconds": 0.0, "write_seconds": 0.0}
    files: list[PackFile] = []
    with ThreadPoolExecutor(max_workers=1, thread_name_prefix="pack-write") as writer:
        pending: Future[PackFile] | None = None
        for i, (a, b) in enumerate(groups):
            plan = _plan_pack(i, a, packed_steps[a:b], sampled.input_nodes[a:b])
            t = time.perf_counter()
            rows = fetch_rows(partitions, name, plan.ids, opts.max_ids_per_request)[0]
            times["fetch_seconds"] += time.perf_counter() - t
            if pending is not None:
                files.append(pending.result())
            pending = writer.submit(_timed_write, plan, rows, row_bytes, out, times)
        if pending is not None:
            files.append(pending.result())
    return files, times


def _timed_write(plan: _Pack, rows: np.ndarray, row_bytes: int, out: Path, times: dict[str, float]) -> PackFile:
    t = time.perf_counter()
    try:
        return _write_pack(plan, rows, row_bytes, out)
    finally:
        times["write_seconds"] += time.perf_counter() - t


def _write_pack(plan: _Pack, rows: np.ndarray, row_bytes: int, out: Path) -> PackFile:
    """Writes one pack file (rows, padding, gids, padding) and describes it."""
    body = np.ascontiguousarray(rows).data.cast("B")
    ids = np.ascontiguousarray(plan.ids, dtype=np.int64)
    ids_offset = align(len(body))
    steps, start = [], 0
    for j, end in enumerate(plan.ends.tolist()):
        lo, hi = start * row_bytes, end * row_bytes
        steps.append(StepRange(plan.first_step + j, lo, hi - lo, zlib.crc32(body[lo:hi]), plan.num_input[j], plan.num_packed[j]))
        start = end
    file_bytes = align(ids_offset + ids.nbytes)
    pad_rows, pad_ids = bytes(ids_offset - len(body)), bytes(file_bytes - ids_offset - ids.nbytes)
    name = f"pack-{plan.index:05d}.bin"
    _write_atomic(out / name, body, pad_rows, ids.data.cast("B"), pad_ids)
    return PackFile(name, plan.first_step, len(ids), ids_offset, file_bytes, zlib.crc32(ids.tobytes()), tuple(steps))


def _write_atomic(path: Path, *parts: bytes | memoryview) -> None:
    """Writes ``parts`` to ``path`` through a temporary file, synced, then renamed."""
    tmp = path.with_name(path.name + ".tmp")
    fd = os.open(tmp, os.O_WRONLY | os.O_CREAT | os.O_TRUNC, 0o644)
    try:
        for part in parts:
            view = memoryview(part).cast("B")
            while len(view):
                view = view[os.write(fd, view) :]
        os.fsync(fd)
    finally:
        os.close(fd)
    os.replace(tmp, path)


def _replace_dir(tmp: Path, final: Path) -> None:
    """Puts the finished ``tmp`` directory at ``final``, removing an older copy after."""
    old = final.with_name(f"{final.name}.old-{os.getpid()}")
    if final.exists():
        final.rename(old)
    tmp.rename(final)
    shutil.rmtree(old, ignore_errors=True)
