"""The bulk plane: large answers' bulk bytes over a plain TCP (or TLS) stream beside gRPC.

Python gRPC costs a process several times what a plain socket does per byte it sends or
receives (on the 2-core dev machine ~0.5 CPU-s per GB to send and ~1.2 to receive, against
~0.2 for ``socket.sendall`` + ``recv_into`` together), and the feature rows of one minibatch are
100-400 MB. So where a client has offered it, a server answers a large message with its control
fields over gRPC and a *ticket* for the bulk bytes, which the client then reads from the
server's plane port straight into a pooled buffer (the protocol: "Bulk plane" in
``proto/graphfeed/common/v1/tensor.proto``).

Everything else stays gRPC's: the call is authenticated, validated, counted and answered with
its status there; the plane only moves bytes the call produced. A ticket is 16 random bytes,
single-use, sent only to the caller (over TLS when the channel is TLS) and forgotten after
``ttl_s``. A server parks at most ``max_parked_bytes`` at once (``max_client_bytes`` for one
client host); beyond that its answers go inline as before, as they do for a client that made no
offer (another graphfeed version, grpcurl); a stream parks at most as many messages as it may
leave unclaimed in shared memory (:class:`~graphfeed.common.shm.Backpressure`). A client that
cannot reach the plane port (a firewall, a NetworkPolicy without the port) stops offering it to
that server for a while (30 s, doubling to 10 min) and the failed call raises UNAVAILABLE, which
callers retry like any lost connection.

- :class:`BulkPlane`: a server's listener and parked answers.
- :class:`PlaneClient`: one client's pooled connections to one server's plane.
"""

from __future__ import annotations

import contextlib
import logging
import secrets
import socket
import ssl
import struct
import threading
import time
from collections.abc import Callable, Sequence

import numpy as np

from graphfeed.common.buffers import BufferPool
from graphfeed.common.errors import Unavailable
from graphfeed.common.recv_rows import recv_exact

log = logging.getLogger(__name__)

OFFER_KEY = "graphfeed-bulk-plane"  # gRPC metadata of a client that can read answers from the plane
TICKET_BYTES = 16
MIN_BYTES = 256 << 10  # smaller answers go inline: a plane read costs a round trip
_LENGTH = struct.Struct("<q")
_CONNECT_TIMEOUT_S = 10.0
_IO_TIMEOUT_S = 60.0  # a read that makes no progress this long fails (the server is gone)
_FIRST_BACKOFF_S, _MAX_BACKOFF_S = 30.0, 600.0  # no offers this long after the plane could not be reached


