"""TLS, mutual TLS and bearer tokens on a real graph-store server, with certificates made at
test time by openssl: who gets in, who gets UNAUTHENTICATED or PERMISSION_DENIED, and that
health stays public for probes."""

from __future__ import annotations

from collections.abc import Iterator
from concurrent import futures
from dataclasses import dataclass
from pathlib import Path

import grpc
import pytest
from grpc_health.v1 import health, health_pb2, health_pb2_grpc
from prometheus_client import CollectorRegistry

from graphfeed.common.metrics import RpcMetrics
from graphfeed.common.partition import part_dir_name
from graphfeed.common.rpc import ServerInterceptor
from graphfeed.common.security import (
    Authenticator,
    AuthInterceptor,
    TokenFile,
    channel_credentials,
    server_credentials,
    with_token,
)
from graphfeed.common.transport import ServerTransport
from graphfeed.graph_store.metrics import GraphStoreMetrics
from graphfeed.graph_store.servicer import GraphStoreServicer
from graphfeed.graph_store.store import GraphStore
from graphfeed.graph_store.v1 import graph_store_pb2 as pb
from graphfeed.graph_store.v1 import graph_store_pb2_grpc as pb_grpc
from tests.pki import issue, make_ca

pytestmark = pytest.mark.integration
TOKEN = "s3cret-token-for-trainers"  # noqa: S105 - a test token


@dataclass
class Pki:
    dir: Path

    def __getitem__(self, name: str) -> Path:
        return self.dir / name


@pytest.fixture(scope="module")
def pki(tmp_path_factory: pytest.TempPathFactory) -> Pki:
    """A CA; a server certificate for 127.0.0.1/localhost; client certificates for "trainer"
    (allowed) and "intruder" (signed by the same CA, not allowed); a token file."""
    d = tmp_path_factory.mktemp("pki")
    make_ca(d, "ca.pem")
    for name in ("server", "trainer", "intruder"):
        issue(d, name, "ca.pem", loopback=name == "server")
    (d / "tokens").write_text(f"# accepted bearer tokens\n{TOKEN}\n")
    return Pki(d)


@pytest.fixture(scope="module")
def address(pki: Pki, cora_root: Path) -> Iterator[str]:
    """A graph-store over Cora's partition 0 with mTLS (allowing "trainer") and tokens."""
    store = GraphStore.open(cora_root / part_dir_name(0))
    registry = CollectorRegistry()
    auth = Authenticator(tokens=TokenFile(pki["tokens"]), identities=frozenset({"trainer"}))
    interceptors = [ServerInterceptor(RpcMetrics.create(registry)), AuthInterceptor(auth)]  # auth inside: counted
    server = grpc.server(futures.ThreadPoolExecutor(4), interceptors=interceptors)
    pb_grpc.add_GraphStoreServiceServicer_to_server(
        GraphStoreServicer(store, GraphStoreMetrics.create(registry), ServerTransport(None)), server
    )
    health_pb2_grpc.add_HealthServicer_to_server(health.HealthServicer(), server)
    port = server.add_secure_port(
        "127.0.0.1:0", server_credentials(pki["server.pem"], pki["server.key"], pki["ca.pem"])
    )
    server.start()
    yield f"127.0.0.1:{port}"
    server.stop(0.5).wait()
    store.close()


def _call(address: str, creds: grpc.ChannelCredentials | None, token: str | None = None) -> grpc.StatusCode:
    channel = grpc.secure_channel(address, creds) if creds is not None else grpc.insecure_channel(address)
    with channel:
        stub = pb_grpc.GraphStoreServiceStub(with_token(channel, token))
        try:
            stub.GetSplit(pb.GetSplitRequest(name="train"), timeout=10)
            return grpc.StatusCode.OK
        except grpc.RpcError as e:
            return e.code()


def test_only_an_allowed_client_with_a_token_gets_in(pki: Pki, address: str) -> None:
    trainer = channel_credentials(pki["ca.pem"], pki["trainer.pem"], pki["trainer.key"])
    intruder = channel_credentials(pki["ca.pem"], pki["intruder.pem"], pki["intruder.key"])
    assert _call(address, trainer, TOKEN) == grpc.StatusCode.OK
    assert _call(address, trainer) == grpc.StatusCode.UNAUTHENTICATED  # no token
    assert _call(address, trainer, "guessed") == grpc.StatusCode.UNAUTHENTICATED
    assert _call(address, intruder, TOKEN) == grpc.StatusCode.PERMISSION_DENIED  # known CA, wrong identity
    # No client certificate, or no TLS at all: the handshake fails before any RPC.
    assert _call(address, channel_credentials(pki["ca.pem"]), TOKEN) == grpc.StatusCode.UNAVAILABLE
    assert _call(address, None, TOKEN) == grpc.StatusCode.UNAVAILABLE


def test_health_is_public_and_tokens_rotate_without_a_restart(pki: Pki, address: str) -> None:
    trainer = channel_credentials(pki["ca.pem"], pki["trainer.pem"], pki["trainer.key"])
    with grpc.secure_channel(address, trainer) as ch:
        status = health_pb2_grpc.HealthStub(ch).Check(health_pb2.HealthCheckRequest(), timeout=10).status
    assert status == health_pb2.HealthCheckResponse.SERVING  # a kubelet probe has no token
    pki["tokens"].write_text("rotated-token-2\n")
    try:
        assert _call(address, trainer, TOKEN) == grpc.StatusCode.UNAUTHENTICATED
        assert _call(address, trainer, "rotated-token-2") == grpc.StatusCode.OK
    finally:
        pki["tokens"].write_text(f"{TOKEN}\n")


