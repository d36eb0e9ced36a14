"""Small combinators over :class:`concurrent.futures.Future`, for calls that fan out and merge."""

from __future__ import annotations

import contextlib
from collections.abc import Callable
from concurrent.futures import Future, InvalidStateError
from typing import Any, TypeVar

_R = TypeVar("_R")


def settle(out: Future, result: object = None, exc: BaseException | None = None) -> None:
    """Completes ``out`` unless it was cancelled meanwhile (then the answer is not wanted)."""
    with contextlib.suppress(InvalidStateError):
        if exc is not None:
            out.set_exception(exc)
        else:
            out.set_result(result)


def then(fut: Future, fn: Callable[[Any], _R]) -> Future[_R]:
    """``fn(fut.result())`` as a future (``fn`` runs even if the returned future was cancelled)."""
    out: Future[_R] = Future()

    def done(f: Future) -> None:
        try:
            result = fn(f.result())
        except BaseException as exc:  # noqa: BLE001 - forwarded to the consumer
            settle(out, exc=exc)
        else:
            settle(out, result=result)

    fut.add_done_callback(done)
    return out


def completed(fn: Callable[..., _R], *args: object) -> Future[_R]:
    """``fn(*args)`` run now, its result or exception in a done future."""
    fut: Future[_R] = Future()
    try:
        fut.set_result(fn(*args))
    except BaseException as exc:  # noqa: BLE001 - forwarded to the consumer
        fut.set_exception(exc)
    return fut