class BulkPlane:
    """A server's bulk plane: a TCP listener (a thread per connection) and the parked answers.

    Args:
        host: bind address (the gRPC server's).
        port: TCP port; 0 picks a free one (:attr:`port` has the bound one).
        tls: server-side TLS context (the gRPC port's certificate); None: plaintext.
        ttl_s: seconds a parked answer waits for its reader.
        max_parked_bytes: bytes parked at once; :meth:`park` refuses beyond (the answer goes
            inline, where gRPC's flow control bounds what waits for a slow reader).
        max_client_bytes: bytes parked at once for one client (its host): one that asks and never
            reads cannot take the plane from the others.
        max_connections: connections served at once; more are closed at once.
        advertise: the address clients connect to (put in every ticket; e.g. the pod IP);
            empty: the host each client dialed for gRPC.
        keep_buffers: freed answer buffers kept for reuse (0: none, for a process held to a budget).
    """

    def __init__(
        self,
        host: str,
        port: int = 0,
        tls: ssl.SSLContext | None = None,
        ttl_s: float = 60.0,
        max_parked_bytes: int = 1 << 30,
        max_client_bytes: int = 512 << 20,
        max_connections: int = 256,
        advertise: str = "",
        keep_buffers: int = 2,
    ) -> None:
        family = socket.AF_INET6 if ":" in host.strip("[]") else socket.AF_INET
        self._listener = socket.create_server((host.strip("[]"), port), family=family, backlog=128)
        self.port = int(self._listener.getsockname()[1])
        self.advertise = advertise
        self.tls = tls
        self.ttl_s = ttl_s
        self.max_parked_bytes = max_parked_bytes
        self.max_client_bytes = max_client_bytes
        self.max_connections = max_connections
        # Where answers are built before they are parked; few freed ones are kept: they are large.
        self.buffers = BufferPool(max_buffers=keep_buffers)
        self._parked: dict[bytes, tuple[float, Sequence[memoryview | bytes], int, str]] = {}
        self._parked_bytes = 0
        self._client_bytes: dict[str, int] = {}
        self._lock = threading.Lock()
        self._connections: set[socket.socket] = set()
        self._closed = False
        threading.Thread(target=self._accept, name=f"bulk-plane-{self.port}", daemon=True).start()

    @property
    def parked_bytes(self) -> int:
        """Bytes parked and not yet read."""
        with self._lock:
            return self._parked_bytes

    def park(self, parts: Sequence[memoryview | bytes], nbytes: int, client: str = "") -> bytes | None:
        """Keeps ``parts`` (``nbytes`` in all; the views keep their arrays alive) for one reader;
        returns its ticket, or None when this plane, or ``client``'s share of it, holds too
        much already (send inline)."""
        now = time.monotonic()
        with self._lock:
            if not self._room(nbytes, client, now):
                return None
            ticket = secrets.token_bytes(TICKET_BYTES)
            self._parked[ticket] = (now + self.ttl_s, parts, nbytes, client)
            self._parked_bytes += nbytes
            self._client_bytes[client] = self._client_bytes.get(client, 0) + nbytes
        return ticket

    def fits(self, nbytes: int, client: str = "") -> bool:
        """Whether :meth:`park` would take ``nbytes`` for ``client`` now (build an answer for
        the plane only then: one that it refuses goes inline after all)."""
        with self._lock:
            return self._room(nbytes, client, time.monotonic())

    def _room(self, nbytes: int, client: str, now: float) -> bool:
        """Under the lock: whether ``nbytes`` more for ``client`` stay within both bounds."""
        self._expire(now)
        if self._closed or self._parked_bytes + nbytes > self.max_parked_bytes:
            return False
        return self._client_bytes.get(client, 0) + nbytes <= self.max_client_bytes

    def holds(self, ticket: bytes) -> bool:
        """Whether ``ticket``'s answer is still parked (not read, not expired)."""
        with self._lock:
            return ticket in self._parked

    def drop(self, tickets: Sequence[bytes]) -> None:
        """Forgets the answers of ``tickets`` still parked (their call was cancelled)."""
        with self._lock:
            for ticket in tickets:
                self._pop(ticket)

    def _take(self, ticket: bytes) -> tuple[Sequence[memoryview | bytes], int] | None:
        with self._lock:
            entry = self._pop(ticket)
        if entry is None or entry[0] < time.monotonic():
            return None
        return entry[1], entry[2]

    def _pop(self, ticket: bytes) -> tuple[float, Sequence[memoryview | bytes], int, str] | None:
        entry = self._parked.pop(ticket, None)
        if entry is not None:
            self._parked_bytes -= entry[2]
            left = self._client_bytes[entry[3]] - entry[2]
            if left:
                self._client_bytes[entry[3]] = left
            else:
                del self._client_bytes[entry[3]]
        return entry

    def _expire(self, now: float) -> None:
        for ticket in [t for t, entry in self._parked.items() if entry[0] < now]:
            self._pop(ticket)

    def _accept(self) -> None:
        while True:
            try:
                conn, _ = self._listener.accept()
            except OSError:
                return  # closed
            with self._lock:
                full = len(self._connections) >= self.max_connections or self._closed
                if not full:
                    self._connections.add(conn)
            if full:
                conn.close()
                continue
            threading.Thread(target=self._serve, args=(conn,), name="bulk-plane-conn", daemon=True).start()

    def _serve(self, conn: socket.socket) -> None:
        sock: socket.socket = conn
        try:
            conn.setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)
            conn.settimeout(_IO_TIMEOUT_S)
            if self.tls is not None:
                sock = self.tls.wrap_socket(conn, server_side=True)
            ticket = bytearray(TICKET_BYTES)
            while True:
                try:
                    recv_exact(sock, memoryview(ticket))
                except (ConnectionError, TimeoutError):
                    return  # the client closed its idle connection (or went away)
                entry = self._take(bytes(ticket))
                if entry is None:
                    sock.sendall(_LENGTH.pack(-1))
                    continue
                parts, nbytes = entry
                sock.sendall(_LENGTH.pack(nbytes))
                for part in parts:
                    sock.sendall(part)
                del parts, entry  # the answer's arrays go back to their pools now
        except (OSError, ssl.SSLError) as exc:
            log.debug("bulk plane connection ended: %s", exc)
        finally:
            with self._lock:
                self._connections.discard(conn)
            sock.close()

    def close(self) -> None:
        """Stops listening, drops what is parked and closes every connection."""
        with self._lock:
            self._closed = True
            self._parked.clear()
            self._client_bytes.clear()
            self._parked_bytes = 0
            conns, self._connections = list(self._connections), set()
        with contextlib.suppress(OSError):
            self._listener.shutdown(socket.SHUT_RDWR)  # wakes the accept() blocked in its thread (close alone does not)
        self._listener.close()
        for conn in conns:
            with contextlib.suppress(OSError):
                conn.shutdown(socket.SHUT_RDWR)
            conn.close()


