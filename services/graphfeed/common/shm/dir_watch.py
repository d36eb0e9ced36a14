"""Linux inotify through ctypes: a waiter sleeps until a file leaves a watched directory.

Only what :class:`~graphfeed.common.shm.backpressure.Backpressure` needs: a reader claims a
segment by unlinking it or renaming it (``.lent``), so the events are "moved out of" and
"deleted" (and the directory itself going away). The events are not parsed: a wake-up only
means "look again", so an unrelated file in a busy ``/dev/shm`` costs a spurious check, never a
missed one.
"""

from __future__ import annotations

import ctypes
import ctypes.util
import functools
import logging
import math
import os
import select
import weakref
from pathlib import Path

log = logging.getLogger(__package__)

IN_MOVED_FROM = 0x00000040
IN_DELETE = 0x00000200
IN_DELETE_SELF = 0x00000400
IN_MOVE_SELF = 0x00000800
IN_ONLYDIR = 0x01000000
_MASK = IN_MOVED_FROM | IN_DELETE | IN_DELETE_SELF | IN_MOVE_SELF | IN_ONLYDIR


@functools.cache
def _libc() -> ctypes.CDLL | None:
    """libc with the inotify calls typed; None where there is none (not Linux, no libc found)."""
    try:
        libc = ctypes.CDLL(ctypes.util.find_library("c") or "libc.so.6", use_errno=True)
        libc.inotify_init1.argtypes = [ctypes.c_int]
        libc.inotify_init1.restype = ctypes.c_int
        libc.inotify_add_watch.argtypes = [ctypes.c_int, ctypes.c_char_p, ctypes.c_uint32]
        libc.inotify_add_watch.restype = ctypes.c_int
    except (OSError, AttributeError) as e:
        log.debug("no inotify: %s", e)
        return None
    return libc


def _close_fd(fd: int) -> None:
    os.close(fd)


class DirectoryWatch:
    """One inotify instance watching any number of directories for files leaving them.

    Not thread-safe: one thread adds, waits and closes (the caller serialises a close from
    another thread). A watch dropped without :meth:`close` closes its fd when collected.
    """

    def __init__(self, fd: int) -> None:
        self._fd = fd
        self._poller = select.poll()
        self._poller.register(fd, select.POLLIN)
        self._close = weakref.finalize(self, _close_fd, fd)

    @classmethod
    def open(cls) -> DirectoryWatch | None:
        """A new watch; None (debug log) where inotify is unavailable or out of instances."""
        libc = _libc()
        if libc is None:
            return None
        fd = libc.inotify_init1(os.O_NONBLOCK | os.O_CLOEXEC)
        if fd < 0:
            log.debug("no inotify: inotify_init1: %s", os.strerror(ctypes.get_errno()))
            return None
        return cls(fd)

    def add(self, directory: Path) -> bool:
        """Watches ``directory`` (again: a no-op, or a fresh watch if it was re-created);
        False (debug log) when it cannot be watched."""
        libc = _libc()
        if libc is None or not self._close.alive:
            return False
        if libc.inotify_add_watch(self._fd, os.fsencode(directory), _MASK) < 0:
            log.debug("cannot watch %s: %s", directory, os.strerror(ctypes.get_errno()))
            return False
        return True

    def wait(self, timeout_s: float) -> bool:
        """Blocks until a file left a watched directory or ``timeout_s`` passed; True on events.

        Consumes every pending event, so the next call waits for new ones.
        """
        if not self._poller.poll(math.ceil(timeout_s * 1000)):
            return False
        while True:
            try:
                if not os.read(self._fd, 64 << 10):
                    return True
            except BlockingIOError:
                return True

    def close(self) -> None:
        """Closes the inotify fd; idempotent."""
        self._close()
