"""TLS, mutual TLS and bearer tokens for every graphfeed service and client.

Without them anyone who reaches a port reads every feature and label. The pieces:

- :func:`server_credentials`: TLS with the service's certificate and key; with a client CA,
  mutual TLS (the client must present a certificate that CA signed).
- :func:`channel_credentials`: a client's side (the CA it trusts; its own certificate for mTLS).
- :class:`Authenticator`: the server-side check on every call: a bearer token from a file of
  accepted tokens (``authorization: Bearer <token>`` metadata), and, with mTLS, the client
  certificate's identity (common name or a DNS/URI SAN) in an allow list. A call without a
  valid token is UNAUTHENTICATED; a known client whose identity is not allowed is
  PERMISSION_DENIED. The gRPC health service is public (kubelet probes carry no token);
  reflection is not (and is a setting: ``--reflection false`` removes it).
- :func:`with_token`: a client channel that sends this process's token on every call.

Files, not values: certificates, keys and tokens are read from paths (a Kubernetes Secret or a
cert-manager Certificate mounted as files), and token files are re-read when they change, so
a rotated Secret takes effect without a restart.
"""

from __future__ import annotations

import hmac
import os
import ssl
import threading
from collections.abc import Callable, Iterable
from dataclasses import dataclass, field
from pathlib import Path

import grpc

from graphfeed.common.errors import FailedPrecondition, GraphfeedError, PermissionDenied, Unauthenticated

# Callable without a token: the kubelet's and load balancers' health checks.
PUBLIC_METHODS = ("/grpc.health.v1.Health/Check", "/grpc.health.v1.Health/Watch")
_AUTH_KEY = "authorization"


def _read(path: Path | str, what: str) -> bytes:
    try:
        return Path(path).read_bytes()
    except OSError as e:
        raise FailedPrecondition(f"cannot read the {what} {path}: {e.strerror}") from None


def server_credentials(
    cert: Path | str, key: Path | str, client_ca: Path | str | None = None
) -> grpc.ServerCredentials:
    """TLS credentials of a server (PEM files); with ``client_ca``, clients must present a
    certificate signed by it (mutual TLS)."""
    return grpc.ssl_server_credentials(
        [(_read(key, "TLS key"), _read(cert, "TLS certificate"))],
        root_certificates=_read(client_ca, "client CA") if client_ca else None,
        require_client_auth=client_ca is not None,
    )


def channel_credentials(
    ca: Path | str | None = None, cert: Path | str | None = None, key: Path | str | None = None
) -> grpc.ChannelCredentials:
    """TLS credentials of a client: ``ca`` to verify servers (None: the system's roots);
    ``cert``/``key`` to present for mutual TLS."""
    if (cert is None) != (key is None):
        raise FailedPrecondition("a client certificate needs its key and a key its certificate")
    return grpc.ssl_channel_credentials(
        root_certificates=_read(ca, "CA certificate") if ca else None,
        private_key=_read(key, "TLS key") if key else None,
        certificate_chain=_read(cert, "TLS certificate") if cert else None,
    )


class TokenFile:
    """Accepted bearer tokens, one per line (blank lines and ``#`` comments ignored), re-read
    when the file changes. Thread-safe."""

    def __init__(self, path: Path | str) -> None:
        self.path = Path(path)
        self._lock = threading.Lock()
        self._stamp: tuple[int, int, int] | None = None
        self._tokens: tuple[bytes, ...] = ()
        if not self.tokens():
            raise FailedPrecondition(f"the token file {self.path} holds no token")

    def tokens(self) -> tuple[bytes, ...]:
        try:
            st = os.stat(self.path)
        except OSError as e:
            raise FailedPrecondition(f"cannot read the token file {self.path}: {e.strerror}") from None
        stamp = (st.st_ino, st.st_mtime_ns, st.st_size)  # a Secret volume swaps in a new file
        with self._lock:
            if stamp != self._stamp:
                lines = _read(self.path, "token file").decode().splitlines()
                self._tokens = tuple(t.strip().encode() for t in lines if t.strip() and not t.lstrip().startswith("#"))
                self._stamp = stamp
            return self._tokens

    def accepts(self, token: bytes) -> bool:
        """Constant-time comparison against every accepted token."""
        return any(hmac.compare_digest(token, t) for t in self.tokens())


def peer_identities(context: grpc.ServicerContext) -> set[str]:
    """The verified client certificate's common name and SANs (empty without mutual TLS)."""
    auth = context.auth_context() or {}
    keys = ("x509_common_name", "x509_subject_alternative_name")
    return {v.decode() for k in keys for v in auth.get(k, [])}


