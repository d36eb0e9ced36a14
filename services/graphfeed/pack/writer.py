"""Writing one epoch's packs (format: :mod:`graphfeed.loader.packs.format`).

:func:`pack_epoch` samples the epoch (:mod:`graphfeed.pack.offline`), picks the
memory-resident rows (the most reused over the epoch, or the highest in-degree ones, which is
what a ``static_degree`` cache of the same size holds), groups consecutive steps into packs
(as many as a blow-up target needs: :mod:`graphfeed.pack.sizing`),
and for each pack fetches the union of its steps' other rows from the graph-stores (one
fan-out) and writes it with large writes, while the next pack's rows are fetched. With
"degree" (known before sampling) the whole thing is one pipeline: steps are sampled ahead on
their threads while earlier packs are fetched and written; "reuse" samples the epoch first.
"""

from __future__ import annotations

import dataclasses
import logging
import os
import shutil
import time
import zlib
from collections.abc import Callable, Iterable, Iterator, Sequence
from concurrent.futures import Future, ThreadPoolExecutor
from dataclasses import dataclass
from pathlib import Path
from typing import Literal

import numpy as np

from graphfeed.common.errors import InvalidArgument, NotFound
from graphfeed.common.limits import FETCH_IDS_PER_CALL
from graphfeed.graph_store.fanout import fetch_rows
from graphfeed.graph_store.types import PartitionInfo, PartitionSet
from graphfeed.loader.cache.base import in_degrees, top_by_degree
from graphfeed.loader.job import JobSpec
from graphfeed.loader.packs.format import (
    MANIFEST,
    RESIDENT,
    GraphIdentity,
    PackedJob,
    PackFile,
    PackManifest,
    StepRange,
    align,
    job_key,
)
from graphfeed.pack.offline import plan_epoch, sample_steps
from graphfeed.pack.sizing import PackSizing, group_steps
from graphfeed.sampler.core import MultiHopSampler
from graphfeed.sampler.types import BlockSampler

log = logging.getLogger(__name__)

__all__ = ["PackOptions", "pack_epoch", "pack_tables"]


@dataclass(frozen=True)
class PackOptions:
    """How to pack.

    Attributes:
        max_blow_up: bytes of packs written per epoch / bytes of the feature table, at most:
            consecutive steps share a pack until its rows per step fall within the epoch's share
            of this (:mod:`graphfeed.pack.sizing`; exact unless a limit below closes a pack first).
        max_pack_bytes: a pack closes before its distinct rows pass this many bytes: bounds what
            a reader holds per pack (0: no limit; a step that alone passes it is a pack).
        steps_per_pack: most consecutive steps in one pack (0: no limit).
        resident: "reuse": leave out the rows most steps of the epoch read; "degree": the
            highest in-degree rows (exactly what a ``static_degree`` cache of
            ``resident_bytes`` holds).
        resident_bytes: bytes of rows left out of the packs (0: pack every row).
        sample_workers: threads sampling ahead.
        max_ids_per_request: ids per graph-store request.
    """

    max_blow_up: float = 3.0
    max_pack_bytes: int = 0
    steps_per_pack: int = 0
    resident: Literal["reuse", "degree"] = "reuse"
    resident_bytes: int = 0
    sample_workers: int = 2
    max_ids_per_request: int = FETCH_IDS_PER_CALL

    @property
    def sizing(self) -> PackSizing:
        """The limits packs are sized by."""
        return PackSizing(self.max_blow_up, self.max_pack_bytes, self.steps_per_pack)

    def check(self) -> None:
        """Raises InvalidArgument naming the first bad option."""
        self.sizing.check()
        if self.resident not in ("reuse", "degree"):
            raise InvalidArgument(f"resident must be 'reuse' or 'degree', got {self.resident!r}")
        if self.resident_bytes < 0 or self.sample_workers < 1 or self.max_ids_per_request < 1:
            raise InvalidArgument(
                "need resident_bytes >= 0, sample_workers >= 1 and max_ids_per_request >= 1, got "
                f"{self.resident_bytes}, {self.sample_workers} and {self.max_ids_per_request}"
            )


