"""Waiting for peers that start after the trainer: retry with capped backoff, one line per try."""

from __future__ import annotations

import logging
import time
from collections.abc import Callable
from typing import TypeVar

import grpc

from graphfeed.common.errors import DeadlineExceeded, GraphfeedError, Unavailable
from graphfeed.common.retry import retry_transient

log = logging.getLogger(__name__)

T = TypeVar("T")


class PeerTimeout(Unavailable):
    """A peer did not answer within the trainer's connect timeout."""


def wait_for(
    what: str,
    attempt: Callable[[float], T],
    timeout_s: float,
    *,
    attempt_timeout_s: float = 10.0,
    initial_backoff_s: float = 0.5,
    max_backoff_s: float = 10.0,
) -> T:
    """``attempt(deadline_s)`` retried while it raises Unavailable or DeadlineExceeded (the peer
    is not up, or not ready), logging one line per failed try, for up to ``timeout_s`` seconds.

    Args:
        what: the peer, for the messages ("loader at host:port").
        attempt: one try; its argument is the deadline of that try's call, in seconds.
        timeout_s: how long to keep trying.
        attempt_timeout_s: deadline of one try (less when less time is left).
        initial_backoff_s, max_backoff_s: wait after a failed try, doubled each time up to the cap.

    Raises:
        PeerTimeout: the peer did not answer within ``timeout_s`` (the message ends with the last
            UNAVAILABLE error, else the last error).
        GraphfeedError: any other error of ``attempt``, at once.
    """
    start = time.monotonic()
    why = ""

    def note(_tries: int, exc: GraphfeedError, wait: float) -> None:
        nonlocal why
        last = f"{exc.code.name} {exc}"
        if isinstance(exc, Unavailable):  # says why (refused, "waiting for graph-store X"): kept for the end
            why = last
        elapsed = time.monotonic() - start
        log.warning("waiting for %s: %s; next try in %.1fs (%.0fs of %gs)", what, last, wait, elapsed, timeout_s)

    try:
        return retry_transient(
            attempt,
            timeout_s=timeout_s,
            attempt_timeout_s=attempt_timeout_s,
            initial_backoff_s=initial_backoff_s,
            max_backoff_s=max_backoff_s,
            on_retry=note,
        )
    except (Unavailable, DeadlineExceeded) as exc:
        final = f"{exc.code.name} {exc}"
        raise PeerTimeout(
            f"{what} did not answer within {timeout_s:g}s: {(final if isinstance(exc, Unavailable) else why) or final}"
        ) from None


# A broken minibatch stream worth reopening: the loader went away or restarted (UNAVAILABLE, or
# CANCELLED when its server stopped mid-stream) or a minibatch was lost on the way (DATA_LOSS).
RESUMABLE_CODES = (grpc.StatusCode.UNAVAILABLE, grpc.StatusCode.CANCELLED, grpc.StatusCode.DATA_LOSS)


class Resume:
    """When to reopen a broken stream: resumable errors only, with capped exponential backoff,
    until ``deadline_s`` has passed since the first failure without progress."""

    def __init__(self, deadline_s: float, what: str, max_backoff_s: float = 5.0) -> None:
        self.deadline_s = deadline_s
        self.what = what
        self.max_backoff_s = max_backoff_s
        self.attempts = 0
        self._since: float | None = None
        self._backoff = 0.1

    def again(self, exc: GraphfeedError, progressed: bool) -> bool:
        """Whether to reopen after ``exc`` (sleeping the backoff first); False: give up.

        RESOURCE_EXHAUSTED counts only for a stream that delivered nothing: the loader refused to
        open it for capacity (its streams all taken, e.g. by clients that stopped reading, which
        it ends after ``stream_stall_timeout_s``); a stream that had been delivering is over a
        limit of its own and would be refused again."""
        capacity = exc.code == grpc.StatusCode.RESOURCE_EXHAUSTED and not progressed
        if (exc.code not in RESUMABLE_CODES and not capacity) or self.deadline_s <= 0:
            return False
        now = time.monotonic()
        if progressed or self._since is None:
            self._since, self._backoff = now, 0.1
        if now - self._since > self.deadline_s:
            return False
        self.attempts += 1
        log.warning("%s: stream broke (%s: %s); reopening in %.1fs", self.what, exc.code.name, exc, self._backoff)
        time.sleep(self._backoff)
        self._backoff = min(self.max_backoff_s, self._backoff * 2)
        return True
