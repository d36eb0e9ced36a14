"""Owner locks: every writing process ``flock``s a file in the directory, and the files of an
owner whose lock is free (its process is gone, however it ended) are swept."""

from __future__ import annotations

import atexit
import contextlib
import fcntl
import itertools
import logging
import os
import secrets
import threading
from pathlib import Path

from graphfeed.common.errors import FailedPrecondition
from graphfeed.common.shm.files import OWNER_PREFIX, OWNER_RE, PROBE_PREFIX, SEGMENT_PREFIX, try_unlink

log = logging.getLogger(__package__)

_counter = itertools.count()
_owners: dict[Path, tuple[int, str, int]] = {}  # directory -> (pid, token, locked fd)
_owners_lock = threading.Lock()


def owner_token(directory: Path) -> str:
    """This process's owner token in ``directory`` (part of every segment name it writes there).

    The first call per process and directory creates the owner lock (under a temporary name,
    locked, then renamed into place, so no sweeper sees it unlocked) and sweeps the segment
    files of dead owners: those whose lock file can be locked.

    Raises:
        FailedPrecondition: the directory is not writable.
    """
    key = Path(directory)
    with _owners_lock:
        held = _owners.get(key)
        if held is not None and held[0] == os.getpid():
            return held[1]
        token = f"{os.getpid()}o{secrets.token_hex(4)}"
        tmp = key / f".{OWNER_PREFIX}{token}.tmp"
        try:
            fd = os.open(tmp, os.O_CREAT | os.O_EXCL | os.O_RDWR, 0o600)
            fcntl.flock(fd, fcntl.LOCK_EX)
            os.rename(tmp, key / f"{OWNER_PREFIX}{token}")
        except OSError as e:
            raise FailedPrecondition(f"cannot create the owner lock in {key}: {e.strerror}") from None
        if not _owners:
            atexit.register(_release_owners)
        _owners[key] = (os.getpid(), token, fd)
    swept = sweep_dead_owners(key)
    if swept:
        log.info("removed %d files of dead writers from %s", swept, key)
    return token


def _release_owners() -> None:
    """At a graceful exit: this process's owner locks go (its segments are gone by then)."""
    with _owners_lock:
        mine = [(d, token, fd) for d, (pid, token, fd) in _owners.items() if pid == os.getpid()]
        _owners.clear()
    for directory, token, fd in mine:
        try_unlink(directory / f"{OWNER_PREFIX}{token}")
        with contextlib.suppress(OSError):
            os.close(fd)


def sweep_dead_owners(directory: Path) -> int:
    """Removes the segment and probe files (and owner locks) of every owner in ``directory`` whose lock is
    free: its process is gone. Returns the files removed. Readers still mapping such a file keep
    their mapping (an unlink never invalidates one)."""
    directory = Path(directory)
    removed = 0
    try:
        names = os.listdir(directory)
    except OSError:
        return 0
    for name in names:
        m = OWNER_RE.match(name)
        if m is None:
            continue
        try:
            fd = os.open(directory / name, os.O_RDWR)
        except OSError:
            continue  # swept by someone else meanwhile
        try:
            fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
        except OSError:
            continue  # alive
        finally:
            os.close(fd)  # also releases our lock if we got it
        prefixes = (f"{SEGMENT_PREFIX}{m.group(1)}-", f"{PROBE_PREFIX}{m.group(1)}-")
        removed += sum(try_unlink(directory / n) for n in names if n.startswith(prefixes))
        removed += try_unlink(directory / name)
    return removed


def new_segment_name(directory: Path) -> str:
    """A fresh segment name in ``directory``, carrying this process's owner token there."""
    return f"{SEGMENT_PREFIX}{owner_token(directory)}-{next(_counter)}-{secrets.token_hex(4)}"
