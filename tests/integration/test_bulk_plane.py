"""The bulk plane (graphfeed.common.plane) with a real graph-store server: large answers' bytes
arrive over it exactly as they would inline, counted as sent; TLS when the gRPC port is TLS;
a client that cannot reach the plane gets UNAVAILABLE once and inline answers after; tickets
are single-use and expire; a plane that holds too much sends inline."""

from __future__ import annotations

import os
import socket
import struct
import threading
import time
import urllib.request
from collections.abc import Iterator, Sequence
from contextlib import closing
from pathlib import Path

import grpc
import numpy as np
import pytest
from prometheus_client import CollectorRegistry

from graphfeed.common import bulk, codec, security
from graphfeed.common.errors import Unavailable
from graphfeed.common.metrics import RpcMetrics
from graphfeed.common.partition import part_dir_name
from graphfeed.common.plane import BulkPlane, PlaneClient, plane_target
from graphfeed.common.rpc import RunningServer, channel_options, start_server
from graphfeed.common.transport import ClientTransport, ServerTransport
from graphfeed.graph_store.client import GraphStoreClient
from graphfeed.graph_store.config import GraphStoreSettings
from graphfeed.graph_store.server import serve
from graphfeed.graph_store.store import GraphStore
from graphfeed.graph_store.types import RowsInto
from graphfeed.loader.v1 import loader_pb2 as lpb
from tests.pki import issue, make_ca

pytestmark = pytest.mark.integration


def _metric(port: int, name: str, method: str) -> float:
    text = urllib.request.urlopen(f"http://127.0.0.1:{port}/metrics", timeout=10).read().decode()
    return sum(
        float(line.rsplit(" ", 1)[1])
        for line in text.splitlines()
        if line.startswith(name + "{") and f'method="{method}"' in line
    )


@pytest.fixture(scope="module")
def store_server(cora_root: Path) -> Iterator[tuple[RunningServer, GraphStore]]:
    settings = GraphStoreSettings(part_dir=cora_root / part_dir_name(0), port=0, metrics_port=0, shm_dir="")
    running, store = serve(settings, registry=CollectorRegistry())
    yield running, store
    running.stop(0)
    store.close()


def _all_ids(store: GraphStore) -> np.ndarray:
    info = store.info()
    return np.arange(int(info.node_offsets[info.partition_id]), int(info.node_offsets[info.partition_id + 1]))


def test_rows_over_the_plane_equal_the_inline_rows(store_server: tuple[RunningServer, GraphStore]) -> None:
    running, store = store_server
    ids = np.random.default_rng(0).permutation(_all_ids(store))
    expected = store.get_node_data("feat", ids)
    assert expected.nbytes > 1 << 20, "the answer must be large enough to go over the plane"
    port = running.metrics_port or 0
    sent0 = _metric(port, "graphfeed_rpc_response_bytes_total", "GetNodeData")
    plane0 = _metric(port, "graphfeed_rpc_response_plane_bytes_total", "GetNodeData")
    with closing(GraphStoreClient(running.address, shm_dir="")) as client:
        got = client.get_node_data("feat", ids)
        out = np.zeros((len(ids) + 5, *expected.shape[1:]), expected.dtype)
        positions = np.arange(len(ids))[::-1] + 5  # read straight into place, a row per iovec
        assert client.read_node_data("feat", ids, RowsInto(out, positions)) == expected.nbytes
    np.testing.assert_array_equal(got, expected)
    np.testing.assert_array_equal(out[positions], expected)
    plane = _metric(port, "graphfeed_rpc_response_plane_bytes_total", "GetNodeData") - plane0
    sent = _metric(port, "graphfeed_rpc_response_bytes_total", "GetNodeData") - sent0
    assert plane == 2 * expected.nbytes, "both answers' rows went through the plane"
    assert 2 * expected.nbytes <= sent < 2 * expected.nbytes + 10_000, "and are counted as sent (bytes per hop)"

    with closing(GraphStoreClient(running.address, shm_dir="", plane=False)) as inline:
        np.testing.assert_array_equal(inline.get_node_data("feat", ids), expected)
    assert _metric(port, "graphfeed_rpc_response_plane_bytes_total", "GetNodeData") - plane0 == plane


def test_sampling_answers_over_the_plane_equal_in_process(store_server: tuple[RunningServer, GraphStore]) -> None:
    running, store = store_server
    seeds = np.repeat(_all_ids(store), 20)  # large enough an answer to be parked
    expected = store.sample_neighbors(seeds, 10, True, 7)
    with closing(GraphStoreClient(running.address, shm_dir="")) as client:
        got = client.sample_neighbors(seeds, 10, True, 7)
    for field in ("offsets", "src", "edge_ids"):
        np.testing.assert_array_equal(getattr(got, field), getattr(expected, field))
    assert _metric(running.metrics_port or 0, "graphfeed_rpc_response_plane_bytes_total", "SampleNeighbors") > 0