def pack_epoch(
    partitions: PartitionSet,
    job: JobSpec,
    epoch: int,
    root: Path,
    options: PackOptions | None = None,
    sampler: BlockSampler | None = None,
) -> PackManifest:
    """Samples ``epoch`` of ``job``'s rank and writes its packs to ``root/<job_key(job, epoch)>``
    (replacing an older copy only once the new one is complete).

    Returns:
        The manifest written; its ``stats`` hold the blow-up and the time of each phase.

    Raises:
        InvalidArgument: bad options or job. NotFound: unknown split or feature.
    """
    opts = options or PackOptions()
    opts.check()
    t0 = time.perf_counter()
    info = partitions.info
    if job.feature_name not in info.node_data:
        raise NotFound(f"node data {job.feature_name!r} does not exist; known: {sorted(info.node_data)}")
    spec = info.node_data[job.feature_name]
    row_bytes = np.dtype(spec.dtype).itemsize * int(np.prod(spec.row_shape, dtype=np.int64))
    table_rows = info.types.num_nodes(spec.ntype)
    planned = plan_epoch(partitions, job, epoch)
    plan = planned.plan
    times = {"sample_seconds": 0.0, "fetch_seconds": 0.0, "write_seconds": 0.0}
    fanouts = job.sampler_fanouts(info.types)
    sampler = sampler or MultiHopSampler(partitions)
    steps_ids = sample_steps(sampler, job, planned, opts.sample_workers, fanouts=fanouts)
    mine = _of_table(info, job.feature_name)
    sampled = _timed((mine(ids) for _, ids in steps_ids), times)
    if opts.resident == "reuse" and opts.resident_bytes >= row_bytes:
        epoch_steps = list(sampled)  # the whole epoch's reuse decides what is resident
        steps: Iterable[np.ndarray] = epoch_steps
        resident = _by_reuse(epoch_steps, info.num_nodes, opts.resident_bytes // row_bytes)
    else:  # known before sampling: packs are fetched and written while later steps are sampled
        steps, resident = sampled, _by_degree(partitions, opts, row_bytes, job.feature_name)
    final = Path(root) / job_key(job, epoch)
    tmp = final.with_name(f"{final.name}.tmp-{os.getpid()}")
    shutil.rmtree(tmp, ignore_errors=True)
    tmp.mkdir(parents=True)
    np.save(tmp / RESIDENT, resident)
    share = opts.sizing.step_share(table_rows, table_rows - len(resident), plan.num_steps)
    packs = _write_packs(partitions, job.feature_name, steps, resident, opts, (share, row_bytes), tmp, times)
    packed = sum(p.rows_bytes for p in packs)
    stats = {
        "packed_bytes": packed,
        "file_bytes": sum(p.file_bytes for p in packs),
        "table_bytes": table_rows * row_bytes,
        "blow_up": packed / max(1, table_rows * row_bytes),
        "max_blow_up": opts.max_blow_up,
        "largest_pack_bytes": max((p.rows_bytes for p in packs), default=0),
        "steps_per_pack": plan.num_steps / max(1, len(packs)),
        "resident_bytes": len(resident) * row_bytes,
        "needed_bytes": sum(s.num_packed for p in packs for s in p.steps) * row_bytes,
        **times,
        "total_seconds": time.perf_counter() - t0,
    }
    manifest = PackManifest(
        GraphIdentity.of(info),
        PackedJob.of(job),
        epoch,
        np.dtype(spec.dtype).str,
        tuple(spec.row_shape),
        plan.num_steps,
        len(resident),
        zlib.crc32(resident.tobytes()),
        tuple(packs),
        stats,
    )
    _write_atomic(tmp / MANIFEST, manifest.to_json().encode())
    _replace_dir(tmp, final)
    log.info(
        "packed job seed %d rank %d epoch %d: %d steps in %d packs, blow-up %.2fx, %.1f s",
        job.job_seed,
        job.rank,
        epoch,
        manifest.num_steps,
        len(packs),
        stats["blow_up"],
        stats["total_seconds"],
    )
    return manifest


def _timed(steps: Iterator[np.ndarray], times: dict[str, float]) -> Iterator[np.ndarray]:
    """``steps``, adding the time spent waiting for each to ``times["sample_seconds"]``."""
    while True:
        t = time.perf_counter()
        ids = next(steps, None)
        times["sample_seconds"] += time.perf_counter() - t
        if ids is None:
            return
        yield ids


def pack_tables(
    partitions: PartitionSet,
    job: JobSpec,
    epoch: int,
    root: Path,
    options: PackOptions | None = None,
    sampler: BlockSampler | None = None,
) -> list[PackManifest]:
    """:func:`pack_epoch` of every table of ``job.feature_name``: the one table of a one-type
    graph, or one per node type that has the feature (each under the key of ``job`` with that
    table's ``ntype/name`` as its feature name, where a loader streaming ``job`` looks; each
    table's packs hold its type's rows only). A typed graph samples the epoch once per table."""
    keys = partitions.info.tables(job.feature_name)
    if not keys:
        raise NotFound(f"node data {job.feature_name!r} does not exist; known: {sorted(partitions.info.node_data)}")
    return [
        pack_epoch(partitions, dataclasses.replace(job, feature_name=key), epoch, root, options, sampler)
        for key in keys
    ]


def _of_table(info: PartitionInfo, key: str) -> Callable[[np.ndarray], np.ndarray]:
    """The input nodes whose rows node-data ``key`` holds: all of them, or (``ntype/name`` of a
    typed graph) those of its node type."""
    if "/" not in key:
        return lambda ids: ids
    schema, t = info.types, info.types.ntype_id(info.node_data[key].ntype)
    return lambda ids: ids[schema.ntype_of(ids) == t]


def _by_degree(partitions: PartitionSet, opts: PackOptions, row_bytes: int, table: str) -> np.ndarray:
    """The highest in-degree gids (of ``table``'s type) that fit ``resident_bytes`` (int64,
    ascending): what a ``static_degree`` cache of that size holds. Empty unless ``resident`` is
    "degree"."""
    n = partitions.info.num_nodes
    cap = min(n, opts.resident_bytes // row_bytes)
    if opts.resident != "degree" or cap == 0:
        return np.empty(0, dtype=np.int64)
    degrees = in_degrees(partitions, n, opts.max_ids_per_request, table)
    return np.sort(top_by_degree(degrees, cap)).astype(np.int64)


def _by_reuse(steps: Sequence[np.ndarray], num_nodes: int, cap: int) -> np.ndarray:
    """The (at most ``cap``) gids read by the most steps, if by more than one (int64, ascending)."""
    reuse = np.bincount(np.concatenate(steps), minlength=num_nodes) if steps else np.zeros(num_nodes, np.int64)
    top = np.argsort(-reuse, kind="stable")[: min(cap, num_nodes)]
    return np.sort(top[reuse[top] > 1]).astype(np.int64)  # a row read once gains nothing from memory


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
    partitions: PartitionSet,
    name: str,
    steps: Iterable[np.ndarray],
    resident: np.ndarray,
    opts: PackOptions,
    sizes: tuple[float, int],
    out: Path,
    times: dict[str, float],
) -> list[PackFile]:
    """Fetches and writes every pack; writing pack i overlaps fetching pack i+1 (and sampling
    the steps after it, when those are still being sampled). ``sizes``: rows a pack may hold
    per step (:meth:`PackSizing.step_share`) and bytes per row."""
    share, row_bytes = sizes
    is_resident = np.zeros(partitions.info.num_nodes, dtype=bool)
    is_resident[resident] = True
    files: list[PackFile] = []
    with ThreadPoolExecutor(max_workers=1, thread_name_prefix="pack-write") as writer:
        pending: Future[PackFile] | None = None
        for i, (first, inputs, packed) in enumerate(group_steps(steps, is_resident, opts.sizing, share, row_bytes)):
            plan = _plan_pack(i, first, packed, inputs)
            t = time.perf_counter()
            rows = fetch_rows(partitions, name, plan.ids, opts.max_ids_per_request)[0]
            times["fetch_seconds"] += time.perf_counter() - t
            if pending is not None:
                files.append(pending.result())
            pending = writer.submit(_timed_write, plan, rows, row_bytes, out, times)
        if pending is not None:
            files.append(pending.result())
    return files


def _timed_write(plan: _Pack, rows: np.ndarray, row_bytes: int, out: Path, times: dict[str, float]) -> PackFile:
    t = time.perf_counter()
    try:
        return _write_pack(plan, rows, row_bytes, out)
    finally:
        times["write_seconds"] += time.perf_counter() - t


def _write_pack(plan: _Pack, rows: np.ndarray, row_bytes: int, out: Path) -> PackFile:
    """Writes one pack file (rows, padding, gids, padding) and describes it."""
    body = np.ascontiguousarray(rows).reshape(-1).view(np.uint8).data  # empty where all rows are resident
    ids = np.ascontiguousarray(plan.ids, dtype=np.int64)
    ids_offset = align(len(body))
    steps, start = [], 0
    for j, end in enumerate(plan.ends.tolist()):
        lo, hi = start * row_bytes, end * row_bytes
        steps.append(
            StepRange(plan.first_step + j, lo, hi - lo, zlib.crc32(body[lo:hi]), plan.num_input[j], plan.num_packed[j])
        )
        start = end
    file_bytes = align(ids_offset + ids.nbytes)
    pad_rows, pad_ids = bytes(ids_offset - len(body)), bytes(file_bytes - ids_offset - ids.nbytes)
    name = f"pack-{plan.index:05d}.bin"
    _write_atomic(out / name, body, pad_rows, ids.data.cast("B"), pad_ids)
    return PackFile(name, plan.first_step, len(ids), ids_offset, file_bytes, zlib.crc32(ids.tobytes()), tuple(steps))


def _write_atomic(path: Path, *parts: bytes | memoryview) -> None:
    """Writes ``parts`` to ``path`` through a temporary file, then renames it.

    Not fsynced: the kernel writes the pages back while training runs (an fsync per pack
    holds packing to the disk's write speed). After a crash a pack may hold stale bytes under a
    complete name; its checksums catch that and the loader reads the graph-stores instead.
    """
    tmp = path.with_name(path.name + ".tmp")
    fd = os.open(tmp, os.O_WRONLY | os.O_CREAT | os.O_TRUNC, 0o644)
    try:
        for part in parts:
            view = memoryview(part).cast("B")
            while len(view):
                view = view[os.write(fd, view) :]
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
