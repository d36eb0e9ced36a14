"""Temporal graph over the wire: real graph-store servers on 127.0.0.1, appends, temporal sampling,
their errors, the routing client, and the metrics they export (issue 16)."""

from __future__ import annotations

import threading
from collections.abc import Callable, Iterator
from dataclasses import dataclass
from pathlib import Path

import grpc
import numpy as np
import pytest
from prometheus_client import CollectorRegistry

from graphfeed.common import codec
from graphfeed.common.errors import FailedPrecondition
from graphfeed.common.metrics import RpcMetrics
from graphfeed.common.partition import PartitionReader, part_dir_name
from graphfeed.common.rpc import RunningServer, start_server
from graphfeed.graph_store.client import GraphStoreClient
from graphfeed.graph_store.config import GraphStoreSettings
from graphfeed.graph_store.metrics import GraphStoreMetrics, TemporalMetrics
from graphfeed.graph_store.partitions import RemotePartitionSet
from graphfeed.graph_store.server import SERVICE_NAME, serve
from graphfeed.graph_store.servicer import GraphStoreServicer
from graphfeed.graph_store.store import GraphStore
from graphfeed.graph_store.temporal.client import TemporalClient, TemporalStoreView
from graphfeed.graph_store.v1 import graph_store_pb2 as pb
from graphfeed.graph_store.v1 import graph_store_pb2_grpc as pb_grpc
from tests.unit.temporal_graphs import J, N, write_temporal

pytestmark = pytest.mark.integration

BIG_T = np.iinfo(np.int64).max


@dataclass
class Cluster:
    servers: list[RunningServer]
    stores: list[GraphStore]
    registries: list[CollectorRegistry]

    @property
    def addresses(self) -> list[str]:
        return [s.address for s in self.servers]


@pytest.fixture
def cluster(tmp_path: Path) -> Iterator[Cluster]:
    """The arithmetic temporal graph in 2 partitions, one server each, appends in tmp_path."""
    root, _ = write_temporal(tmp_path / "g", num_partitions=2)
    c = Cluster([], [], [])
    try:
        for p in range(2):
            reg = CollectorRegistry()
            settings = GraphStoreSettings(
                part_dir=root / part_dir_name(p), append_dir=str(tmp_path / f"log-{p}"), metrics_port=-1
            )
            running, store = serve(settings, reg)
            c.servers.append(running)
            c.stores.append(store)
            c.registries.append(reg)
        yield c
    finally:
        for running, store in zip(c.servers, c.stores):
            running.stop(0)
            store.close()


def _stub(c: Cluster, p: int = 0) -> pb_grpc.GraphStoreServiceStub:
    return pb_grpc.GraphStoreServiceStub(grpc.insecure_channel(c.addresses[p]))


def _t(values: object, dtype: type = np.int64) -> codec.tensor_pb2.Tensor:
    return codec.encode(np.asarray(values, dtype=dtype))


def _append(batch_id: str, src: object, dst: object, t: object, dtype: type = np.int64) -> pb.AppendEdgesRequest:
    return pb.AppendEdgesRequest(batch_id=batch_id, src=_t(src, dtype), dst=_t(dst), t=_t(t))


def test_append_is_visible_to_sampling_right_after_the_ack(cluster: Cluster) -> None:
    client = TemporalClient(RemotePartitionSet(cluster.addresses), client_id="job")
    try:
        new = N + 3  # a node that arrives by append: owned by 43 % 2 = partition 1
        acks = client.append(np.array([5, 30]), np.array([25, new]), np.array([100, 100]), undirected=True)
        assert sorted(acks) == [0, 1] and sum(a.num_edges for a in acks.values()) == 4
        assert all(not a.duplicate for a in acks.values())
        (s,) = client.sample(np.array([25, new, 5, 30]), np.full(4, 101), [-1])
        counts = np.diff(s.offsets)
        assert counts.tolist() == [J + 1, 1, J + 1, J + 1]  # ingest-time rows hold J edges each
        last = s.offsets[1:] - 1
        assert s.nbr[last].tolist() == [5, 30, 25, new] and s.ts[last].tolist() == [100] * 4
        assert all(int(e) >> 62 == 1 for e in s.eid[last])  # appended edge ids
        # at exactly t=100 the new edges are not seen yet (strictly before)
        (before,) = client.sample(np.array([25, new]), np.array([100, 100]), [-1])
        assert np.diff(before.offsets).tolist() == [J, 0]
    finally:
        client.close()