def test_a_graph_store_secured_by_its_settings(pki: Pki, cora_root: Path) -> None:
    """The settings path (`graphfeed serve graph-store --tls-cert ... --auth-tokens-file ...`):
    TLS + token on the gRPC port, the health port plaintext for kubelet probes."""
    from graphfeed.common.security import ClientSecurity
    from graphfeed.graph_store.config import GraphStoreSettings
    from graphfeed.graph_store.server import serve

    settings = GraphStoreSettings(
        part_dir=cora_root / part_dir_name(0),
        metrics_port=-1,
        tls_cert=str(pki["server.pem"]),
        tls_key=str(pki["server.key"]),
        tls_client_ca=str(pki["ca.pem"]),
        auth_tokens_file=str(pki["tokens"]),
        allowed_identities=["trainer"],
    )
    running, store = serve(settings, CollectorRegistry())
    try:
        (pki.dir / "client-token").write_text(f"{TOKEN}\n")
        client = ClientSecurity.of(
            str(pki["ca.pem"]), str(pki["trainer.pem"]), str(pki["trainer.key"]), str(pki.dir / "client-token")
        )
        with client.channel(running.address) as ch:
            ids = pb_grpc.GraphStoreServiceStub(ch).GetSplit(pb.GetSplitRequest(name="train"), timeout=10).ids
            assert len(ids.shape) == 1
        assert _call(running.address, None, TOKEN) == grpc.StatusCode.UNAVAILABLE  # plaintext refused
        with grpc.insecure_channel(f"127.0.0.1:{running.health_port}") as ch:
            status = health_pb2_grpc.HealthStub(ch).Check(health_pb2.HealthCheckRequest(), timeout=10).status
        assert status == health_pb2.HealthCheckResponse.SERVING
    finally:
        running.stop(0.5)
        store.close()


def _list_services(ch: grpc.Channel, token: str | None) -> tuple[grpc.StatusCode, list[str]]:
    """gRPC reflection's ``list`` (a bidirectional-streaming call) as grpcurl sends it."""
    from grpc_reflection.v1alpha import reflection_pb2, reflection_pb2_grpc

    stub = reflection_pb2_grpc.ServerReflectionStub(with_token(ch, token) if token else ch)
    try:
        answers = list(
            stub.ServerReflectionInfo(iter([reflection_pb2.ServerReflectionRequest(list_services="")]), timeout=10)
        )
    except grpc.RpcError as e:
        return e.code(), []
    return grpc.StatusCode.OK, [s.name for a in answers for s in a.list_services_response.service]


@pytest.mark.parametrize("reflection", [True, False])
def test_reflection_asks_for_credentials_and_is_a_setting(pki: Pki, cora_root: Path, reflection: bool) -> None:
    """Reflection is a bidirectional stream, which the token check let through (issue 28, item 4):
    it now asks for the token like every call, and ``reflection=False`` removes it."""
    from graphfeed.graph_store.config import GraphStoreSettings
    from graphfeed.graph_store.server import serve

    settings = GraphStoreSettings(
        part_dir=cora_root / part_dir_name(0),
        metrics_port=-1,
        health_port=-1,
        tls_cert=str(pki["server.pem"]),
        tls_key=str(pki["server.key"]),
        auth_tokens_file=str(pki["tokens"]),
        reflection=reflection,
    )
    running, store = serve(settings, CollectorRegistry())
    try:
        with grpc.secure_channel(running.address, channel_credentials(pki["ca.pem"])) as ch:
            anonymous = _list_services(ch, None)
            with_token_ = _list_services(ch, TOKEN)
        if reflection:
            assert anonymous == (grpc.StatusCode.UNAUTHENTICATED, [])
            assert with_token_[0] == grpc.StatusCode.OK
            assert "graphfeed.graph_store.v1.GraphStoreService" in with_token_[1]
        else:  # no such method, for anyone
            assert anonymous == with_token_ == (grpc.StatusCode.UNIMPLEMENTED, [])
    finally:
        running.stop(0.5)
        store.close()


def test_one_token_file_rotates_without_a_restart(tmp_path: Path, cora_root: Path) -> None:
    """Kubernetes mounts one Secret file as both the servers' accepted tokens and the clients'
    token (the first line). Rotating it (new token first, old below; then the new one alone)
    keeps a running client working through every step, with no restart, and locks the old
    token out at the end."""
    from graphfeed.common.security import ClientSecurity
    from graphfeed.graph_store.config import GraphStoreSettings
    from graphfeed.graph_store.server import serve

    secret = tmp_path / "auth"
    secret.mkdir()

    def write(text: str) -> None:  # as the kubelet updates a Secret volume: a new file swapped in
        (secret / "tokens.new").write_text(text)
        (secret / "tokens.new").replace(secret / "tokens")

    write("token-a\n")
    tokens = str(secret / "tokens")
    settings = GraphStoreSettings(
        part_dir=cora_root / part_dir_name(0), metrics_port=-1, append_dir="", auth_tokens_file=tokens
    )
    running, store = serve(settings, CollectorRegistry())
    client = ClientSecurity.of(token_file=tokens)
    try:
        with client.channel(running.address) as ch:
            stub = pb_grpc.GraphStoreServiceStub(ch)

            def ok() -> bool:
                return len(stub.GetSplit(pb.GetSplitRequest(name="train"), timeout=10).ids.shape) == 1

            assert ok()
            write("token-b\ntoken-a\n")  # step 1: clients send b, servers accept both
            assert ok() and _call(running.address, None, "token-a") == grpc.StatusCode.OK
            write("token-b\n")  # step 2: only b
            assert ok()
            assert _call(running.address, None, "token-a") == grpc.StatusCode.UNAUTHENTICATED
    finally:
        running.stop(0.5)
        store.close()
