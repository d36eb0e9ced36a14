"""A bound on what one server stream has sent through shared memory (or parked on the bulk
plane) and its client has not yet claimed."""

from __future__ import annotations

import threading
from collections.abc import Callable
from pathlib import Path
from types import TracebackType
from typing import Protocol, Self

from graphfeed.common.shm.dir_watch import DirectoryWatch


class CallContext(Protocol):
    """What :class:`Backpressure` needs of a ``grpc.ServicerContext``."""

    def add_callback(self, callback: Callable[[], None]) -> object:
        """Runs ``callback`` when the call ends (completed, cancelled or timed out)."""
        ...


class Backpressure:
    """Bounds what one server stream has sent through shared memory and the client has not yet
    claimed: a message is then a few bytes, so gRPC flow control no longer limits how far the
    producer runs ahead. A minibatch counts until the client claims its segments (unlinks them,
    or renames a recycled one ``.lent``).

    :meth:`wait` sleeps on inotify events of the segments' directories (a claim wakes it at
    once) and looks again every ``recheck_s`` anyway, which is how it notices the call's end;
    without inotify it polls every ``poll_s``. The call's end closes the inotify fd, and so
    does leaving a ``with`` block. :meth:`wait` and :meth:`sent` are for the stream's thread.

    Args:
        context: the call (only its ``add_callback`` is used).
        limit: sent messages that may be unclaimed at once (at least 1).
        poll_s: seconds between checks without inotify.
        recheck_s: longest sleep on inotify before looking again.
    """

    def __init__(self, context: CallContext, limit: int, poll_s: float = 0.001, recheck_s: float = 0.05) -> None:
        self._limit = max(1, limit)
        self._poll_s = poll_s
        self._recheck_s = recheck_s
        self._sent: list[tuple[list[Path], Callable[[], bool] | None]] = []
        self._stop = threading.Event()
        self._lock = threading.Lock()  # guards _watch against close() from the call's end
        self._waiting = False  # wait() is using _watch: close() leaves closing it to wait()
        self._watch: DirectoryWatch | None = None
        self._inotify = True  # False once inotify failed: poll from then on
        context.add_callback(self.close)

    def __enter__(self) -> Self:
        return self

    def __exit__(
        self, exc_type: type[BaseException] | None, exc: BaseException | None, tb: TracebackType | None
    ) -> None:
        self.close()

    def wait(self) -> bool:
        """Blocks until fewer than ``limit`` sent messages are unclaimed; False when the call ended."""
        with self._lock:
            self._waiting = True
        try:
            return self._wait_below_limit()
        finally:
            with self._lock:
                self._waiting = False
                if self._stop.is_set():
                    self._close_watch()

    def _wait_below_limit(self) -> bool:
        while True:
            self._sent = [(paths, unread) for paths, unread in self._sent if _unclaimed(paths, unread)]
            if len(self._sent) < self._limit:
                return True
            if self._stop.is_set():
                return False
            if self._watch is not None and not any(unread for _, unread in self._sent):
                self._watch.wait(self._recheck_s)
            elif self._stop.wait(self._poll_s):
                return False

    def sent(self, paths: list[Path], unread: Callable[[], bool] | None = None) -> None:
        """Counts a message that names the segment files ``paths`` (one is enough to keep it
        counted) or whose bytes wait on the bulk plane while ``unread()`` (polled, no inotify)."""
        self._sent.append((paths, unread))
        if not paths:
            return
        with self._lock:
            if self._stop.is_set() or not self._inotify:
                return
            if self._watch is None:
                self._watch = DirectoryWatch.open()
            # Watched before wait() looks at the files, so no claim after that look goes unnoticed.
            if self._watch is None or not all(self._watch.add(d) for d in {p.parent for p in paths}):
                self._inotify = False
                self._close_watch()

    def close(self) -> None:
        """Ends the stream's bound: :meth:`wait` returns False from now on (unless under the
        limit) and the inotify fd is closed; idempotent. Runs when the call ends."""
        self._stop.set()
        with self._lock:
            if not self._waiting:
                self._close_watch()

    def _close_watch(self) -> None:
        watch, self._watch = self._watch, None
        if watch is not None:
            watch.close()


def _unclaimed(paths: list[Path], unread: Callable[[], bool] | None) -> bool:
    return any(p.exists() for p in paths) or (unread is not None and unread())
