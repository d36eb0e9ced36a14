"""Writer-side bookkeeping: segments nobody claims are removed, or handed back to their pool."""

from __future__ import annotations

import os
import threading
import time
from collections.abc import Callable
from pathlib import Path

from graphfeed.common.shm.files import FREE_SUFFIX, suffixed, try_rename, try_unlink


class SegmentRegistry:
    """Writer-side bookkeeping so that unclaimed segments never leak. Thread-safe.

    A segment of owner None may be swept ``ttl_s`` after creation; one of a live owner never,
    until :meth:`release` (then ``ttl_s`` after the release). A segment added with a ``client``
    counts toward what that client holds unclaimed (:meth:`unclaimed`) until it is claimed
    (its name is gone), swept or dropped: what :class:`~graphfeed.common.shm.quota.ShmQuota`
    bounds.
    """

    def __init__(self, ttl_s: float = 300.0, clock: Callable[[], float] = time.monotonic) -> None:
        self.ttl_s = ttl_s
        self._clock = clock
        self._lock = threading.Lock()
        # id(owner) -> (owner, {path: deadline or None while the owner is live})
        self._groups: dict[int, tuple[object, dict[Path, float | None]]] = {}
        self._recycled: set[Path] = set()
        self._clients: dict[str, dict[Path, int]] = {}  # client -> {unclaimed path: bytes}
        self._client_of: dict[Path, str] = {}
        self._last_sweep = clock()

    def _expire(self, path: Path) -> bool:
        if path in self._recycled:
            self._recycled.discard(path)
            return try_rename(path, suffixed(path, FREE_SUFFIX))
        return try_unlink(path)

    def _forget(self, paths: dict[Path, float | None], path: Path) -> None:
        del paths[path]
        self._recycled.discard(path)
        self._unheld(path)

    def add(self, path: Path, owner: object = None, recycle: bool = False, client: str = "", nbytes: int = 0) -> None:
        """Records a new segment file of ``owner``; a ``recycle`` one (from a :class:`SegmentPool`)
        expires by going back to its pool (renamed ``.free``) instead of being unlinked. With a
        ``client`` its ``nbytes`` count toward that client's :meth:`unclaimed` bytes."""
        with self._lock:
            now = self._clock()
            group = self._groups.setdefault(id(owner), (owner, {}))[1]
            group[Path(path)] = now + self.ttl_s if owner is None else None
            if recycle:
                self._recycled.add(Path(path))
            if client:
                self._clients.setdefault(client, {})[Path(path)] = nbytes
                self._client_of[Path(path)] = client
            if now - self._last_sweep >= 1.0:
                self._sweep_locked(now)

    def unclaimed(self, client: str) -> tuple[int, int]:
        """(segments, bytes) that ``client`` has been sent and not yet claimed (files still
        under the name they were sent with)."""
        with self._lock:
            for path in [p for p in self._clients.get(client, ()) if not os.path.lexists(p)]:
                self._unheld(path)
            held = self._clients.get(client, {})
            return len(held), sum(held.values())

    def _unheld(self, path: Path) -> None:
        """``path`` no longer counts toward its client (claimed, swept or dropped); under the lock."""
        client = self._client_of.pop(path, None)
        if client is not None:
            held = self._clients[client]
            del held[path]
            if not held:
                del self._clients[client]

    def outstanding(self, owner: object) -> int:
        """How many segments of ``owner`` are still unclaimed (their file exists)."""
        with self._lock:
            entry = self._groups.get(id(owner))
            if entry is None:
                return 0
            paths = entry[1]
            for path in [p for p in paths if not os.path.lexists(p)]:
                self._forget(paths, path)
            if not paths:
                del self._groups[id(owner)]
            return len(paths)

    def release(self, owner: object) -> None:
        """The owner is done: its unclaimed segments become sweepable ``ttl_s`` from now."""
        with self._lock:
            entry = self._groups.get(id(owner))
            if entry is not None and owner is not None:
                deadline = self._clock() + self.ttl_s
                for path in entry[1]:
                    entry[1][path] = deadline

    def drop(self, owner: object) -> int:
        """Unlinks (or hands back to their pool) the owner's unclaimed segments now (its reader
        is gone, e.g. a cancelled stream); returns the count."""
        with self._lock:
            entry = self._groups.pop(id(owner), None)
            if entry is None:
                return 0
            for path in entry[1]:
                self._unheld(path)
            return sum(self._expire(path) for path in entry[1])

    def sweep(self) -> int:
        """Unlinks unclaimed segments past their deadline, forgets claimed ones; returns the count unlinked."""
        with self._lock:
            return self._sweep_locked(self._clock())

    def _sweep_locked(self, now: float) -> int:
        self._last_sweep = now
        unlinked = 0
        for key, (_, paths) in list(self._groups.items()):
            for path, deadline in list(paths.items()):
                if deadline is not None and now >= deadline:
                    unlinked += self._expire(path)
                    self._forget(paths, path)
                elif not os.path.lexists(path):
                    self._forget(paths, path)
            if not paths:
                del self._groups[key]
        return unlinked

    def close(self) -> None:
        """Unlinks every segment still unclaimed (server shutdown)."""
        with self._lock:
            groups, self._groups = self._groups, {}
            self._recycled.clear()
            self._clients.clear()
            self._client_of.clear()
        for _, paths in groups.values():
            for path in paths:
                try_unlink(path)
