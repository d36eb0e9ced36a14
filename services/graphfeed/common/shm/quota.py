"""Writer side: how much of a shared directory one client may hold unclaimed, and the room kept
free for everyone."""

from __future__ import annotations

import logging
import os
import threading
from collections.abc import Callable
from pathlib import Path

from graphfeed.common.errors import ResourceExhausted
from graphfeed.common.shm.pool import SegmentPool
from graphfeed.common.shm.registry import SegmentRegistry
from graphfeed.common.shm.segment import Arena, Segment

log = logging.getLogger(__package__)

QUOTA = "quota"  # the client holds too much unclaimed
FULL = "full"  # the directory is nearly full


class ShmQuota:
    """Decides, per response or minibatch, whether shared memory may carry it for a client.

    A client that asks and never claims what it was sent (a stuck or hostile one; a dead one is
    reclaimed through owner locks) would otherwise fill the tmpfs. Then every other client's
    next segment fails with RESOURCE_EXHAUSTED. Over its quota, or while the directory is
    nearly full, a client's bytes travel inline instead: slower, never failing, and never taking
    room from other clients. A client is one offer (one probe: one process and directory).
    Thread-safe: :meth:`create` checks and creates under the client's lock, so concurrent
    messages to one client cannot all pass the check before any of them counts.

    Args:
        directory: the shared directory (its size sets the defaults).
        registry: where segments are recorded with their client.
        client_bytes: unclaimed bytes one client may hold before its next segment is refused
            (0: a quarter of the directory's size). A client with nothing unclaimed is never
            refused for its quota, however large the one message.
        client_segments: unclaimed segments one client may hold.
        reserve_bytes: free room kept: a segment that would leave less is refused unless a
            handed-back pool file takes it (None: 1/16 of the directory's size, at most 64 MiB).
        on_decline: called with the reason (:data:`QUOTA` or :data:`FULL`) of each refusal.
        statvfs: ``os.statvfs`` (tests pass a fake).
    """

    def __init__(
        self,
        directory: Path,
        registry: SegmentRegistry,
        client_bytes: int = 0,
        client_segments: int = 256,
        reserve_bytes: int | None = None,
        on_decline: Callable[[str], None] | None = None,
        statvfs: Callable[[Path], os.statvfs_result] = os.statvfs,
    ) -> None:
        st = statvfs(directory)
        size = st.f_blocks * st.f_frsize
        self.directory = Path(directory)
        self.client_bytes = client_bytes or size // 4
        self.client_segments = client_segments
        self.reserve_bytes = min(size // 16, 64 << 20) if reserve_bytes is None else reserve_bytes
        self._registry = registry
        self._on_decline = on_decline
        self._statvfs = statvfs
        self._lock = threading.Lock()
        self._logged: set[tuple[str, str]] = set()
        self._client_locks = [threading.Lock() for _ in range(64)]  # striped by client

    def create(self, arena: Arena) -> Segment | None:
        """``arena.finish()`` when shared memory may carry the arena for its client and the
        directory has room; None (nothing created, the refusal counted) when not: the caller
        sends the arena's arrays inline."""
        with self._client_locks[hash(arena.client) % len(self._client_locks)]:
            if self.decline(arena.client, arena.nbytes, arena.pool) is not None:
                return None
            try:
                return arena.finish()
            except ResourceExhausted as exc:  # room taken since the check, by another writer
                self.refused(arena.client, FULL, str(exc))
                return None

    def decline(self, client: str, nbytes: int = 0, pool: SegmentPool | None = None) -> str | None:
        """Why shared memory may not carry ``nbytes`` more for ``client`` (:data:`QUOTA` or
        :data:`FULL`), or None when it may. ``nbytes`` 0: the size is not known yet (a unary
        response decides before its core runs). ``pool``: where the segment would come from."""
        segments, held = self._registry.unclaimed(client)
        if segments and (segments >= self.client_segments or held + nbytes > self.client_bytes):
            return self.refused(
                client,
                QUOTA,
                f"holds {segments} unclaimed segments ({held} bytes; quota "
                f"{self.client_segments} segments, {self.client_bytes} bytes)",
            )
        st = self._statvfs(self.directory)
        free = st.f_bavail * st.f_frsize
        if free - nbytes < self.reserve_bytes and not (pool is not None and pool.reusable(nbytes)):
            return self.refused(client, FULL, f"{self.directory} has {free} bytes free (reserve {self.reserve_bytes})")
        return None

    def refused(self, client: str, reason: str, detail: str) -> str:
        """Records that ``client`` was refused shared memory for ``reason`` (counted; logged
        once per client and reason); returns ``reason``."""
        if self._on_decline is not None:
            self._on_decline(reason)
        with self._lock:
            first = (client, reason) not in self._logged and len(self._logged) < 4096
            if first:
                self._logged.add((client, reason))
        if first:
            log.warning("shared memory refused to client %s (%s), sending its bytes inline: %s", client, reason, detail)
        return reason
