"""One exception hierarchy; each class declares the gRPC status code it maps to.

Core objects raise these; the server interceptor (:mod:`graphfeed.common.rpc`) turns them into
a gRPC status with the message, and clients turn statuses back into these classes.
"""

from __future__ import annotations

import grpc
import numpy as np

MAX_MESSAGE_CHARS = 1000  # a status message travels in trailing metadata (8 KiB in all by default)


def clip(text: str, limit: int = MAX_MESSAGE_CHARS) -> str:
    """``text`` cut to ``limit`` characters, saying how much was cut: messages echo client
    input (a name, a list of ids), and an echo must neither exceed gRPC's metadata limit (which
    turns the answer into RESOURCE_EXHAUSTED) nor flood a log."""
    if len(text) <= limit:
        return text
    cut = len(text) - limit
    return f"{text[: limit - 40]}... ({cut + 40} characters cut)"


def name_ids(ids: np.ndarray, limit: int = 5) -> str:
    """The distinct ``ids`` an error quotes: the first ``limit``, then how many more
    (``"7, 9 and 3 more"``), so that a message stays short whatever the request held."""
    distinct = np.unique(ids)
    named = ", ".join(str(int(g)) for g in distinct[:limit])
    return named + (f" and {len(distinct) - limit} more" if len(distinct) > limit else "")


class GraphfeedError(Exception):
    """Base class. ``code`` is the gRPC status a server answers with. The message is clipped
    (:func:`clip`), so an error that echoes a huge input still has the right status."""

    code: grpc.StatusCode = grpc.StatusCode.INTERNAL
    retryable: bool = False  # idempotent calls failing with ``code`` are retried (RETRYABLE_CODES)

    def __init__(self, message: object = "", *args: object) -> None:
        super().__init__(clip(str(message)), *args)


class InvalidArgument(GraphfeedError):
    """The request is malformed (bad dtype, shape, fanout, empty seeds, ...)."""

    code = grpc.StatusCode.INVALID_ARGUMENT


class NotFound(GraphfeedError):
    """A node id, node-data name or split does not exist (here)."""

    code = grpc.StatusCode.NOT_FOUND


class ResourceExhausted(GraphfeedError):
    """A request exceeds a configured limit (ids per request, message bytes)."""

    code = grpc.StatusCode.RESOURCE_EXHAUSTED


class OutOfRange(GraphfeedError):
    """A position past the end (e.g. a start step beyond the epoch)."""

    code = grpc.StatusCode.OUT_OF_RANGE


class FailedPrecondition(GraphfeedError):
    """The system is in the wrong state for the request (e.g. partition layout mismatch)."""

    code = grpc.StatusCode.FAILED_PRECONDITION


class Unauthenticated(GraphfeedError):
    """The call carries no valid credentials (no or an unknown bearer token, no client certificate)."""

    code = grpc.StatusCode.UNAUTHENTICATED


class PermissionDenied(GraphfeedError):
    """The caller is known (a verified client certificate) but not allowed."""

    code = grpc.StatusCode.PERMISSION_DENIED


class Unavailable(GraphfeedError):
    """A peer could not be reached; the call may be retried."""

    code = grpc.StatusCode.UNAVAILABLE
    retryable = True


class DeadlineExceeded(GraphfeedError):
    """A peer did not answer within the deadline. Not retried: the deadline bounds the whole
    call, retries included, and another attempt would only add load to a peer already slow."""

    code = grpc.StatusCode.DEADLINE_EXCEEDED


class DataLoss(GraphfeedError):
    """Bytes that do not make up what they announce: a corrupt message, a truncated or
    oversized bulk stream (see ``tensor.proto``, "Bulk framing"). Not retried here: the call's
    reader decides whether to ask again."""

    code = grpc.StatusCode.DATA_LOSS


_BY_CODE: dict[grpc.StatusCode, type[GraphfeedError]] = {
    cls.code: cls
    for cls in (
        InvalidArgument,
        NotFound,
        ResourceExhausted,
        OutOfRange,
        FailedPrecondition,
        Unavailable,
        DeadlineExceeded,
        DataLoss,
    )
}

RETRYABLE_CODES: tuple[grpc.StatusCode, ...] = tuple(code for code, cls in _BY_CODE.items() if cls.retryable)
"""Statuses on which clients retry idempotent calls (see :func:`graphfeed.common.rpc.client_channel`)."""


def from_rpc_error(err: grpc.RpcError, peer: str = "") -> GraphfeedError:
    """Turns a client-side ``grpc.RpcError`` into the matching :class:`GraphfeedError`."""
    # Errors raised by a stub are also grpc.Call (code and details); others say only str().
    code = err.code() if isinstance(err, grpc.Call) else grpc.StatusCode.UNKNOWN
    details = err.details() if isinstance(err, grpc.Call) else str(err)
    cls = _BY_CODE.get(code, GraphfeedError)
    where = f" (from {peer})" if peer else ""
    exc = cls(f"{details}{where}")
    if cls is GraphfeedError:
        exc.code = code
    return exc
