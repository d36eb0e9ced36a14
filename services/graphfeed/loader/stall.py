"""Ends minibatch streams whose client stopped reading.

A stream's handler thread blocks while gRPC waits to send (flow control: the client does not
read) or while its shared-memory messages wait to be claimed. Nothing on that thread can time
out, so a client that reads one message and stops would hold the thread, its producer's
buffered minibatches, its slot and its shared-memory files for as long as it keeps the
connection open; enough of them lock every trainer out. :class:`StallWatch` runs one thread
that cancels (``context.cancel()``, which also wakes the blocked send) every stream that has
been waiting on its client for longer than ``timeout_s``. Only time spent waiting on the
client counts: a stream whose loader is slow to produce is never cancelled.
"""

from __future__ import annotations

import logging
import threading
import time
from collections.abc import Callable, Iterator
from contextlib import contextmanager

import grpc

log = logging.getLogger(__name__)


class Progress:
    """One stream's clock: :meth:`waiting` around every wait on the client."""

    def __init__(self, context: grpc.ServicerContext, peer: str) -> None:
        self.context = context
        self.peer = peer
        self.since: float | None = None  # monotonic start of the current wait on the client
        self.cancelled = False

    @contextmanager
    def waiting(self) -> Iterator[None]:
        """The ``with`` block waits on the client (a send, a claim)."""
        self.since = time.monotonic()
        try:
            yield
        finally:
            self.since = None


class StallWatch:
    """Cancels streams that have waited on their client for more than ``timeout_s``.

    Args:
        timeout_s: longest wait on a client (0 or less: never cancel).
        on_stall: called once per cancelled stream (a metric).
        check_s: how often the streams are looked at (at most ``timeout_s / 4``).
    """

    def __init__(self, timeout_s: float, on_stall: Callable[[], None] = lambda: None, check_s: float = 1.0) -> None:
        self.timeout_s = timeout_s
        self._on_stall = on_stall
        self._check_s = max(0.01, min(check_s, timeout_s / 4)) if timeout_s > 0 else check_s
        self._lock = threading.Lock()
        self._streams: set[Progress] = set()
        self._thread: threading.Thread | None = None

    @contextmanager
    def watch(self, context: grpc.ServicerContext) -> Iterator[Progress]:
        """A :class:`Progress` for one stream, watched for the ``with`` block."""
        progress = Progress(context, context.peer())
        if self.timeout_s <= 0:
            yield progress
            return
        with self._lock:
            self._streams.add(progress)
            if self._thread is None:
                self._thread = threading.Thread(target=self._run, name="stall-watch", daemon=True)
                self._thread.start()
        try:
            yield progress
        finally:
            with self._lock:
                self._streams.discard(progress)

    def _run(self) -> None:
        while True:
            time.sleep(self._check_s)
            now = time.monotonic()
            with self._lock:
                stalled = [
                    p
                    for p in self._streams
                    if not p.cancelled and p.since is not None and now - p.since > self.timeout_s
                ]
                for p in stalled:
                    p.cancelled = True
            for p in stalled:
                log.warning(
                    "minibatch stream of %s: the client took nothing for %.0fs (stream_stall_timeout_s); ending it",
                    p.peer,
                    now - (p.since or now),
                )
                p.context.cancel()
                self._on_stall()