def test_an_unreachable_plane_fails_one_call_and_later_calls_go_inline(cora_root: Path) -> None:
    store = GraphStore.open(cora_root / part_dir_name(0))
    settings = GraphStoreSettings(part_dir=cora_root / part_dir_name(0), port=0, metrics_port=-1, shm_dir="")
    running, served = serve(settings, registry=CollectorRegistry())
    try:
        ids = _all_ids(store)
        with closing(GraphStoreClient(running.address, shm_dir="")) as client:
            client.get_node_data("feat", ids[:10])  # small: inline, the plane is not touched
            plane = client._transport.plane
            assert plane is not None
            running_plane = served_plane(running)
            # It still parks answers and nobody can connect: a firewall, or a NetworkPolicy without the port.
            running_plane._listener.shutdown(socket.SHUT_RDWR)
            running_plane._listener.close()
            with pytest.raises(Unavailable, match="bulk plane"):
                client.get_node_data("feat", ids)
            assert plane.broken and client._transport.metadata is None, "no offer while it is unreachable"
            np.testing.assert_array_equal(client.get_node_data("feat", ids), store.get_node_data("feat", ids))
    finally:
        running.stop(0)
        served.close()
        store.close()


def served_plane(running: RunningServer) -> BulkPlane:
    """The plane a served graph-store answers through (its stop hook closes it)."""
    closers = [hook for hook in running.on_stop if getattr(hook, "__self__", None).__class__ is BulkPlane]
    assert len(closers) == 1
    return closers[0].__self__  # type: ignore[attr-defined]


def test_tickets_are_single_use_expire_and_the_plane_is_bounded() -> None:
    plane = BulkPlane("127.0.0.1", 0, ttl_s=0.3, max_parked_bytes=1 << 20)
    client = PlaneClient("127.0.0.1")
    try:
        data = np.arange(1 << 16, dtype=np.int64)  # 512 KiB
        ticket = plane.park([data.data.cast("B")], data.nbytes)
        assert ticket is not None and plane.parked_bytes == data.nbytes
        assert plane.park([b"x" * 600_000], 600_000) is None, "more than max_parked_bytes: inline instead"
        np.testing.assert_array_equal(client.fetch(ticket, plane.port, data.nbytes).view(np.int64), data)
        assert plane.parked_bytes == 0
        with pytest.raises(Unavailable, match="expired"):
            client.fetch(ticket, plane.port, data.nbytes)  # used once
        late = plane.park([b"y" * 1000], 1000)
        assert late is not None
        time.sleep(0.5)
        with pytest.raises(Unavailable, match="expired"):
            client.fetch(late, plane.port, 1000)
        assert not client.broken, "an expired ticket says nothing about the plane"
        fresh = plane.park([b"z" * 3, b"w" * 5], 8)  # the connection that answered -1 still serves
        assert fresh is not None and bytes(client.fetch(fresh, plane.port, 8)) == b"zzzwwwww"
        for conn in list(plane._connections):  # the server side of the pooled connection goes away
            conn.shutdown(socket.SHUT_RDWR)
        again = plane.park([b"v" * 10], 10)
        assert again is not None and bytes(client.fetch(again, plane.port, 10)) == b"v" * 10, "a fresh connection"
    finally:
        client.close()
        plane.close()


def test_concurrent_readers_each_get_their_own_bytes() -> None:
    plane = BulkPlane("127.0.0.1", 0)
    client = PlaneClient("127.0.0.1")
    errors: list[BaseException] = []

    def read(k: int) -> None:
        try:
            for i in range(20):
                data = np.full(300_000 + k * 1000 + i, k * 100 + i, dtype=np.uint32)
                ticket = plane.park([data.data], data.nbytes)
                assert ticket is not None
                got = client.fetch(ticket, plane.port, data.nbytes).view(np.uint32)
                assert (got == k * 100 + i).all() and len(got) == len(data)
        except BaseException as exc:  # noqa: BLE001 - reported by the main thread
            errors.append(exc)

    threads = [threading.Thread(target=read, args=(k,)) for k in range(6)]
    try:
        for t in threads:
            t.start()
        for t in threads:
            t.join(120)
        assert not errors, errors
    finally:
        client.close()
        plane.close()


