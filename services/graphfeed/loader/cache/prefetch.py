"""Background prefetch of feature rows for the cache policies.

Rows are read from their owners by :func:`graphfeed.graph_store.fanout.fetch_rows`.
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

import numpy as np

from graphfeed.common.limits import FETCH_IDS_PER_CALL
from graphfeed.graph_store.fanout import fetch_rows
from graphfeed.graph_store.types import PartitionSet

log = logging.getLogger(__name__)

RowsFetcher = Callable[[np.ndarray], np.ndarray]
"""``fetch(ids) -> rows`` in ``ids`` order; raises what the graph-stores raised."""


def node_data_fetcher(
    partitions: PartitionSet, name: str, max_ids_per_request: int = FETCH_IDS_PER_CALL
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
