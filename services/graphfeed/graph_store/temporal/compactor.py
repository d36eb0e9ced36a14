"""The background thread that compacts a temporal store while appends go on.

:class:`Compactor` runs a job (the store's compaction round) on its own thread each time it is
woken. It shares the store's condition variable, so waking it, waiting for it (an append's
back-pressure) and stopping it are all decided under the store's append lock, and every change
of state is broadcast on that condition. A failing job is not logged and dropped: the error is
kept in :attr:`Compactor.error`, the thread stops, and the store refuses appends with it.
"""

from __future__ import annotations

import logging
import threading
from collections.abc import Callable

log = logging.getLogger(__name__)


class Compactor:
    """Runs ``job`` on a daemon thread once per :meth:`wake` (wakes while it runs coalesce into one more run).

    Args:
        cond: the store's condition; its lock guards every attribute here.
        job: one compaction round; called without the lock held.
        name: the thread's name.
    """

    def __init__(self, cond: threading.Condition, job: Callable[[], None], name: str) -> None:
        self._cond, self._job = cond, job
        self._wanted = False
        self._running = False
        self._stopping = False
        self.error: BaseException | None = None  # the job's failure; the thread has stopped
        self._thread = threading.Thread(target=self._loop, name=name, daemon=True)
        self._thread.start()

    @property
    def busy(self) -> bool:
        """A round is running or due (lock held): whoever waits on the condition will be notified."""
        return (self._running or self._wanted) and self.error is None and not self._stopping

    def wake(self) -> None:
        """Asks for a round (lock held); cheap when one is already due."""
        if not self._wanted:
            self._wanted = True
            self._cond.notify_all()

    def stop(self, timeout_s: float = 600.0) -> None:
        """Lets a running round finish, then ends the thread (lock NOT held). Idempotent."""
        with self._cond:
            self._stopping = True
            self._cond.notify_all()
        self._thread.join(timeout_s)
        if self._thread.is_alive():
            log.warning(
                "%s: a compaction round still runs after %.0f s; leaving it behind", self._thread.name, timeout_s
            )

    def _loop(self) -> None:
        while True:
            with self._cond:
                self._cond.wait_for(lambda: self._wanted or self._stopping)
                if self._stopping:
                    return
                self._wanted, self._running = False, True
            try:
                self._job()
            except BaseException as exc:  # noqa: BLE001 - kept for the appenders, who raise it
                with self._cond:
                    self.error = exc
                    self._running = False
                    self._cond.notify_all()
                return
            with self._cond:
                self._running = False
                self._cond.notify_all()