def test_the_plane_is_tls_when_the_grpc_port_is(tmp_path: Path, cora_root: Path) -> None:
    """A graph-store with TLS on its gRPC port serves its plane with the same certificate; a
    client that trusts the CA reads over it; a plaintext reader gets nothing."""
    make_ca(tmp_path, "ca.pem")
    issue(tmp_path, "server", "ca.pem", loopback=True)
    settings = GraphStoreSettings(
        part_dir=cora_root / part_dir_name(0),
        port=0,
        metrics_port=0,
        shm_dir="",
        tls_cert=str(tmp_path / "server.pem"),
        tls_key=str(tmp_path / "server.key"),
    )
    running, store = serve(settings, registry=CollectorRegistry())
    security.configure_clients(security.ClientSecurity.of(ca=str(tmp_path / "ca.pem")))
    try:
        ids = _all_ids(store)
        with closing(GraphStoreClient(running.address, shm_dir="")) as client:
            np.testing.assert_array_equal(client.get_node_data("feat", ids), store.get_node_data("feat", ids))
            assert client._transport.plane is not None and not client._transport.plane.broken
            out = np.zeros((2 * len(ids), *store.get_node_data("feat", ids[:1]).shape[1:]), np.float32)
            positions = np.arange(0, 2 * len(ids), 2)  # rows read through TLS, then placed
            client.read_node_data("feat", ids, RowsInto(out, positions))
            np.testing.assert_array_equal(out[positions], store.get_node_data("feat", ids))
        assert _metric(running.metrics_port or 0, "graphfeed_rpc_response_plane_bytes_total", "GetNodeData") > 0
        plane = served_plane(running)
        ticket = plane.park([b"secret" * 100_000], 600_000)
        assert ticket is not None
        with pytest.raises(Unavailable):
            PlaneClient("127.0.0.1").fetch(ticket, plane.port, 600_000)  # plaintext against TLS
    finally:
        security.configure_clients(security.ClientSecurity())
        running.stop(0)
        store.close()


def test_one_client_cannot_take_the_whole_plane() -> None:
    plane = BulkPlane("127.0.0.1", 0, max_parked_bytes=3000, max_client_bytes=2000)
    try:
        assert plane.park([b"a" * 1500], 1500, "10.0.0.1") is not None
        assert plane.park([b"b" * 1000], 1000, "10.0.0.1") is None, "over its own share: inline"
        assert plane.park([b"c" * 1000], 1000, "10.0.0.2") is not None, "another client still gets the plane"
        assert plane.park([b"d" * 1000], 1000, "10.0.0.3") is None, "over the plane's bound: inline"
        assert plane.parked_bytes == 2500
    finally:
        plane.close()


def test_garbage_on_the_plane_gets_nothing_and_the_plane_keeps_serving() -> None:
    plane = BulkPlane("127.0.0.1", 0)
    try:
        secret = plane.park([b"s" * 4096], 4096)
        assert secret is not None
        with socket.create_connection(("127.0.0.1", plane.port), timeout=10) as raw:
            for _ in range(3):  # guessed tickets: -1 each time, on the same connection
                raw.sendall(os.urandom(16))
                assert struct.unpack("<q", raw.recv(8, socket.MSG_WAITALL))[0] == -1
            raw.sendall(b"half")  # and a client that goes away mid-ticket
        assert plane.holds(secret), "nothing a guesser did touched the parked answer"
        assert bytes(PlaneClient("127.0.0.1").fetch(secret, plane.port, 4096)) == b"s" * 4096
    finally:
        plane.close()