@dataclass
class Authenticator:
    """Who may call: a bearer token from ``tokens`` (None: no token needed) and, when
    ``identities`` is given, a client certificate naming one of them (needs mutual TLS)."""

    tokens: TokenFile | None = None
    identities: frozenset[str] | None = None
    public: tuple[str, ...] = PUBLIC_METHODS

    @property
    def open(self) -> bool:
        """Nothing is required: every call proceeds."""
        return self.tokens is None and self.identities is None

    def check(self, method: str, metadata: Iterable[tuple[str, str | bytes]], context: grpc.ServicerContext) -> None:
        """Raises Unauthenticated or PermissionDenied unless the call may proceed (the service
        interceptor, outside this one, maps them to their statuses and counts them)."""
        if self.open or method in self.public:
            return
        if self.tokens is not None:
            header = next((v for k, v in metadata if k == _AUTH_KEY), None)
            raw = header.encode() if isinstance(header, str) else header
            if raw is None or not raw.startswith(b"Bearer "):
                raise Unauthenticated(f"{method}: no bearer token (metadata 'authorization: Bearer <token>')")
            if not self.tokens.accepts(raw[len(b"Bearer ") :].strip()):
                raise Unauthenticated(f"{method}: the bearer token is not accepted")
        if self.identities is not None:
            who = peer_identities(context)
            if not who:
                raise Unauthenticated(f"{method}: no verified client certificate (mutual TLS)")
            if not who & self.identities:
                named = ", ".join(sorted(who))[:200]
                raise PermissionDenied(f"{method}: client {named} is not allowed")


class AuthInterceptor(grpc.ServerInterceptor):
    """Runs :meth:`Authenticator.check` before every handler, whatever its kind (unary, server-,
    client- or bidirectional streaming: gRPC reflection is the last kind, and was open before).
    Goes after the service interceptor in ``grpc.server(interceptors=...)``, so that refusals of
    unary and server-streaming calls are mapped to statuses and counted like every other error;
    a refused client- or bidi-streaming call is aborted here with the refusal's status."""

    def __init__(self, auth: Authenticator) -> None:
        self._auth = auth

    def intercept_service(
        self,
        continuation: Callable[[grpc.HandlerCallDetails], grpc.RpcMethodHandler | None],
        details: grpc.HandlerCallDetails,
    ) -> grpc.RpcMethodHandler | None:
        handler = continuation(details)
        if handler is None or self._auth.open:
            return handler
        method, metadata, auth = details.method, tuple(details.invocation_metadata or ()), self._auth
        if handler.unary_unary:
            inner = handler.unary_unary

            def unary(request: object, context: grpc.ServicerContext) -> object:
                auth.check(method, metadata, context)
                return inner(request, context)

            return handler._replace(unary_unary=unary)
        if handler.unary_stream:
            inner_stream = handler.unary_stream

            def stream(request: object, context: grpc.ServicerContext) -> object:
                auth.check(method, metadata, context)
                yield from inner_stream(request, context)

            return handler._replace(unary_stream=stream)
        if handler.stream_unary:
            inner_su = handler.stream_unary

            def stream_unary(requests: object, context: grpc.ServicerContext) -> object:
                _check_or_abort(auth, method, metadata, context)
                return inner_su(requests, context)

            return handler._replace(stream_unary=stream_unary)
        if handler.stream_stream:
            inner_ss = handler.stream_stream

            def stream_stream(requests: object, context: grpc.ServicerContext) -> object:
                _check_or_abort(auth, method, metadata, context)
                yield from inner_ss(requests, context)

            return handler._replace(stream_stream=stream_stream)
        raise Unauthenticated(f"{method}: a handler of unknown kind is refused")


def _check_or_abort(
    auth: Authenticator, method: str, metadata: Iterable[tuple[str, str | bytes]], context: grpc.ServicerContext
) -> None:
    """:meth:`Authenticator.check`, aborting the call with the refusal's status (the service
    interceptor maps only unary and server-streaming handlers)."""
    try:
        auth.check(method, metadata, context)
    except GraphfeedError as exc:
        context.abort(exc.code, str(exc))


class _TokenInterceptor(
    grpc.UnaryUnaryClientInterceptor,
    grpc.UnaryStreamClientInterceptor,
    grpc.StreamUnaryClientInterceptor,
    grpc.StreamStreamClientInterceptor,
):
    """Adds the bearer token to calls of every kind (the server checks every kind)."""

    def __init__(self, token: str | TokenFile) -> None:
        self._token = token

    def _details(self, details: grpc.ClientCallDetails) -> grpc.ClientCallDetails:
        # A token file's first token, as it is now (a rotated Secret takes effect on the next call).
        token = self._token if isinstance(self._token, str) else self._token.tokens()[0].decode()
        return details._replace(metadata=[*(details.metadata or ()), (_AUTH_KEY, f"Bearer {token}")])

    def intercept_unary_unary(self, continuation, client_call_details, request):  # noqa: ANN001, ANN202
        return continuation(self._details(client_call_details), request)

    def intercept_unary_stream(self, continuation, client_call_details, request):  # noqa: ANN001, ANN202
        return continuation(self._details(client_call_details), request)

    def intercept_stream_unary(self, continuation, client_call_details, request_iterator):  # noqa: ANN001, ANN202
        return continuation(self._details(client_call_details), request_iterator)

    def intercept_stream_stream(self, continuation, client_call_details, request_iterator):  # noqa: ANN001, ANN202
        return continuation(self._details(client_call_details), request_iterator)


