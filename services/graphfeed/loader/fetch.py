"""Fetching feature rows from their owners: the fan-out of one request, and background prefetch.

:func:`fetch_rows` (and :class:`RowsRequest`, to wait later) fans one node-data request out to
the owners (:func:`graphfeed.graph_store.fanout.fan_out`) and merges the rows in id order.
:class:`Prefetcher` runs row fetches for a cache policy off the minibatch path: in a worker
thread (the loader) or when told to (``manual=True``: replays and tests, deterministic). A
failed prefetch is logged and reported to the policy, whose slots simply stay empty: the rows
become ordinary misses and are fetched with the minibatch that needs them.
"""

from __future__ import annotations

import contextlib
import logging
import threading
from collections import deque
from collections.abc import Callable
from concurrent import futures

import numpy as np

from graphfeed.common.limits import FETCH_IDS_PER_CALL
from graphfeed.graph_store.fanout import fan_out
from graphfeed.graph_store.types import PartitionSet, ReadsNodeDataInto

log = logging.getLogger(__name__)

DEFAULT_MAX_IDS_PER_REQUEST = FETCH_IDS_PER_CALL  # the one value: graphfeed.common.limits

RowsFetcher = Callable[[np.ndarray], np.ndarray]
"""``fetch(ids) -> rows`` in ``ids`` order; raises what the graph-stores raised."""


class RowsRequest:
    """Rows of node-data ``name`` for ``ids``, requested from their owners at construction (all
    partitions before any is waited on); :meth:`wait` for them, or :meth:`cancel`.

    The rows land in ``out[at]`` (default: a new array, in ``ids`` order). Over gRPC each
    answer's rows are written there as they arrive (one copy from the message); other
    partition sets hand back rows, which are then put in place.

    Raises:
        KeyError: ``name`` is not a node-data name of ``partitions``.
    """

    def __init__(
        self,
        partitions: PartitionSet,
        name: str,
        ids: np.ndarray,
        max_ids_per_request: int = DEFAULT_MAX_IDS_PER_REQUEST,
        out: np.ndarray | None = None,
        at: np.ndarray | None = None,
    ) -> None:
        spec = partitions.info.node_data[name]
        self.row_shape, self.dtype = tuple(spec.row_shape), np.dtype(spec.dtype)
        self._out, self._at = out, at
        self._dest: np.ndarray | None = None  # where the owners' answers are written as they arrive
        if isinstance(partitions, ReadsNodeDataInto):
            dest = self._dest = np.empty((len(ids), *self.row_shape), dtype=self.dtype) if out is None else out
            into = lambda p, chunk, pos: partitions.read_node_data_into(  # noqa: E731
                p, name, chunk, dest, pos if at is None else at[pos]
            )
            self._pending = fan_out(partitions, ids, into, max_ids_per_request, with_positions=True)
        else:
            call = lambda p, chunk: partitions.get_node_data(p, name, chunk)  # noqa: E731
            self._pending = fan_out(partitions, ids, call, max_ids_per_request)

    def wait(self) -> tuple[np.ndarray, dict[int, int]]:
        """``out`` with the rows in place and the bytes received per partition; re-raises what a
        failed request raised, once no request is writing into ``out`` any more."""
        if self._dest is None:
            rows, by_part = self._pending.wait(self.row_shape, self.dtype)
            if self._out is None:
                return rows, by_part
            self._out[self._at if self._at is not None else slice(None)] = rows
            return self._out, by_part
        got: dict[int, int] = {}
        try:
            for p, nbytes in zip([p for p, _, _ in self._pending.parts], self._pending.results()):
                got[p] = got.get(p, 0) + int(nbytes)
        except BaseException:
            futures.wait([f for _, _, f in self._pending.parts if f is not None])  # none still writes into out
            raise
        return self._dest, got

    def cancel(self) -> None:
        """Cancels the requests not started yet (running ones finish on their own deadline)."""
        self._pending.cancel()


def fetch_rows(
    partitions: PartitionSet,
    name: str,
    ids: np.ndarray,
    max_ids_per_request: int = DEFAULT_MAX_IDS_PER_REQUEST,
    out: np.ndarray | None = None,
    at: np.ndarray | None = None,
) -> tuple[np.ndarray, dict[int, int]]:
    """Fetches the rows of node-data ``name`` for ``ids`` from their owners into ``out[at]``
    (default: a new array in ids order) and waits for them: ``(out, bytes received per
    partition)``. See :class:`RowsRequest`."""
    return RowsRequest(partitions, name, ids, max_ids_per_request, out, at).wait()


