"""Waiting for peers that start after the trainer: retry with capped backoff, one line per try."""

from __future__ import annotations

import logging
import time
from collections.abc import Callable
from typing import TypeVar

from graphfeed.common.errors import DeadlineExceeded, Unavailable

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
    deadline, backoff = start + timeout_s, initial_backoff_s
    why = ""
    while True:
        left = deadline - time.monotonic()
        try:
            return attempt(max(0.1, min(attempt_timeout_s, left)))
        except Unavailable as exc:  # says why (refused, "waiting for graph-store X"): kept for the final message
            last = why = f"{exc.code.name} {exc}"
        except DeadlineExceeded as exc:  # a try cut short says less than an earlier refusal
            last = f"{exc.code.name} {exc}"
        left = deadline - time.monotonic()
        if left <= 0:
            raise PeerTimeout(f"{what} did not answer within {timeout_s:g}s: {why or last}")
        wait = min(backoff, left)
        log.warning("waiting for %s: %s; next try in %.1fs (%.0fs of %gs)", what, last, wait, time.monotonic() - start, timeout_s)
        time.sleep(wait)  # backoff between tries of a peer that is not up yet
        backoff = min(backoff * 2, max_backoff_s)
