"""Retrying a call while its peer is unreachable: capped exponential backoff within one deadline.

Idempotent reads are retried by the channel's declarative policy
(:func:`graphfeed.common.rpc.client_channel`); this loop is for what that policy cannot cover:
a peer that is not up yet (a trainer waiting for its loader) and edge appends, whose batches
may exceed gRPC's retry buffer and are sent again with the same batch id until a deadline far
beyond one call's.
"""

from __future__ import annotations

import itertools
import time
from collections.abc import Callable
from typing import TypeVar

from graphfeed.common.errors import DeadlineExceeded, Unavailable

T = TypeVar("T")

TRANSIENT = (Unavailable, DeadlineExceeded)
"""The call may not have reached the peer, or its answer was lost: worth sending again."""


def retry_transient(
    attempt: Callable[[float], T],
    *,
    timeout_s: float,
    attempt_timeout_s: float | None = None,
    initial_backoff_s: float = 0.5,
    max_backoff_s: float = 10.0,
    on_retry: Callable[[int, Unavailable | DeadlineExceeded, float], None] | None = None,
) -> T:
    """``attempt(deadline_s)`` tried again while it raises Unavailable or DeadlineExceeded, for
    up to ``timeout_s`` seconds; then that error is raised. Any other error is raised at once.

    Args:
        attempt: one try; its argument is that try's deadline in seconds (the time left,
            capped at ``attempt_timeout_s``, at least 0.1 s).
        timeout_s: how long to keep trying.
        attempt_timeout_s: most seconds one try may take (None: the time left).
        initial_backoff_s, max_backoff_s: wait after a failed try, doubled each time up to the cap.
        on_retry: called with the try's number, its error and the wait before the next try.
    """
    deadline, backoff = time.monotonic() + timeout_s, initial_backoff_s
    for tries in itertools.count(1):
        left = deadline - time.monotonic()
        try:
            return attempt(max(0.1, left if attempt_timeout_s is None else min(attempt_timeout_s, left)))
        except TRANSIENT as exc:
            left = deadline - time.monotonic()
            if left <= 0:
                raise
            wait = min(backoff, left)
            if on_retry is not None:
                on_retry(tries, exc, wait)
            time.sleep(wait)  # backoff between tries of an unreachable peer, not synchronisation
            backoff = min(backoff * 2, max_backoff_s)
    raise AssertionError("unreachable")  # pragma: no cover - the loop only returns or raises
