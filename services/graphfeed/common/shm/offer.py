"""The offer handshake: a client's probe file (:class:`ShmOffer`) proves to a server
(:class:`OfferVerifier`) that both see the same directory before shared memory is used."""

from __future__ import annotations

import atexit
import hmac
import logging
import os
import secrets
import stat
import threading
from collections.abc import Iterable, Sequence
from pathlib import Path
from typing import Protocol, runtime_checkable

from graphfeed.common.errors import FailedPrecondition
from graphfeed.common.shm.files import DEFAULT_DIR, METADATA_KEY, PROBE_PREFIX, PROBE_RE, try_unlink
from graphfeed.common.shm.owner_locks import owner_token

log = logging.getLogger(__package__)


class ShmOffer:
    """Client side: a probe file that proves to a server that both see the same directory."""

    def __init__(self, directory: Path, probe: str, token: str) -> None:
        self.directory = directory
        self.probe = probe
        self._token = token
        self._pid = os.getpid()
        self._closed = False
        atexit.register(self.close)

    @classmethod
    def create(cls, directory: Path = DEFAULT_DIR) -> ShmOffer | None:
        """Writes a probe file; None (debug log) if ``directory`` is missing or not writable."""
        directory = Path(directory).absolute()
        if not directory.is_dir() or not os.access(directory, os.W_OK | os.X_OK):
            log.debug("no shared-memory transport: %s is not a writable directory", directory)
            return None
        token = secrets.token_hex(8)
        try:
            probe = f"{PROBE_PREFIX}{owner_token(directory)}-{token}"  # swept with its owner if this process is killed
        except FailedPrecondition as e:
            log.debug("no shared-memory transport: %s", e)
            return None
        try:
            fd = os.open(directory / probe, os.O_CREAT | os.O_EXCL | os.O_WRONLY, 0o600)
            try:
                os.write(fd, token.encode())
            finally:
                os.close(fd)
        except OSError as e:
            log.debug("no shared-memory transport: cannot write a probe in %s: %s", directory, e)
            return None
        return cls(directory, probe, token)

    def metadata(self) -> tuple[tuple[str, str], ...]:
        """The gRPC metadata that carries the offer."""
        return ((METADATA_KEY, f"{self.directory}|{self.probe}|{self._token}"),)

    def close(self) -> None:
        """Removes the probe file now (only in the process that wrote it); idempotent."""
        if self._closed or os.getpid() != self._pid:
            return
        self._closed = True
        try_unlink(self.directory / self.probe)


_offers: dict[tuple[Path, int], ShmOffer | None] = {}
_offers_lock = threading.Lock()


def shared_offer(directory: Path = DEFAULT_DIR) -> ShmOffer | None:
    """The process-wide :class:`ShmOffer` for ``directory`` (one probe file per process and directory)."""
    key = (Path(directory), os.getpid())  # a forked child writes its own probe
    with _offers_lock:
        if key not in _offers:
            _offers[key] = ShmOffer.create(key[0])
        return _offers[key]


@runtime_checkable
class _Metadatum(Protocol):
    """One entry of ``ServicerContext.invocation_metadata()``: gRPC's objects carry these attributes."""

    key: object
    value: object


def _key_value(item: object) -> tuple[object, object]:
    """(key, value) of one metadata entry: a gRPC metadatum or a plain pair; TypeError for anything else."""
    if isinstance(item, _Metadatum):
        return item.key, item.value
    if not isinstance(item, Iterable):
        raise TypeError(f"metadata entry {item!r} is neither a (key, value) pair nor a gRPC metadatum")
    key, val = item
    return key, val


class OfferVerifier:
    """Server side: accepts a client's offer only for an allowed directory whose probe it can read."""

    _MAX_REMEMBERED = 4096

    def __init__(self, allowed_dirs: Sequence[Path]) -> None:
        self.allowed_dirs = frozenset(Path(d).resolve() for d in allowed_dirs)
        self._lock = threading.Lock()
        self._verified: dict[str, tuple[Path, str]] = {}  # offer value -> (resolved directory, probe)
        self._logged: set[str] = set()

    def accept(self, metadata: Iterable[object] | None) -> Path | None:
        """The directory to put segments in for this call, or None to send bytes inline. Never raises.

        Args:
            metadata: (key, value) pairs as from ``ServicerContext.invocation_metadata()``
                (objects with ``.key``/``.value``, or 2-tuples).
        """
        verified = self.verify(metadata)
        return verified[0] if verified is not None else None

    def verify(self, metadata: Iterable[object] | None) -> tuple[Path, str] | None:
        """Like :meth:`accept`, with the client: ``(directory, probe name)``. The probe names one
        offer (one client process and directory), which is what per-client quotas count by."""
        if not self.allowed_dirs or not metadata:
            return None
        try:
            value = None
            for item in metadata:
                key, val = _key_value(item)
                if key == METADATA_KEY:
                    value = val.decode() if isinstance(val, bytes) else str(val)
                    break
            if value is None:
                return None
            with self._lock:
                hit = self._verified.get(value)
            if hit is not None:
                return hit
            directory, reason = self._check(value)
        except Exception as e:  # noqa: BLE001 - bad metadata must never fail a call
            directory, value, reason = None, repr(metadata)[:200], f"unreadable offer ({e})"
        verified = None if directory is None else (directory, value.rsplit("|", 2)[1])
        with self._lock:
            if verified is not None:
                if len(self._verified) >= self._MAX_REMEMBERED:
                    self._verified.clear()
                self._verified[value] = verified
            elif value not in self._logged and len(self._logged) < self._MAX_REMEMBERED:
                self._logged.add(value)
                log.info("client's shared-memory offer declined, sending bytes inline: %s", reason)
        return verified

    def _check(self, value: str) -> tuple[Path | None, str]:
        parts = value.rsplit("|", 2)
        if len(parts) != 3:
            return None, f"malformed offer {value[:200]!r}"
        dir_s, probe, token = parts
        if not os.path.isabs(dir_s):
            return None, f"offered directory {dir_s!r} is not absolute"
        directory = Path(dir_s).resolve()
        if directory not in self.allowed_dirs:
            return None, f"directory {directory} is not one of {sorted(map(str, self.allowed_dirs))}"
        if not PROBE_RE.match(probe):
            return None, f"malformed probe name {probe[:100]!r}"
        try:
            fd = os.open(directory / probe, os.O_RDONLY | os.O_NOFOLLOW | os.O_NONBLOCK)
        except OSError as e:
            return None, f"probe {directory / probe} not readable here ({e.strerror}): another host or mount?"
        try:
            st = os.fstat(fd)
            if not stat.S_ISREG(st.st_mode) or st.st_uid != os.geteuid():
                return None, f"probe {directory / probe} is not a regular file of this server's user"
            content = os.read(fd, 64)
        finally:
            os.close(fd)
        if not hmac.compare_digest(content, token.encode()):
            return None, f"probe {directory / probe} does not hold the offered token"
        return directory, ""