def test_a_retried_batch_id_is_a_duplicate_applied_once(cluster: Cluster) -> None:
    c = GraphStoreClient(cluster.addresses[0])
    try:
        first = c.append_edges("b-1", np.array([1, 2]), np.array([3, 4]), np.array([200, 200]))
        again = c.append_edges("b-1", np.array([1, 2]), np.array([3, 4]), np.array([200, 200]))
        assert (again.first_eid, again.num_edges, again.visible_seq, again.duplicate) == (
            first.first_eid,
            first.num_edges,
            first.visible_seq,
            True,
        )
        info = c.temporal_info()
        assert (info.num_appended, info.seq, info.num_edges) == (2, 1, N // 2 * J + 2)
        s = c.sample_temporal(np.array([3, 4]), np.full(2, BIG_T), -1)
        assert np.diff(s.offsets).tolist() == [J + 1, J + 1]
    finally:
        c.close()


def _oversized(s: pb_grpc.GraphStoreServiceStub) -> object:
    req = _append("big", [1], [2], [3])
    req.src.shape[0] = 2_000_001  # refused from the shape, before any byte is read
    return s.AppendEdges(req, timeout=10)


def _reused(s: pb_grpc.GraphStoreServiceStub) -> object:
    s.AppendEdges(_append("same", [1], [2], [300]), timeout=10)
    return s.AppendEdges(_append("same", [1], [2], [301]), timeout=10)


def _sample_req(nodes: list[int], **kw: object) -> pb.SampleTemporalRequest:
    return pb.SampleTemporalRequest(nodes=_t(nodes), times=_t([100] * len(nodes)), **kw)  # type: ignore[arg-type]


BAD: dict[str, tuple[Callable[[pb_grpc.GraphStoreServiceStub], object], grpc.StatusCode, str]] = {
    "out of order": (
        lambda s: s.AppendEdges(_append("ooo", [1], [2], [5]), timeout=10),
        grpc.StatusCode.INVALID_ARGUMENT,
        "node 2 at t=5",
    ),
    "not owned": (
        lambda s: s.AppendEdges(_append("x", [1], [21], [500]), timeout=10),
        grpc.StatusCode.NOT_FOUND,
        "21",
    ),
    "new id of the other partition": (
        lambda s: s.AppendEdges(_append("y", [1], [N + 1], [500]), timeout=10),
        grpc.StatusCode.NOT_FOUND,
        str(N + 1),
    ),
    "float src": (
        lambda s: s.AppendEdges(_append("f", [1.5], [2], [500], np.float32), timeout=10),
        grpc.StatusCode.INVALID_ARGUMENT,
        "INT64",
    ),
    "length mismatch": (
        lambda s: s.AppendEdges(_append("l", [1, 2], [2], [500]), timeout=10),
        grpc.StatusCode.INVALID_ARGUMENT,
        "same length",
    ),
    "negative src": (
        lambda s: s.AppendEdges(_append("n", [-1], [2], [500]), timeout=10),
        grpc.StatusCode.INVALID_ARGUMENT,
        ">= 0",
    ),
    "empty batch id": (
        lambda s: s.AppendEdges(_append("", [1], [2], [500]), timeout=10),
        grpc.StatusCode.INVALID_ARGUMENT,
        "batch_id",
    ),
    "features on a graph without": (
        lambda s: s.AppendEdges(
            pb.AppendEdgesRequest(
                batch_id="e", src=_t([1]), dst=_t([2]), t=_t([500]), edge_feat=_t(np.ones((1, 2)), np.float32)
            ),
            timeout=10,
        ),
        grpc.StatusCode.INVALID_ARGUMENT,
        "efeat",
    ),
    "oversized batch": (_oversized, grpc.StatusCode.RESOURCE_EXHAUSTED, "limit"),
    "batch id reused with other edges": (_reused, grpc.StatusCode.FAILED_PRECONDITION, "different edges"),
    "no strategy": (
        lambda s: s.SampleTemporal(_sample_req([1], fanout=2), timeout=10),
        grpc.StatusCode.INVALID_ARGUMENT,
        "strategy",
    ),
    "bad fanout": (
        lambda s: s.SampleTemporal(_sample_req([1], fanout=-2, strategy=pb.TEMPORAL_STRATEGY_RECENT), timeout=10),
        grpc.StatusCode.INVALID_ARGUMENT,
        "fanout",
    ),
    "negative as_of_appended": (
        lambda s: s.SampleTemporal(
            _sample_req([1], fanout=2, strategy=pb.TEMPORAL_STRATEGY_RECENT, as_of_appended=-3), timeout=10
        ),
        grpc.StatusCode.INVALID_ARGUMENT,
        "as_of_appended",
    ),
    "unowned root": (
        lambda s: s.SampleTemporal(_sample_req([1, 33], fanout=2, strategy=pb.TEMPORAL_STRATEGY_RECENT), timeout=10),
        grpc.StatusCode.NOT_FOUND,
        "33",
    ),
}


@pytest.mark.parametrize("case", list(BAD))
def test_bad_requests_get_a_clear_status_and_the_server_keeps_serving(cluster: Cluster, case: str) -> None:
    call, code, text = BAD[case]
    stub = _stub(cluster)
    with pytest.raises(grpc.RpcError) as err:
        call(stub)
    assert err.value.code() == code, err.value.details()
    assert text in err.value.details()
    ok = stub.AppendEdges(_append(f"after-{case}", [1], [2], [1000]), timeout=10)
    assert not ok.duplicate and ok.num_edges == 1


def test_static_graph_refuses_appends_but_samples(tmp_path: Path) -> None:
    root, _ = write_temporal(tmp_path / "g", num_partitions=1)
    running, store = serve(
        GraphStoreSettings(part_dir=root / "part-00000", append_dir="", metrics_port=-1), CollectorRegistry()
    )
    c = GraphStoreClient(running.address)
    try:
        with pytest.raises(FailedPrecondition, match="no append log"):
            c.append_edges("a", np.array([1]), np.array([2]), np.array([500]))
        assert np.diff(c.sample_temporal(np.array([2]), np.array([35]), -1).offsets).tolist() == [4]
        assert not (root / "part-00000" / "appends").exists()
    finally:
        c.close()
        running.stop(0)
        store.close()


def test_appends_interleaved_with_sampling_see_a_consistent_prefix(cluster: Cluster) -> None:
    """Every batch gives every node of partition 0 one edge; a sample must see whole batches only."""
    owned, batches = np.arange(N // 2), 40
    errors: list[BaseException] = []
    done = threading.Event()
    seen: list[int] = []

    def reader() -> None:
        c = GraphStoreClient(cluster.addresses[0])
        try:
            while not done.is_set():
                counts = np.diff(c.sample_temporal(owned, np.full(len(owned), BIG_T), -1).offsets) - J
                assert (counts == counts[0]).all(), f"a sample saw part of a batch: {counts}"
                assert not seen or counts[0] >= seen[-1], "the visible prefix went backwards"
                seen.append(int(counts[0]))
        except BaseException as exc:  # noqa: BLE001 - re-raised in the test thread
            errors.append(exc)
        finally:
            c.close()

    thread = threading.Thread(target=reader)
    thread.start()
    writer = GraphStoreClient(cluster.addresses[0])
    try:
        for b in range(batches):
            writer.append_edges(f"w-{b}", (owned + b) % N, owned[::-1].copy(), np.full(len(owned), 1000 + b))
    finally:
        done.set()
        thread.join(30)
        writer.close()
    assert not errors, errors[0]
    assert seen and seen[-1] <= batches


def _feature_server(root: Path, log_dir: Path, dim: int) -> tuple[RunningServer, GraphStore, CollectorRegistry]:
    """A server whose partition has ``dim`` edge-feature columns (base rows = edge id as float)."""
    reader = PartitionReader(root / "part-00000")
    reader.edge_feat = np.repeat(np.asarray(reader.edge_ids, dtype=np.float32)[:, None], dim, axis=1)
    store = GraphStore(reader, append_dir=log_dir)
    reg = CollectorRegistry()
    servicer = GraphStoreServicer(store, GraphStoreMetrics.create(reg), None, TemporalMetrics.create(reg))
    running = start_server(
        register=lambda s: pb_grpc.add_GraphStoreServiceServicer_to_server(servicer, s),
        service_names=[SERVICE_NAME],
        metrics=RpcMetrics.create(reg),
    )
    return running, store, reg


def test_edge_features_travel_both_ways_and_metrics_count(tmp_path: Path) -> None:
    root, eid_of = write_temporal(tmp_path / "g", num_partitions=1)
    running, store, reg = _feature_server(root, tmp_path / "log", 3)
    client = TemporalClient(RemotePartitionSet([running.address]), client_id="feat")
    try:
        feat = np.array([[1, 2, 3], [4, 5, 6]], dtype=np.float32)
        client.append(np.array([7, 8]), np.array([9, 9]), np.array([500, 501]), feat)
        (s,) = client.sample(np.array([9]), np.array([BIG_T]), [3])
        assert s.efeat is not None and s.efeat.dtype == np.float32
        assert s.efeat.tolist() == [[float(eid_of[9, J - 1])] * 3, [1, 2, 3], [4, 5, 6]]
        (hop,) = client.sample(np.array([9]), np.array([501]), [1])
        assert hop.nbr.tolist() == [7] and hop.efeat is not None and hop.efeat.tolist() == [[1, 2, 3]]
        value = reg.get_sample_value
        assert value("graphfeed_graph_store_appended_edges_total") == 2
        assert value("graphfeed_graph_store_append_bytes_total") == 2 * (24 + 12)
        assert value("graphfeed_graph_store_temporal_edges", {"partition": "0"}) == N * J + 2
        assert value("graphfeed_graph_store_temporal_sampled_roots_total") == 2
        assert value("graphfeed_graph_store_append_latency_seconds_count") == 1
        assert value("graphfeed_graph_store_append_visible_seconds_count") == 1
    finally:
        client.close()
        running.stop(0)
        store.close()


def test_graphfeed_append_replays_a_csv(cluster: Cluster, tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    from graphfeed.cli import main

    rows = [(s, d, 2000 + i) for i, (s, d) in enumerate([(1, 2), (3, 25), (N + 1, N + 2), (4, 2)])]
    csv = tmp_path / "edges.csv"
    csv.write_text("src,dst,t\n" + "".join(f"{s},{d},{t}\n" for s, d, t in rows))
    assert (
        main(["append", "--graph-stores", *cluster.addresses, "--csv", str(csv), "--batch-size", "3", "--undirected"])
        == 0
    )
    assert "appended 8 edges in 2 batches" in capsys.readouterr().out
    client = TemporalClient(RemotePartitionSet(cluster.addresses))
    try:
        (s,) = client.sample(np.array([2, N + 2, N + 1]), np.full(3, BIG_T), [-1])
        assert np.diff(s.offsets).tolist() == [J + 2, 1, 1]
        assert s.nbr[s.offsets[1] - 2 : s.offsets[1]].tolist() == [1, 4] and s.nbr[-2:].tolist() == [N + 1, N + 2]
    finally:
        client.close()


def test_undirected_appends_and_the_store_view_over_two_partitions(cluster: Cluster) -> None:
    """Each event stored both ways lands at both owners; a replayed batch id applies nothing."""
    stores = RemotePartitionSet(cluster.addresses)
    client = TemporalClient(stores, client_id="tgn")
    try:
        client.append(np.array([3, 30]), np.array([30, N + 5]), np.array([700, 701]), None, undirected=True)
        (s,) = client.sample(np.array([30, 3, N + 5]), np.array([702, 702, 702]), [1])
        assert s.nbr.tolist() == [N + 5, 30, 30] and s.ts.tolist() == [701, 700, 701]
        view = TemporalStoreView(client)
        first = view.append("ev-0", np.array([1, 21]), np.array([21, 1]), np.array([800, 800]))
        again = view.append("ev-0", np.array([1, 21]), np.array([21, 1]), np.array([800, 800]))
        assert (first.num_edges, first.duplicate, again.num_edges, again.duplicate) == (2, False, 2, True)
        assert sum(c.temporal_info().num_appended for c in stores.clients) == 4 + 2
        assert view.sample(np.array([21]), np.array([801]), 1).nbr.tolist() == [1]
    finally:
        client.close()


def test_the_view_samples_the_stores_as_of_an_earlier_append(cluster: Cluster) -> None:
    """Versions from the acks over the wire: a partition not in one shows its ingest edges only."""
    client = TemporalClient(RemotePartitionSet(cluster.addresses))
    try:
        view = TemporalStoreView(client)
        assert view.version() == {}
        view.append("a", np.array([5]), np.array([2]), np.array([500]))  # partition 0 only
        v1 = view.version()
        view.append("b", np.array([6, 7]), np.array([2, 22]), np.array([600, 600]))  # both partitions
        assert v1 == {0: 1} and view.version() == {0: 2, 1: 1}
        nodes, times = np.array([2, 22]), np.array([BIG_T, BIG_T])
        newest = lambda s: s.nbr[s.offsets[1:] - 1].tolist()  # noqa: E731 - each root's newest neighbour
        ingest = [(7 * 2 + J - 1) % N, (7 * 22 + J - 1) % N]
        assert newest(view.sample(nodes, times, 1)) == [6, 7]
        assert newest(view.sample(nodes, times, 1, as_of=v1)) == [5, ingest[1]]
        assert newest(view.sample(nodes, times, 1, as_of={})) == ingest
    finally:
        client.close()


def test_two_hops_across_partitions_by_formula(cluster: Cluster) -> None:
    """Hop 2's roots are hop 1's neighbours at their edge times (node v's edge j: (7v + j) % N at 10 j)."""
    client = TemporalClient(RemotePartitionSet(cluster.addresses))
    try:
        v = np.array([3, 33])
        hop1, hop2 = client.sample(v, np.array([1000, 1000]), [2, 2])
        assert hop1.ts.tolist() == [60, 70, 60, 70]
        assert hop1.nbr.tolist() == [(7 * x + j) % N for x in (3, 33) for j in (6, 7)]
        assert np.diff(hop2.offsets).tolist() == [2, 2, 2, 2]
        j2 = [j for t in (60, 70, 60, 70) for j in range(t // 10 - 2, t // 10)]
        assert hop2.ts.tolist() == [10 * j for j in j2]
        assert hop2.nbr.tolist() == [(7 * int(r) + j) % N for r, j in zip(np.repeat(hop1.nbr, 2), j2)]
        a, b = (client.sample(v, np.array([1000, 1000]), [3, 3], "uniform", seed=5) for _ in range(2))
        assert all(np.array_equal(x.eid, y.eid) for x, y in zip(a, b))
    finally:
        client.close()
