"""Snapshots of a compacted temporal graph on disk, so that the append log can be truncated.

A restart used to replay every batch ever appended. After a background compaction the store
persists the appended edges of the compacted base (:func:`persist`) into
``<append dir>/snapshots/snap-<seq>``. Only the appended edges: the ingest-time edges are in the
partition already (a graph of 100M ingest edges is not rewritten for each snapshot), and in
every compacted row they precede the appended ones, so :func:`load_newest` rebuilds the same
base as one block of them added to the ingest base and compacted (one O(E) merge at open,
instead of decoding and adding every logged batch). The steps:

1. the arrays (the rows with appended edges and their counts, then ``nbr``, ``ts``, ``eid``,
   ``feat`` of the appended edges in stored order, ``new_gids``, ``new_rows``) as zlib-compressed
   files (level 1; sorted columns delta-coded first) in a ``tmp-`` directory, each fsync'd, then
   ``manifest.json`` (seq, edge counts, rows, min/max t, the log's layout, and per array its
   dtype, shape and the blake2b digest of its file), fsync'd, then the directory itself;
2. the directory renamed to ``snap-<seq>`` (atomic) and the parent fsync'd: from now on a
   restart loads it;
3. the log's batches ``<= seq`` deleted (their ``id/`` acks stay, so a retry is still answered);
4. older snapshots and leftovers removed.

Only batches already fsync'd in the log are ever in a snapshot, so a crash between any two
steps loses nothing: before 2 the log still holds every batch; after 2 the batches the
snapshot covers are skipped at replay whether or not 3 ran. :func:`load_newest` ignores
``tmp-`` directories and any snapshot whose manifest or digests do not check out.
"""

from __future__ import annotations

import hashlib
import json
import logging
import os
import shutil
import zlib
from collections.abc import Callable
from dataclasses import replace
from pathlib import Path

import numpy as np

from graphfeed.graph_store.temporal import index as ti

log = logging.getLogger(__name__)

_ARRAYS = ("row_ids", "row_counts", "nbr", "ts", "eid", "feat", "new_gids", "new_rows")
_DELTA = ("row_ids", "ts", "eid", "new_gids")  # ascending, or nearly: their differences compress well
_APPENDED = 1 << 62  # the eid bit of an appended edge
_PREFIX, _TMP = "snap-", "tmp-"

# Crash tests set this to kill the process after a named step ("files", "manifest", "renamed",
# "truncated", "cleaned"); None in production.
step_hook: Callable[[str], None] | None = None


def _step(name: str) -> None:
    if step_hook is not None:
        step_hook(name)


def _fsync_dir(path: Path) -> None:
    fd = os.open(path, os.O_RDONLY)
    try:
        os.fsync(fd)
    finally:
        os.close(fd)


def _digest(data: bytes) -> str:
    return hashlib.blake2b(data, digest_size=16).hexdigest()


def _write_durably(path: Path, data: bytes) -> None:
    """Writes ``data`` and fsyncs the file."""
    with open(path, "wb") as f:
        f.write(data)
        f.flush()
        os.fsync(f.fileno())


def _encode(name: str, arr: np.ndarray) -> tuple[bytes, dict]:
    """An array's file content (zlib, level 1: fast) and its manifest entry."""
    a = np.ascontiguousarray(arr)
    raw = (
        np.diff(a, prepend=a.dtype.type(0)) if name in _DELTA and len(a) else a
    )  # int64 wraps: cumsum undoes it exactly
    data = zlib.compress(np.ascontiguousarray(raw).tobytes(), 1)
    return data, {"dtype": a.dtype.str, "shape": list(a.shape), "digest": _digest(data)}


def load_arrays(path: Path, manifest: dict) -> dict[str, np.ndarray]:
    """The arrays of the snapshot at ``path``, checked against ``manifest`` (ValueError when torn)."""
    out = {}
    for name in _ARRAYS:
        entry, data = manifest["arrays"][name], (path / f"{name}.z").read_bytes()
        if _digest(data) != entry["digest"]:
            raise ValueError(f"{name}.z does not match its digest")
        arr = np.frombuffer(zlib.decompress(data), dtype=np.dtype(entry["dtype"])).reshape(entry["shape"])
        out[name] = np.cumsum(arr, dtype=arr.dtype) if name in _DELTA else arr
    return out


