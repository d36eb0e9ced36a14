"""Fan-out to owner partitions: the one way graphfeed asks many graph-stores at once.

Like DistDGL's ``_distributed_access``: group the ids by owner partition
(:func:`~graphfeed.common.owners.group_by_owner`, the one ownership rule), start every request
(a partition's share in chunks of at most ``max_ids_per_request`` ids) before waiting on any,
then merge the answers back into id order. On any failure the rest are cancelled (those not yet
sent; ones in flight finish on their own deadline) and the error is re-raised. Each request
carries its own deadline (the partition set's clients set it).

Used for the sampler's hops (merged by :func:`graphfeed.sampler.compact.compact_hop`), temporal
hops (:mod:`graphfeed.graph_store.temporal.client`), degrees (:func:`merge_arrays`) and node data
(:class:`RowsRequest`, :func:`fetch_rows`: every reader of feature rows and labels).
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from concurrent import futures
from concurrent.futures import Future
from dataclasses import dataclass
from typing import Generic, TypeVar

import numpy as np

from graphfeed.common.owners import group_by_owner
from graphfeed.graph_store.types import PartitionSet, RowsInto

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
    ``order`` and ``bounds[k]:bounds[k + 1]`` are chunk ``k``'s grouped positions.
    """

    def __init__(self, num_ids: int) -> None:
        self.num_ids = num_ids
        self.parts: list[tuple[int, np.ndarray, Future[T]]] = []

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
            return [fut.result() for _, _, fut in self.parts]
        finally:
            self.cancel()

    def cancel(self) -> None:
        """Cancels the requests not answered yet (ones that cannot be cancelled finish on their own
        deadline); a no-op once every request has answered."""
        for _, _, fut in self.parts:
            fut.cancel()


def fan_out_requests(
    partitions: PartitionSet, ids: np.ndarray, call: Callable[[Chunk], Future[T]], max_ids_per_request: int
) -> Pending[T]:
    """Starts ``call(chunk)`` for every chunk of ``ids`` grouped by owner, all before any is waited on.

    Args:
        partitions: the partition set whose ``node_offsets`` say who owns which id.
        ids: global ids, each ``>= 0``; any order, duplicates allowed.
        call: starts one request and returns its future (which raises what the request raised).
        max_ids_per_request: most ids in one request (>= 1).
    """
    if max_ids_per_request < 1:
        raise ValueError(f"max_ids_per_request must be >= 1, got {max_ids_per_request}")
    ids = np.asarray(ids, dtype=np.int64)
    pending: Pending[T] = Pending(len(ids))
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
    return pending


def merge_arrays(pending: Pending[np.ndarray], row_shape: Sequence[int], dtype: np.dtype | type) -> np.ndarray:
    """The answers of ``pending`` (one row per id of each chunk) in ids order; re-raises a
    failed request."""
    out = np.empty((pending.num_ids, *row_shape), dtype=dtype)
    for (_, pos, _), rows in zip(pending.parts, pending.results()):
        out[pos] = np.asarray(rows).reshape((len(pos), *row_shape))
    return out


class RowsRequest:
    """Rows of node-data ``name`` for ``ids``, requested from their owners at construction (all
    partitions before any is waited on); :meth:`wait` for them, or :meth:`cancel`.

    The rows land where ``into`` says (default: a new array, in ``ids`` order), each partition's
    answer put there by :meth:`PartitionSet.read_node_data`.

    Raises:
        KeyError: ``name`` is not a node-data name of ``partitions``.
    """

    def __init__(
        self,
        partitions: PartitionSet,
        name: str,
        ids: np.ndarray,
        max_ids_per_request: int,
        into: RowsInto | None = None,
    ) -> None:
        spec = partitions.info.node_data[name]
        ids = np.asarray(ids, dtype=np.int64)
        self.into = into if into is not None else RowsInto.new(len(ids), tuple(spec.row_shape), spec.dtype)
        dest = self.into

        def read(c: Chunk) -> Future[int]:
            return partitions.read_node_data(c.partition, name, c.ids, dest.at(c.positions))

        self._pending = fan_out_requests(partitions, ids, read, max_ids_per_request)

    def wait(self) -> tuple[np.ndarray, dict[int, int]]:
        """The destination array with the rows in place and the bytes delivered per partition;
        re-raises what a failed request raised, once no request is writing into it any more."""
        got: dict[int, int] = {}
        try:
            for (p, _, _), nbytes in zip(self._pending.parts, self._pending.results()):
                got[p] = got.get(p, 0) + int(nbytes)
        except BaseException:
            futures.wait([f for _, _, f in self._pending.parts])  # none still writes into the destination
            raise
        return self.into.out, got

    def cancel(self) -> None:
        """Cancels the requests not started yet (running ones finish on their own deadline)."""
        self._pending.cancel()


def fetch_rows(
    partitions: PartitionSet, name: str, ids: np.ndarray, max_ids_per_request: int, into: RowsInto | None = None
) -> tuple[np.ndarray, dict[int, int]]:
    """Fetches the rows of node-data ``name`` for ``ids`` from their owners where ``into`` says
    (default: a new array in ids order) and waits for them: ``(the array, bytes delivered per
    partition)``. See :class:`RowsRequest`."""
    return RowsRequest(partitions, name, ids, max_ids_per_request, into).wait()