def test_a_stream_parks_at_most_its_unclaimed_bound_and_a_cancel_drops_what_is_parked() -> None:
    """A server stream over the plane, as the loader's minibatch stream sends: a client that
    reads one message and stops leaves at most the stream's bound parked, and cancelling the
    call frees the plane at once (not after the tickets' minute)."""
    plane = BulkPlane("127.0.0.1", 0)
    transport = ServerTransport(None, "test", plane=plane)
    sent: list[int] = []

    def stream(request: lpb.StreamMinibatchesRequest, context: grpc.ServicerContext) -> Iterator[object]:
        with transport.stream(context, "Stream") as call:
            pressure = call.backpressure(2)
            for i in range(50):
                if not pressure.wait():
                    return
                with call.response() as r:
                    msg = lpb.Minibatch(steps_per_epoch=i)
                    r.encode(np.full(1 << 18, i, np.float32), msg.input_features)  # 1 MiB
                frames = list(r.frames(msg))
                pressure.sent(r.paths, r.unread if r.tickets else None)
                sent.append(i)
                yield from frames

    handler = grpc.method_handlers_generic_handler(
        "graphfeed.test.Plane", {"Stream": grpc.unary_stream_rpc_method_handler(stream)}
    )
    server = start_server(
        register=lambda srv: srv.add_generic_rpc_handlers((handler,)),
        service_names=["graphfeed.test.Plane"],
        metrics=RpcMetrics.create(CollectorRegistry()),
    )
    client = ClientTransport(None, server.address)
    try:
        with grpc.insecure_channel(server.address, options=channel_options()) as ch:
            call = bulk.unary_stream(
                ch, "graphfeed.test.Plane", "Stream", lpb.StreamMinibatchesRequest, lpb.Minibatch, client.fetch
            )
            stream_call = call(lpb.StreamMinibatchesRequest(), timeout=60, metadata=client.metadata)
            first = next(iter(stream_call))
            assert codec.decode(first.message.input_features, bulk=first.bulk)[0] == 0
            time.sleep(1.0)  # the producer runs ahead as far as it may
            assert len(sent) <= 4 and plane.parked_bytes <= 3 * (1 << 20), (sent, plane.parked_bytes)
            stream_call.cancel()
            deadline = time.monotonic() + 30
            while plane.parked_bytes and time.monotonic() < deadline:
                time.sleep(0.05)
            assert plane.parked_bytes == 0, "the cancelled stream's parked messages were dropped"
    finally:
        client.close()
        server.stop(0)
        plane.close()


def test_plane_targets() -> None:
    assert plane_target("127.0.0.1:50051") == ("127.0.0.1", True)
    assert plane_target("graph-store-0.graph-store:50051") == ("graph-store-0.graph-store", True)
    assert plane_target("[::1]:5000") == ("::1", True)
    assert plane_target("dns:///sampler:50051") == ("sampler", False)
    assert plane_target("dns://10.0.0.10:53/sampler.ns.svc:50051") == ("sampler.ns.svc", False)
    assert plane_target("ipv4:10.0.0.1:50051,10.0.0.2:50051") == ("10.0.0.1", False)


@pytest.mark.parametrize("advertise", ["", "127.0.0.1"])
def test_behind_a_resolver_the_plane_needs_the_server_address(cora_root: Path, advertise: str) -> None:
    """A client that dials dns:/// (round robin over every pod behind a name) cannot tell which
    server parked its answer: it asks for the server's address in the ticket, and a server
    without one (no bulk_host) answers it inline; with one, over the plane."""
    settings = GraphStoreSettings(
        part_dir=cora_root / part_dir_name(0), port=0, metrics_port=0, shm_dir="", bulk_host=advertise
    )
    running, store = serve(settings, registry=CollectorRegistry())
    try:
        ids = _all_ids(store)
        with closing(GraphStoreClient(f"dns:///{running.address}", shm_dir="")) as client:
            np.testing.assert_array_equal(client.get_node_data("feat", ids), store.get_node_data("feat", ids))
            assert client._transport.metadata == (("graphfeed-bulk-plane", "host"),)
        plane = _metric(running.metrics_port or 0, "graphfeed_rpc_response_plane_bytes_total", "GetNodeData")
        assert (plane > 0) == bool(advertise)
    finally:
        running.stop(0)
        store.close()


def test_a_store_held_to_a_memory_budget_parks_no_more_than_it(cora_root: Path) -> None:
    """The plane holds each answer whole; a graph-store with --memory-budget parks at most its
    budget at once, so an answer larger than that goes in bounded messages, exact all the same."""
    budget = 2 << 20
    settings = GraphStoreSettings(
        part_dir=cora_root / part_dir_name(0), port=0, metrics_port=0, shm_dir="", memory_budget=budget
    )
    running, store = serve(settings, registry=CollectorRegistry())
    plane = served_plane(running)
    most = [0]
    park = plane.park

    def watched(parts: Sequence[memoryview | bytes], nbytes: int, client: str = "") -> bytes | None:
        ticket = park(parts, nbytes, client)
        most[0] = max(most[0], plane.parked_bytes)
        return ticket

    plane.park = watched  # type: ignore[method-assign]
    try:
        ids = _all_ids(store)
        expected = store.get_node_data("feat", ids)
        assert expected.nbytes > 2 * budget
        with closing(GraphStoreClient(running.address, shm_dir="")) as client:
            np.testing.assert_array_equal(client.get_node_data("feat", ids), expected)
            np.testing.assert_array_equal(client.get_node_data("feat", ids[:300]), expected[:300])  # 1.7 MB: whole
        assert 0 < most[0] <= budget, most[0]
        assert _metric(running.metrics_port or 0, "graphfeed_rpc_response_plane_bytes_total", "GetNodeData") > 0
    finally:
        running.stop(0)
        store.close()
