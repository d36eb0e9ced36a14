"""File names and file helpers shared by every role of the shared-memory transport.

Names: ``graphfeed-seg-<owner token>-<counter>-<8 hex>`` for a segment, plus ``.lent`` /
``.free`` while a recycled one is out with a reader / back with its writer;
``graphfeed-probe-<owner token>-<16 hex>`` for a client's probe; ``graphfeed-owner-<token>``
for a process's owner lock. An owner token is ``<pid>o<8 hex>``.
"""

from __future__ import annotations

import math
import mmap
import os
import re
import stat
import threading
import time
from collections.abc import Callable, Sequence
from pathlib import Path

import numpy as np
from numpy.typing import DTypeLike

from graphfeed.common.errors import FailedPrecondition, GraphfeedError, Unavailable

SEGMENT_PREFIX = "graphfeed-seg-"
PROBE_PREFIX = "graphfeed-probe-"
OWNER_PREFIX = "graphfeed-owner-"
ALIGN = 64  # every array starts at a multiple of 64 bytes
METADATA_KEY = "graphfeed-shm"  # gRPC metadata key of a client's offer
DEFAULT_DIR = Path("/dev/shm")

LENT_SUFFIX = ".lent"  # a recycled segment a reader has mapped
FREE_SUFFIX = ".free"  # a recycled segment handed back to its writer's pool
# graphfeed-seg-<owner token: pid "o" 8 hex>-<counter>-<8 hex>
SEGMENT_RE = re.compile(rf"^{SEGMENT_PREFIX}[0-9]+o[0-9a-f]{{8}}-[0-9]+-[0-9a-f]{{8}}$")
PROBE_RE = re.compile(rf"^{PROBE_PREFIX}[0-9]+o[0-9a-f]{{8}}-[0-9a-f]{{16}}$")  # owner token, then its own
OWNER_RE = re.compile(rf"^{OWNER_PREFIX}([0-9]+o[0-9a-f]{{8}})$")


def try_unlink(path: Path) -> bool:
    """Unlinks ``path``; False (no error) when it is already gone or cannot be removed."""
    try:
        os.unlink(path)
        return True
    except OSError:  # already claimed / swept
        return False


def try_rename(src: Path, dst: Path) -> bool:
    """Renames ``src`` to ``dst``; False (no error) when ``src`` is gone or the rename fails."""
    try:
        os.rename(src, dst)
        return True
    except OSError:  # claimed / handed back / removed meanwhile
        return False


def suffixed(path: Path, suffix: str) -> Path:
    """``path`` with ``suffix`` appended to its name (``.lent``, ``.free``)."""
    return path.with_name(path.name + suffix)


def aligned(n: int) -> int:
    """``n`` rounded up to a multiple of :data:`ALIGN`."""
    return -(-n // ALIGN) * ALIGN


def layout(shape: Sequence[int], dtype: DTypeLike) -> tuple[tuple[int, ...], np.dtype, int]:
    """Checked (shape, dtype, byte count); ValueError/TypeError on nonsense."""
    dt = np.dtype(dtype)
    if dt.hasobject:
        raise ValueError(f"dtype {dt} holds Python objects and cannot be shared")
    shp = tuple(int(d) for d in shape)
    if any(d < 0 for d in shp):
        raise ValueError(f"shape {shp} has a negative dimension")
    return shp, dt, math.prod(shp) * dt.itemsize


def view(buf: mmap.mmap | None, size: int, offset: int, shape: Sequence[int], dtype: DTypeLike) -> np.ndarray:
    """An array over ``buf[offset:]``; ValueError/TypeError when it does not fit."""
    shp, dt, nbytes = layout(shape, dtype)
    offset = int(offset)
    if offset < 0 or offset + nbytes > size:
        raise ValueError(f"{nbytes} bytes at offset {offset} do not fit in {size} bytes")
    if nbytes == 0 or buf is None:
        return np.empty(shp, dt)
    return np.frombuffer(buf, dtype=dt, count=nbytes // dt.itemsize, offset=offset).reshape(shp)


def check_trusted(path: Path, st: os.stat_result) -> None:
    """Refuses a segment file this process's user did not write: another local user can create
    files with any free name in a shared, sticky tmpfs (``/dev/shm``) and must not get their
    bytes read, or our bytes written, as a message. Every graphfeed process of one deployment
    runs as one user (the protocol's premise; uid 10001 in the images), and segments are ``0600``.

    Raises:
        FailedPrecondition: not a regular file, another owner, or writable by group/others.
    """
    if not stat.S_ISREG(st.st_mode):
        raise FailedPrecondition(f"shared-memory segment {path} is not a regular file: refused")
    if st.st_uid != os.geteuid():
        raise FailedPrecondition(
            f"shared-memory segment {path} belongs to uid {st.st_uid}, "
            f"not to this process's uid {os.geteuid()}: refused"
        )
    if st.st_mode & 0o022:
        raise FailedPrecondition(
            f"shared-memory segment {path} is writable by others (mode {st.st_mode & 0o777:o}): refused"
        )


def open_regular(
    path: Path, mode: int, gone_hint: str = "", gone: type[GraphfeedError] = Unavailable
) -> tuple[int, os.stat_result]:
    """``(fd, stat)`` of an existing regular segment file of this user (:func:`check_trusted`),
    opened without following a symlink; the caller closes the fd.

    Raises:
        ``gone`` (default Unavailable): the file is gone. FailedPrecondition: it cannot be
        opened, is not a regular file, or is not trusted.
    """
    try:
        fd = os.open(path, mode | os.O_NOFOLLOW)
    except FileNotFoundError:
        raise gone(f"shared-memory segment {path.name} is gone from {path.parent}{gone_hint}") from None
    except OSError as e:
        raise FailedPrecondition(f"cannot open shared-memory segment {path}: {e.strerror}") from None
    try:
        st = os.fstat(fd)
        check_trusted(path, st)
    except BaseException:
        os.close(fd)
        raise
    return fd, st


def map_existing(
    path: Path, mode: int, gone_hint: str, gone: type[GraphfeedError] = Unavailable, **mmap_args: int
) -> tuple[mmap.mmap | None, int]:
    """Maps an existing regular segment file; ``(None, 0)`` for an empty one (raises as :func:`open_regular`)."""
    fd, st = open_regular(path, mode, gone_hint, gone)
    try:
        return (mmap.mmap(fd, st.st_size, **mmap_args) if st.st_size else None), st.st_size
    finally:
        os.close(fd)


def start_trimmer(name: str, interval_s: float, trim: Callable[[], bool]) -> threading.Thread:
    """A daemon thread that calls ``trim()`` every ``interval_s`` until it returns False: how
    a pool or a mapping cache lets go of memory while its owner is idle."""

    def loop() -> None:
        while True:
            time.sleep(interval_s)
            if not trim():
                return

    thread = threading.Thread(target=loop, name=name, daemon=True)
    thread.start()
    return thread
