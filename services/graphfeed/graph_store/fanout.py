"""Fan-out to owner partitions: the one way graphfeed asks many graph-stores at once.

Like DistDGL's ``_distributed_access``: group the ids by owner partition
(:func:`~graphfeed.common.owners.group_by_owner`), start every request (a partition's share in
chunks of at most ``max_ids_per_request`` ids) before waiting on any, then merge the answers
back into id order. On any failure the rest are cancelled (those not yet sent; ones in flight
finish on their own deadline) and the error is re-raised. Each request carries its own deadline
(the partition set's clients set it).

Used for feature rows, labels and degrees (:func:`fan_out`, :class:`PendingRows`) and for the
sampler's hops (:func:`fan_out_requests`, merged by :func:`graphfeed.sampler.compact.compact_hop`).
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from concurrent.futures import Future
from dataclasses import dataclass
from typing import Generic, TypeVar

import numpy as np

from graphfeed.common.owners import group_by_owner
from graphfeed.graph_store.types import PartitionSet

T = TypeVar("T")


@dataclass(frozen=True)
class Chunk:
    """One request of a fan-out: ``ids`` owned by ``partition``.

    ``positions`` are where ``ids`` sit in the fanned-out ids (ascending); ``first_position`` is
    where the chunk starts within its partition's share, so a partition split into several
    requests can answer each as if it were part of one (the sampler's ``first_position``).
    """

    partition: int
    ids: np.ndarray  # int64 [n]
    positions: np.ndarray  # int64 [n]
    first_position: int


class Pending(Generic[T]):
    """Requests in flight, one per :class:`Chunk`, in grouped order (partition by partition).

    ``parts[k]`` is ``(partition, positions in ids, future)``; concatenating the positions gives
    ``order`` and ``bounds[k]:bounds[k + 1]`` are chunk ``k``'s grouped positions. A future is
    None where the call declined the chunk (:func:`fan_out`'s callers check before waiting).
    """

    def __init__(self, num_ids: int, parts: list[tuple[int, np.ndarray, Future[T] | None]]) -> None:
        self.num_ids = num_ids
        self.parts = parts

    @property
    def order(self) -> np.ndarray:
        """``order[j]``: the position in ids of grouped position ``j``."""
        if not self.parts:
            return np.empty(0, dtype=np.int64)
        return np.concatenate([pos for _, pos, _ in self.parts]).astype(np.int64, copy=False)

    @property
    def bounds(self) -> np.ndarray:
        """int64 [len(parts) + 1]: where each chunk starts in grouped order, then the total."""
        return np.cumsum([0] + [len(pos) for _, pos, _ in self.parts], dtype=np.int64)

    def results(self) -> list[T]:
        """Every answer in ``parts`` order; on the first failure cancels the rest and re-raises."""
        try:
            return [_answer(p, fut) for p, _, fut in self.parts]
        finally:
            self.cancel()

    def cancel(self) -> None:
        """Cancels the requests not answered yet (ones that cannot be cancelled finish on their own
        deadline); a no-op once every request has answered."""
        for _, _, fut in self.parts:
            if fut is not None:
                fut.cancel()


class PendingRows(Pending[np.ndarray]):
    """Requests in flight for rows of ``ids`` (see :func:`fan_out`)."""

    def wait(self, row_shape: Sequence[int], dtype: np.dtype | type) -> tuple[np.ndarray, dict[int, int]]:
        """Rows in ``ids`` order and the bytes received per partition; re-raises a failed request."""
        out = np.empty((self.num_ids, *row_shape), dtype=dtype)
        received: dict[int, int] = {}
        try:
            for p, pos, fut in self.parts:
                rows = np.asarray(_answer(p, fut))
                out[pos] = rows.reshape((len(pos), *row_shape))
                received[p] = received.get(p, 0) + int(rows.nbytes)
        finally:
            self.cancel()
        return out, received


def _answer(partition: int, fut: Future[T] | None) -> T:
    """The request's answer; RuntimeError for a chunk whose call declined it (returned None)."""
    if fut is None:
        raise RuntimeError(f"the request to partition {partition} was declined (no future): nothing to wait for")
    return fut.result()


def _start(
    partitions: PartitionSet,
    ids: np.ndarray,
    call: Callable[[Chunk], Future[T] | None],
    max_ids_per_request: int,
    pending: Pending[T],
) -> None:
    """Appends one started request per chunk to ``pending``; cancels them all if one fails to start."""
    if max_ids_per_request < 1:
        raise ValueError(f"max_ids_per_request must be >= 1, got {max_ids_per_request}")
    order, bounds = group_by_owner(ids, partitions.info.node_offsets)
    try:
        for p in range(partitions.num_partitions):
            share = order[bounds[p] : bounds[p + 1]]
            for lo in range(0, len(share), max_ids_per_request):
                pos = share[lo : lo + max_ids_per_request]
                pending.parts.append((p, pos, call(Chunk(p, ids[pos], pos, lo))))
    except BaseException:
        pending.cancel()
        raise


def fan_out_requests(
    partitions: PartitionSet, ids: np.ndarray, call: Callable[[Chunk], Future[T]], max_ids_per_request: int
) -> Pending[T]:
    """Starts ``call(chunk)`` for every chunk of ``ids`` grouped by owner, all before any is waited on.

    Args:
        partitions: the partition set whose ``node_offsets`` say who owns which id.
        ids: global ids, each in ``[0, num_nodes)``; any order, duplicates allowed.
        call: starts one request and returns its future (which raises what the request raised).
        max_ids_per_request: most ids in one request (>= 1).
    """
    ids = np.asarray(ids, dtype=np.int64)
    pending: Pending[T] = Pending(len(ids), [])
    _start(partitions, ids, call, max_ids_per_request, pending)
    return pending


def fan_out(
    partitions: PartitionSet,
    ids: np.ndarray,
    call: Callable[..., Future | None],
    max_ids_per_request: int,
    with_positions: bool = False,
) -> PendingRows:
    """:func:`fan_out_requests` for rows: starts ``call(p, chunk ids)`` per chunk, or with
    ``with_positions`` ``call(p, chunk ids, positions of the chunk in ids)``; the futures may be
    None (the caller then falls back), else they give rows in chunk order."""
    ids = np.asarray(ids, dtype=np.int64)

    def start(c: Chunk) -> Future | None:
        return call(c.partition, c.ids, c.positions) if with_positions else call(c.partition, c.ids)

    pending = PendingRows(len(ids), [])
    _start(partitions, ids, start, max_ids_per_request, pending)
    return pending
