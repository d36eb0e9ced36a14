"""Where ``graphfeed ingest`` writes: a staging directory beside ``--out``, swapped in at the end.

An ingest writes into ``.NAME.ingest-<pid>-<hex>`` in the parent of ``--out``: the same
filesystem, so the final renames are atomic and a large graph is not written twice. ``--out``
is replaced only after everything was written, so a bad input, an error or Ctrl-C leaves an
earlier ingest there exactly as it was, and no staging directory behind.
"""

from __future__ import annotations

import os
import secrets
import shutil
import stat
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path

from graphfeed.common.errors import InvalidArgument
from graphfeed.common.partition import MANIFEST

ORIG_IDS = "orig_ids.npy"
"""Graph root file: gid -> input id (or, for node names, position in :data:`NODE_NAMES`)."""
NODE_NAMES = "node_names.npy"
"""Graph root file of an input with node names (CSV names, typed layouts)."""
INGEST_FILES = (MANIFEST, ORIG_IDS, NODE_NAMES)
"""Every file of the graph root an ingest may write, beside its ``part-NNNNN/`` directories: all
of them belong to one ingest, so ``--force`` replaces each one (an old ``node_names.npy`` kept
beside new ``orig_ids.npy`` would name every node wrongly)."""


def is_ingest_output(child: Path) -> bool:
    """Whether ``child`` of a graph root is something an ingest writes (and ``--force`` replaces)."""
    return (child.is_dir() and child.name.startswith("part-")) or child.name in INGEST_FILES


def check_out(out: Path, force: bool) -> None:
    """Refuses an ``out`` that cannot take an ingest, before any input is read.

    Raises:
        InvalidArgument: ``out`` is not a directory, is a mount point (it cannot be renamed
            away), or is a non-empty directory and ``force`` is not set.
    """
    if out.exists() and not out.is_dir():
        raise InvalidArgument(f"--out {out} exists and is not a directory")
    if not out.exists() or not any(out.iterdir()):
        return
    if not force:
        raise InvalidArgument(f"--out {out} is not empty; pass --force to replace an earlier ingest there")
    if os.path.ismount(out):
        raise InvalidArgument(
            f"--out {out} is a mount point, which --force cannot replace; ingest into a directory inside it"
        )


@contextmanager
def staged_out(out: Path, force: bool) -> Iterator[Path]:
    """Yields an empty staging directory to write the ingest into; moves it to ``out`` on success.

    ``out`` is checked first (:func:`check_out`). When the block raises (KeyboardInterrupt
    included) the staging directory is removed and ``out`` is left untouched. With ``force``
    the earlier ingest in ``out`` is replaced; other files there are kept.

    Args:
        out: the ``--out`` directory; a symlink is followed, missing parents are created.
        force: replace an earlier ingest in a non-empty ``out``.
    """
    check_out(out, force)
    target = out.resolve()  # a symlinked --out: swap the directory it points to, keep the link
    target.parent.mkdir(parents=True, exist_ok=True)
    stage = _sibling(target, "ingest")
    stage.mkdir()
    try:
        if target.is_dir():  # keep the permissions a user gave the directory graph-stores read
            os.chmod(stage, stat.S_IMODE(target.stat().st_mode))
        yield stage
        _swap_in(stage, target, out, force)
    except BaseException:
        shutil.rmtree(stage, ignore_errors=True)
        raise


def _sibling(target: Path, what: str) -> Path:
    """A fresh hidden name beside ``target`` that says what it is and who made it."""
    return target.with_name(f".{target.name}.{what}-{os.getpid()}-{secrets.token_hex(4)}")


def _swap_in(stage: Path, target: Path, out: Path, force: bool) -> None:
    """Renames ``stage`` to ``target``; an earlier ingest there is moved aside first, then removed."""
    if not target.exists() or not any(target.iterdir()):
        stage.replace(target)  # an empty directory is replaced by the rename itself
        return
    check_out(out, force)  # something was written to --out while we ingested
    aside = _sibling(target, "old")
    target.rename(aside)
    try:
        stage.rename(target)
    except BaseException:
        aside.rename(target)
        raise
    for child in aside.iterdir():
        if not is_ingest_output(child):
            child.rename(target / child.name)  # --force replaces an ingest, not a user's other files
    shutil.rmtree(aside)