def peer_host(peer: str) -> str:
    """The host of a gRPC peer string (``ipv4:10.0.0.5:41234``, ``ipv6:[::1]:5000``, ``unix:...``)."""
    kind, _, rest = peer.partition(":")
    return split_host(rest) if kind in ("ipv4", "ipv6") else peer


def split_host(address: str) -> str:
    """The host part of ``host:port`` (``[v6]:port`` too), as a socket wants it."""
    host = address.rsplit(":", 1)[0] if ":" in address else address
    return host.strip("[]")


RESOLVER_SCHEMES = ("dns:", "ipv4:", "ipv6:", "unix:", "unix-abstract:", "vsock:", "xds:")


def plane_target(address: str) -> tuple[str, bool]:
    """``(name, direct)`` for a gRPC target: the host name its TLS certificate is checked
    against, and whether that name is also where the answering server is (a plain
    ``host:port``); a resolver target (``dns:///sampler:50051``: round robin over every pod
    behind the name) is not, so its tickets must carry the server's address."""
    if not address.startswith(RESOLVER_SCHEMES):
        return split_host(address), True
    rest = address.split(":", 1)[1]
    rest = rest.split("/", 3)[-1] if rest.startswith("//") else rest  # dns://authority/host:port
    return split_host(rest.split(",", 1)[0]), False


