"""An embedding table's durable images: rows and optimizer state at one applied step.

An image is a directory (``rows.npy``, one ``.npy`` per optimizer state array, ``meta.json``:
the step it holds and the steps applied up to it) written whole, fsync'd, and only then made
current: the table's own image by replacing the ``CURRENT`` file that names it, a snapshot by
renaming its finished directory into ``snapshots/``. A crash leaves the old image or the new
one, never a mix; files are never changed in place, so a snapshot taken right after a flush
shares the current image's files (hard links) instead of writing the table twice.
"""

from __future__ import annotations

import json
import os
import shutil
from dataclasses import dataclass
from pathlib import Path

import numpy as np

from graphfeed.graph_store.embeddings.types import StepKey

CURRENT = "CURRENT"
SNAPSHOTS = "snapshots"


@dataclass
class Image:
    """Rows, optimizer state and history of a table at step ``applied``.

    ``done`` maps every applied step to the digests of its pushes, by rank (how a replayed
    push is recognized); ``count`` is the number of applied steps.
    """

    rows: np.ndarray
    state: dict[str, np.ndarray]
    applied: StepKey
    count: int
    done: dict[StepKey, tuple[str, ...]]


def _fsync(path: Path) -> None:
    fd = os.open(path, os.O_RDONLY)
    try:
        os.fsync(fd)
    finally:
        os.close(fd)


def write_image(directory: Path, image: Image) -> None:
    """Writes ``image`` into the new directory ``directory`` (its files and itself fsync'd)."""
    tmp = directory.with_name(directory.name + ".tmp")
    shutil.rmtree(tmp, ignore_errors=True)
    tmp.mkdir(parents=True)
    arrays = {"rows": image.rows, **{f"state_{k}": v for k, v in image.state.items()}}
    for name, arr in arrays.items():
        with open(tmp / f"{name}.npy", "wb") as f:
            np.save(f, arr)
            f.flush()
            os.fsync(f.fileno())
    meta = {
        "applied": [image.applied.epoch, image.applied.step],
        "count": image.count,
        "done": [[k.epoch, k.step, list(d)] for k, d in sorted(image.done.items())],
        "state": sorted(image.state),
    }
    with open(tmp / "meta.json", "w") as f:
        json.dump(meta, f)
        f.flush()
        os.fsync(f.fileno())
    _fsync(tmp)
    shutil.rmtree(directory, ignore_errors=True)
    os.replace(tmp, directory)
    _fsync(directory.parent)


def read_image(directory: Path) -> Image:
    """The image in ``directory`` (its arrays loaded into memory, writable)."""
    meta = json.loads((directory / "meta.json").read_text())
    state = {k: np.load(directory / f"state_{k}.npy") for k in meta["state"]}
    return Image(
        rows=np.load(directory / "rows.npy"),
        state=state,
        applied=StepKey(*meta["applied"]),
        count=int(meta["count"]),
        done={StepKey(e, s): tuple(d) for e, s, d in meta["done"]},
    )


def save_current(table_dir: Path, image: Image, generation: int) -> None:
    """Makes ``image`` the table's current image (generation ``generation``); drops older ones."""
    name = f"image-{generation:08d}"
    write_image(table_dir / name, image)
    tmp = table_dir / (CURRENT + ".tmp")
    tmp.write_text(name)
    with open(tmp) as f:
        os.fsync(f.fileno())
    os.replace(tmp, table_dir / CURRENT)
    _fsync(table_dir)
    for old in table_dir.glob("image-*"):
        if old.name != name:
            shutil.rmtree(old, ignore_errors=True)


def current_dir(table_dir: Path) -> Path:
    """The directory of the table's current image."""
    return table_dir / (table_dir / CURRENT).read_text().strip()


def link_image(src: Path, dst: Path) -> None:
    """Makes ``dst`` (a new directory) an image with the files of image ``src``: hard links, as
    images are never changed in place (deleting one leaves the other whole); a copy where the
    file system has no hard links."""
    tmp = dst.with_name(dst.name + ".tmp")
    shutil.rmtree(tmp, ignore_errors=True)
    tmp.mkdir(parents=True)
    for f in sorted(src.iterdir()):
        try:
            os.link(f, tmp / f.name)
        except OSError:
            shutil.copy2(f, tmp / f.name)
            _fsync(tmp / f.name)
    _fsync(tmp)
    os.replace(tmp, dst)
    _fsync(dst.parent)


def load_current(table_dir: Path) -> tuple[Image, int] | None:
    """The table's current image and its generation, or None when it has none yet."""
    pointer = table_dir / CURRENT
    if not pointer.exists():
        return None
    name = pointer.read_text().strip()
    return read_image(table_dir / name), int(name.rpartition("-")[2])


def snapshot_dir(table_dir: Path, key: StepKey) -> Path:
    """Where the snapshot of step ``key`` lives."""
    return table_dir / SNAPSHOTS / f"{key.epoch:012d}-{key.step:012d}"


def snapshot_keys(table_dir: Path) -> list[StepKey]:
    """The steps of the table's finished snapshots, ascending."""
    keys = []
    for d in (table_dir / SNAPSHOTS).glob("*-*"):
        if d.name.endswith(".tmp"):
            continue
        e, _, s = d.name.partition("-")
        keys.append(StepKey(int(e), int(s)))
    return sorted(keys)