def persist(directory: Path, snap: ti.Snapshot, layout: dict[str, int], drop_log: Callable[[int], None]) -> Path:
    """Writes the appended edges of compacted ``snap`` (no blocks) durably, then calls ``drop_log(snap.seq)``.

    Every batch of ``snap`` must already be durable in the log (see the module). Returns the
    snapshot's directory. O(appended edges) written, O(all edges) scanned.
    """
    if snap.n_blocks or snap.n_arena_edges:
        raise ValueError("only a compacted snapshot (no blocks) can be persisted")
    directory.mkdir(parents=True, exist_ok=True)
    final = directory / f"{_PREFIX}{snap.seq:016d}"
    tmp = directory / f"{_TMP}{snap.seq:016d}"
    shutil.rmtree(tmp, ignore_errors=True)
    tmp.mkdir()
    b = snap.base
    pos = np.flatnonzero(np.asarray(b.eid) & _APPENDED)
    row_ids, row_counts = np.unique(
        np.searchsorted(b.indptr, pos, side="right") - 1, return_counts=True
    )  # pos ascending: rows too
    arrays = dict(
        row_ids=row_ids,
        row_counts=row_counts,
        nbr=b.nbr[pos],
        ts=b.ts[pos],
        eid=b.eid[pos],
        feat=b.feat[pos],
        new_gids=snap.new_gids,
        new_rows=snap.new_rows,
    )
    entries = {}
    for name in _ARRAYS:  # zlib releases the GIL: appends and samples go on meanwhile
        data, entries[name] = _encode(name, arrays[name])
        _write_durably(tmp / f"{name}.z", data)
    _step("files")
    manifest = {
        "seq": snap.seq,
        "num_appended": snap.num_appended,
        "ingest_edges": len(b.ts) - len(pos),
        "num_rows": snap.num_rows,
        "min_t": snap.min_t,
        "max_t": snap.max_t,
        "layout": layout,
        "arrays": entries,
    }
    _write_durably(tmp / "manifest.json", json.dumps(manifest, sort_keys=True).encode())
    _fsync_dir(tmp)
    _step("manifest")
    shutil.rmtree(final, ignore_errors=True)  # only after a crash between this rename and the cleanup below
    os.rename(tmp, final)
    _fsync_dir(directory)
    _step("renamed")
    drop_log(snap.seq)
    _step("truncated")
    remove_others(directory, keep=final)
    _step("cleaned")
    return final


def remove_others(directory: Path, keep: Path | None) -> None:
    """Deletes every snapshot and leftover under ``directory`` but ``keep``."""
    if not directory.is_dir():
        return
    for path in directory.iterdir():
        if path != keep and path.name.startswith((_PREFIX, _TMP)):
            shutil.rmtree(path, ignore_errors=True)


def load_newest(directory: Path, layout: dict[str, int], ingest: ti.Snapshot) -> tuple[ti.Snapshot, Path] | None:
    """The newest valid snapshot under ``directory`` on top of ``ingest`` (the partition's base, no appends).

    Returns the compacted snapshot and its directory, or None when there is none. One whose
    manifest or digests do not check out, or written for another ``layout`` or ingest graph, is
    skipped with a warning (an older one is tried).
    """
    if not directory.is_dir():
        return None
    for path in sorted((p for p in directory.iterdir() if p.name.startswith(_PREFIX)), reverse=True):
        try:
            manifest = json.loads((path / "manifest.json").read_text())
            if manifest["layout"] != layout or manifest["ingest_edges"] != len(ingest.base.ts):
                raise ValueError(f"written for {manifest['layout']} with {manifest['ingest_edges']} ingest edges")
            arr = load_arrays(path, manifest)
        except (OSError, ValueError, KeyError, TypeError, zlib.error) as exc:
            log.warning("temporal snapshot %s is unusable (%s); trying an older one", path, exc)
            continue
        return _restore(ingest, manifest, arr), path
    return None


def _restore(ingest: ti.Snapshot, manifest: dict, arr: dict[str, np.ndarray]) -> ti.Snapshot:
    """The ingest base plus the persisted appended edges as one block, compacted."""
    rows = np.repeat(arr["row_ids"], arr["row_counts"])
    n, m = len(rows), len(arr["row_ids"])
    arena = ti.add_block(ingest, rows, arr["nbr"], arr["ts"], arr["eid"], arr["feat"]) if n else ingest.arena
    snap = replace(
        ingest,
        arena=arena,
        n_entries=m,
        n_blocks=1 if n else 0,
        n_arena_edges=n,
        num_rows=manifest["num_rows"],
        new_gids=arr["new_gids"],
        new_rows=arr["new_rows"],
        seq=manifest["seq"],
        num_appended=manifest["num_appended"],
        min_t=manifest["min_t"],
        max_t=manifest["max_t"],
    )
    return ti.compact(snap) if n else snap