def with_token(channel: grpc.Channel, token: str | TokenFile | None) -> grpc.Channel:
    """``channel`` sending ``authorization: Bearer <token>`` on every call (``token`` None: as is);
    a :class:`TokenFile` sends its first token, re-read when the file changes."""
    return channel if not token else grpc.intercept_channel(channel, _TokenInterceptor(token))


@dataclass(frozen=True)
class ClientSecurity:
    """How this process's clients reach graphfeed servers: TLS when ``ca`` or ``cert`` is set
    (``cert``/``key``: mutual TLS), and the bearer token sent with every call."""

    ca: Path | None = None
    cert: Path | None = None
    key: Path | None = None
    token: str | TokenFile | None = None

    @classmethod
    def of(cls, ca: str = "", cert: str = "", key: str = "", token_file: str = "") -> ClientSecurity:
        """From settings strings ("" = unset). The token file's first token is sent, re-read when
        the file changes: the same file can be a server's accepted tokens (rotation: put the new
        token first and keep the old one below it until every client has re-read the file)."""
        return cls(
            Path(ca) if ca else None,
            Path(cert) if cert else None,
            Path(key) if key else None,
            TokenFile(token_file) if token_file else None,
        )

    def ssl_context(self) -> ssl.SSLContext | None:
        """The same TLS for a plain socket (the bulk plane, :mod:`graphfeed.common.plane`); None: plaintext."""
        if self.ca is None and self.cert is None:
            return None
        context = ssl.create_default_context(cafile=str(self.ca) if self.ca else None)
        if self.cert is not None and self.key is not None:
            context.load_cert_chain(self.cert, self.key)
        return context

    def channel(self, address: str, options: list[tuple[str, int | str]] | None = None) -> grpc.Channel:
        """A channel to ``address``: TLS or plaintext as configured, with the token attached."""
        if self.ca is not None or self.cert is not None:
            channel = grpc.secure_channel(address, channel_credentials(self.ca, self.cert, self.key), options=options)
        else:
            channel = grpc.insecure_channel(address, options=options)
        return with_token(channel, self.token)


_clients = ClientSecurity()


def configure_clients(security: ClientSecurity) -> None:
    """Sets how every client channel this process opens is secured (once, at start-up: a
    process has one identity)."""
    global _clients
    _clients = security


def client_tls() -> ssl.SSLContext | None:
    """TLS for this process's bulk-plane connections, as :func:`configure_clients` said (None: plaintext)."""
    return _clients.ssl_context()


def channel(address: str, options: list[tuple[str, int | str]] | None = None) -> grpc.Channel:
    """A channel secured as :func:`configure_clients` said (plaintext by default); with retry
    policy and options, :func:`graphfeed.common.rpc.client_channel`."""
    return _clients.channel(address, options)


@dataclass(frozen=True)
class ServerSecurity:
    """A server's TLS (``cert``/``key``; ``client_ca``: mutual TLS) and who may call it."""

    cert: Path | None = None
    key: Path | None = None
    client_ca: Path | None = None
    auth: Authenticator = field(default_factory=Authenticator)

    @classmethod
    def of(
        cls, cert: str = "", key: str = "", client_ca: str = "", tokens_file: str = "", identities: Iterable[str] = ()
    ) -> ServerSecurity:
        """From settings strings ("" = unset)."""
        if bool(cert) != bool(key):
            raise FailedPrecondition("tls_cert and tls_key go together")
        allowed = frozenset(identities)
        if allowed and not client_ca:
            raise FailedPrecondition("allowed identities need mutual TLS (tls_client_ca)")
        auth = Authenticator(TokenFile(tokens_file) if tokens_file else None, allowed or None)
        return cls(
            Path(cert) if cert else None, Path(key) if key else None, Path(client_ca) if client_ca else None, auth
        )

    def ssl_context(self) -> ssl.SSLContext | None:
        """The gRPC port's TLS for a plain socket (the bulk plane); None: plaintext. A bulk-plane
        reader needs no token: it holds a ticket only an authenticated call received."""
        if self.cert is None or self.key is None:
            return None
        context = ssl.SSLContext(ssl.PROTOCOL_TLS_SERVER)
        context.load_cert_chain(self.cert, self.key)
        if self.client_ca is not None:
            context.verify_mode = ssl.CERT_REQUIRED
            context.load_verify_locations(self.client_ca)
        return context

    def interceptors(self) -> list[grpc.ServerInterceptor]:
        """Goes after the service interceptor (refusals mapped and counted like other errors)."""
        return [] if self.auth.open else [AuthInterceptor(self.auth)]

    def bind(self, server: grpc.Server, address: str) -> int:
        """Adds the port (TLS when configured); returns the bound port (0: failed)."""
        if self.cert is None or self.key is None:
            return server.add_insecure_port(address)
        return server.add_secure_port(address, server_credentials(self.cert, self.key, self.client_ca))