class PlaneClient:
    """One client's connections to one server's plane, pooled and reused (per address).

    Args:
        name: the server's host name as the client's gRPC channel dials it (TLS checks it).
        direct: ``name`` is where the answering server is (else tickets say where).
        tls: client-side TLS context (None: plaintext).
        buffers: where the bytes are read into (a pooled buffer per answer).
    """

    def __init__(
        self, name: str, tls: ssl.SSLContext | None = None, buffers: BufferPool | None = None, direct: bool = True
    ) -> None:
        self.name = name
        self.direct = direct
        self.tls = tls
        self.buffers = buffers or BufferPool()
        self._idle: dict[tuple[str, int], list[socket.socket]] = {}
        self._lock = threading.Lock()
        self._unreachable_until = 0.0  # no offers before this (monotonic seconds)
        self._backoff_s = 0.0

    @property
    def offer(self) -> str:
        """The offer's metadata value: "1", or "host" when tickets must say where the server is."""
        return "1" if self.direct else "host"

    @property
    def broken(self) -> bool:
        """The plane could not be reached lately: do not offer it. Offered again after a
        backoff (30 s, doubling to 10 min while it stays unreachable), so that a server that
        was restarting gets its plane back, and a firewalled one costs one failed call per backoff."""
        return time.monotonic() < self._unreachable_until

    def fetch(self, ticket: bytes, port: int, nbytes: int, host: str = "") -> np.ndarray:
        """The ``nbytes`` parked under ``ticket`` at ``host`` (default: the dialed name)
        ``:port``, in a pooled uint8 array (:meth:`fetch_into`)."""
        got: list[np.ndarray] = []

        def read(conn: socket.socket) -> None:
            got.append(self.buffers.take(nbytes))
            recv_exact(conn, got[0].data)

        self.fetch_into(ticket, port, nbytes, host, read)
        return got[0]

    def fetch_into(
        self, ticket: bytes, port: int, nbytes: int, host: str, read: Callable[[socket.socket], None]
    ) -> None:
        """Has ``read(conn)`` read the ``nbytes`` parked under ``ticket`` at ``host`` (default:
        the dialed name) ``:port`` from the connection, exactly those bytes, wherever it puts
        them (e.g. feature rows straight into their minibatch places). A pooled connection
        that turns out dead (the server restarted) is replaced once.

        Raises:
            Unavailable: the plane cannot be reached, the connection broke, or the ticket is
                unknown or expired (ask again).
        """
        if not host and not self.direct:
            raise Unavailable(f"bulk plane of {self.name}: a ticket without the server's address")
        where = (host or self.name, port)
        conn, reused = self._connection(where)
        try:
            length = self._ask(conn, ticket)
        except (OSError, ssl.SSLError) as exc:
            conn.close()
            if not reused:
                raise Unavailable(f"bulk plane {where[0]}:{port}: {exc}") from None
            conn, _ = self._connection(where, fresh=True)
            try:
                length = self._ask(conn, ticket)
            except (OSError, ssl.SSLError) as exc2:
                conn.close()
                raise Unavailable(f"bulk plane {where[0]}:{port}: {exc2}") from None
        try:
            if length >= 0 and length != nbytes:
                raise ConnectionError(f"{length} bytes parked, {nbytes} announced")
            if length >= 0:
                read(conn)
        except (OSError, ssl.SSLError) as exc:
            conn.close()
            raise Unavailable(f"bulk plane {where[0]}:{port}: {exc}") from None
        self._give_back(where, conn)
        if length < 0:
            raise Unavailable(f"bulk plane {where[0]}:{port}: the answer expired before it was read; ask again")

    @staticmethod
    def _ask(conn: socket.socket, ticket: bytes) -> int:
        """Sends ``ticket``; the length the server answers (-1: unknown or expired)."""
        conn.sendall(ticket)
        head = bytearray(_LENGTH.size)
        recv_exact(conn, memoryview(head))
        return int(_LENGTH.unpack(head)[0])

    def _connection(self, where: tuple[str, int], fresh: bool = False) -> tuple[socket.socket, bool]:
        """A pooled connection to ``where`` (``True``) or a new one (``False``)."""
        if not fresh:
            with self._lock:
                idle = self._idle.get(where)
                if idle:
                    return idle.pop(), True
        try:
            conn = socket.create_connection(where, timeout=_CONNECT_TIMEOUT_S)
            conn.setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)
            conn.settimeout(_IO_TIMEOUT_S)
            if self.tls is not None:
                conn = self.tls.wrap_socket(conn, server_hostname=self.name)
        except (OSError, ssl.SSLError) as exc:
            self._backoff_s = min(_MAX_BACKOFF_S, max(_FIRST_BACKOFF_S, 2 * self._backoff_s))
            self._unreachable_until = time.monotonic() + self._backoff_s
            log.warning(
                "bulk plane %s:%d cannot be reached (%s); answers come inline for %.0f s",
                where[0],
                where[1],
                exc,
                self._backoff_s,
            )
            raise Unavailable(f"bulk plane {where[0]}:{where[1]} cannot be reached: {exc}") from None
        self._backoff_s = 0.0
        return conn, False

    def _give_back(self, where: tuple[str, int], conn: socket.socket) -> None:
        with self._lock:
            self._idle.setdefault(where, []).append(conn)

    def close(self) -> None:
        with self._lock:
            conns = [c for idle in self._idle.values() for c in idle]
            self._idle = {}
        for conn in conns:
            conn.close()