def node_data_fetcher(
    partitions: PartitionSet, name: str, max_ids_per_request: int = DEFAULT_MAX_IDS_PER_REQUEST
) -> RowsFetcher:
    """``fetch(ids)``: the rows of node-data ``name`` for ``ids``, from their owners.

    Raises:
        KeyError: ``name`` is not a node-data name (now, rather than in every prefetch).
    """
    partitions.info.node_data[name]
    return lambda ids: fetch_rows(partitions, name, ids, max_ids_per_request)[0]


OnRows = Callable[[np.ndarray, np.ndarray], None]
OnFailed = Callable[[np.ndarray, BaseException], None]


class Prefetcher:
    """Runs ``fetch(ids)`` off the minibatch path and hands the rows to a policy callback.

    Callbacks run with ``lock`` held (the lock that serialises the cache), the fetch without
    it, so a minibatch never waits on a prefetch. At most ``max_pending`` prefetches are queued
    or running; :meth:`submit` refuses more (the policy retries later or lets them miss), so a
    slow graph-store cannot pile up memory.

    Args:
        fetch: fetches rows in ``ids`` order.
        lock: held while a callback runs; None for single-threaded use.
        manual: if True, prefetches run only in :meth:`run_pending` (deterministic replay/tests);
            otherwise in a daemon worker thread named ``loader-prefetch``.
        max_pending: prefetches queued or running at once (>= 1).
    """

    def __init__(
        self,
        fetch: RowsFetcher,
        lock: threading.Lock | threading.RLock | None = None,
        *,
        manual: bool = False,
        max_pending: int = 2,
    ) -> None:
        self._fetch = fetch
        self._lock = lock if lock is not None else contextlib.nullcontext()
        self._manual = manual
        self._max_pending = max(1, int(max_pending))
        self._queue: deque[tuple[np.ndarray, OnRows, OnFailed]] = deque()
        self._cond = threading.Condition()
        self._running = 0
        self._closed = False
        self._thread: threading.Thread | None = None

    @property
    def pending(self) -> int:
        """Prefetches queued or running."""
        with self._cond:
            return len(self._queue) + self._running

    def submit(self, ids: np.ndarray, on_rows: OnRows, on_failed: OnFailed) -> bool:
        """Queues a prefetch of ``ids``; False (nothing queued) when full or closed."""
        with self._cond:
            if self._closed or len(self._queue) + self._running >= self._max_pending:
                return False
            self._queue.append((np.asarray(ids, dtype=np.int64), on_rows, on_failed))
            if not self._manual and self._thread is None:
                self._thread = threading.Thread(target=self._work, name="loader-prefetch", daemon=True)
                self._thread.start()
            self._cond.notify_all()
            return True

    def run_pending(self) -> int:
        """Manual mode: runs every queued prefetch now, in order; returns how many ran."""
        done = 0
        while True:
            with self._cond:
                if not self._queue:
                    return done
                task = self._queue.popleft()
                self._running += 1
            self._run(task)
            done += 1

    def wait_idle(self, timeout_s: float = 30.0) -> bool:
        """Thread mode: waits until nothing is queued or running; False on timeout."""
        with self._cond:
            return self._cond.wait_for(lambda: not self._queue and not self._running, timeout_s)

    def close(self) -> None:
        """Drops queued prefetches; a running one finishes and its rows are still delivered."""
        with self._cond:
            self._closed = True
            self._queue.clear()
            self._cond.notify_all()

    def _work(self) -> None:
        while True:
            with self._cond:
                self._cond.wait_for(lambda: self._closed or self._queue)
                if not self._queue:
                    return
                task = self._queue.popleft()
                self._running += 1
            self._run(task)

    def _run(self, task: tuple[np.ndarray, OnRows, OnFailed]) -> None:
        ids, on_rows, on_failed = task
        try:
            try:
                rows = self._fetch(ids)
            except Exception as exc:  # noqa: BLE001 - a failed prefetch only costs misses
                log.warning("prefetch of %d rows failed, they stay misses: %s", len(ids), exc)
                with self._lock:
                    on_failed(ids, exc)
                return
            with self._lock:
                on_rows(ids, rows)
        except Exception:
            log.exception("prefetch callback failed")
        finally:
            with self._cond:
                self._running -= 1
                self._cond.notify_all()
