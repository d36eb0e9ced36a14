"""Snapshots of a compacted temporal graph on disk, so that the append log can be truncated.

A restart used to replay every batch ever appended. After a background compaction the store
persists the appended edges of the compacted base (:func:`persist`) into
``<append dir>/snapshots/snap-<seq>``. Only the appended edges: the ingest-time edges are in the
partition already (a graph of 100M ingest edges is not rewritten for each snapshot), and in
every compacted row they precede the appended ones, so :func:`load_newest` rebuilds the same
base as one block of them added to the ingest base and compacted (one O(E) merge at open,
instead of decoding and adding every logged batch). The steps:

1. the arrays (``rows``, ``nbr``, ``ts``, ``eid``, ``feat`` of the appended edges in stored
   order, ``new_gids``, ``new_rows``) as ``.npy`` files in a ``tmp-`` directory, each fsync'd,
   then ``manifest.json`` (seq, edge counts, rows, min/max t, the log's layout and a blake2b
   digest per file), fsync'd, then the directory itself;
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
from collections.abc import Callable
from dataclasses import replace
from pathlib import Path

import numpy as np

from graphfeed.graph_store import temporal_index as ti

log = logging.getLogger(__name__)

_ARRAYS = ("rows", "nbr", "ts", "eid", "feat", "new_gids", "new_rows")
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


def _digest(path: Path) -> str:
    with open(path, "rb") as f:
        return hashlib.file_digest(f, lambda: hashlib.blake2b(digest_size=16)).hexdigest()


def _write_durably(path: Path, data: bytes | np.ndarray) -> None:
    """Writes ``data`` (raw bytes, or an array as ``.npy``) and fsyncs the file."""
    with open(path, "wb") as f:
        if isinstance(data, np.ndarray):
            np.save(f, np.ascontiguousarray(data), allow_pickle=False)
        else:
            f.write(data)
        f.flush()
        os.fsync(f.fileno())


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
    rows = np.searchsorted(b.indptr, pos, side="right") - 1
    arrays = dict(rows=rows, nbr=b.nbr[pos], ts=b.ts[pos], eid=b.eid[pos], feat=b.feat[pos], new_gids=snap.new_gids, new_rows=snap.new_rows)
    for name, arr in arrays.items():
        _write_durably(tmp / f"{name}.npy", arr)
    _step("files")
    manifest = {"seq": snap.seq, "num_appended": snap.num_appended, "ingest_edges": len(b.ts) - len(pos), "num_rows": snap.num_rows,
                "min_t": snap.min_t, "max_t": snap.max_t, "layout": layout,
                "files": {n: _digest(tmp / f"{n}.npy") for n in _ARRAYS}}  # fmt: skip
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
            for name in _ARRAYS:
                if _digest(path / f"{name}.npy") != manifest["files"][name]:
                    raise ValueError(f"{name}.npy does not match its digest")
            arr = {name: np.load(path / f"{name}.npy", allow_pickle=False) for name in _ARRAYS}
        except (OSError, ValueError, KeyError, TypeError) as exc:
            log.warning("temporal snapshot %s is unusable (%s); trying an older one", path, exc)
            continue
        return _restore(ingest, manifest, arr), path
    return None


def _restore(ingest: ti.Snapshot, manifest: dict, arr: dict[str, np.ndarray]) -> ti.Snapshot:
    """The ingest base plus the persisted appended edges as one block, compacted."""
    rows, n = arr["rows"], len(arr["rows"])
    m = int(np.count_nonzero(rows[1:] != rows[:-1])) + 1 if n else 0
    arena = ti.add_block(ingest, rows, arr["nbr"], arr["ts"], arr["eid"], arr["feat"]) if n else ingest.arena
    snap = replace(
        ingest, arena=arena, n_entries=m, n_blocks=1 if n else 0, n_arena_edges=n, num_rows=manifest["num_rows"],
        new_gids=arr["new_gids"], new_rows=arr["new_rows"], seq=manifest["seq"], num_appended=manifest["num_appended"],
        min_t=manifest["min_t"], max_t=manifest["max_t"],
    )  # fmt: skip
    return ti.compact(snap) if n else snap
