"""A real graph-store server on 127.0.0.1: every RPC, its errors, health, reflection, metrics."""

from __future__ import annotations

import os
import urllib.request
from collections.abc import Callable, Iterator
from pathlib import Path

import grpc
import numpy as np
import pytest
from grpc_health.v1 import health_pb2, health_pb2_grpc
from grpc_reflection.v1alpha.proto_reflection_descriptor_database import ProtoReflectionDescriptorDatabase
from prometheus_client import CollectorRegistry

from graphfeed.common import bulk, codec, shm
from graphfeed.graph_store.config import GraphStoreSettings
from graphfeed.graph_store.server import SERVICE_NAME, serve
from graphfeed.graph_store.store import GraphStore
from graphfeed.graph_store.v1 import graph_store_pb2 as pb
from graphfeed.graph_store.v1 import graph_store_pb2_grpc as pb_grpc
from tests.graphs import arithmetic_features, expected_in_neighbors

pytestmark = pytest.mark.integration

N, MAX_DEG, F = 100, 7, 4
MAX_IDS = 64
CHUNK_BYTES = 40  # feat rows are 16 bytes: 2 rows per message


class Server:
    def __init__(self, port: int, metrics_port: int, store: GraphStore, channel: grpc.Channel) -> None:
        self.port, self.metrics_port, self.store, self.channel = port, metrics_port, store, channel
        self.stub = pb_grpc.GraphStoreServiceStub(channel)


@pytest.fixture(scope="module")
def server(arith_root: Path) -> Iterator[Server]:
    settings = GraphStoreSettings(
        part_dir=arith_root / "part-00000",
        port=0,
        metrics_port=0,
        max_ids_per_request=MAX_IDS,
        chunk_bytes=CHUNK_BYTES,
    )
    running, store = serve(settings, registry=CollectorRegistry())
    assert running.metrics_port is not None, "metrics_port=0 serves /metrics on a free port"
    channel = grpc.insecure_channel(running.address)
    try:
        yield Server(running.port, running.metrics_port, store, channel)
    finally:
        channel.close()
        running.stop(0)
        store.close()


def _ids(values: list[int] | np.ndarray, dtype: type = np.int64) -> codec.tensor_pb2.Tensor:
    return codec.encode(np.asarray(values, dtype=dtype))


def _sample(seeds: np.ndarray, fanout: int, replace: bool = False, rng_seed: int = 0) -> pb.SampleNeighborsRequest:
    return pb.SampleNeighborsRequest(seeds=_ids(seeds), fanout=fanout, replace=replace, rng_seed=rng_seed)


def _node_data(stub: pb_grpc.GraphStoreServiceStub, name: str, ids: np.ndarray) -> list[pb.GetNodeDataResponse]:
    return list(stub.GetNodeData(pb.GetNodeDataRequest(name=name, ids=_ids(ids)), timeout=10))


def test_partition_info(server: Server) -> None:
    info = server.stub.GetPartitionInfo(pb.GetPartitionInfoRequest(), timeout=10)
    assert (info.partition_id, info.num_partitions, info.num_nodes) == (0, 2, N)
    assert list(info.node_offsets) == [0, 50, 100]
    assert info.num_edges == sum(1 + v % MAX_DEG for v in range(N))
    schemas = {s.name: s for s in info.node_data}
    assert codec.dtype_from_proto(schemas["feat"].dtype) == np.float32 and list(schemas["feat"].row_shape) == [F]
    assert codec.dtype_from_proto(schemas["label"].dtype) == np.int64 and list(schemas["label"].row_shape) == []
    assert info.num_classes == 3 and info.dataset == "arithmetic-100" and info.schema_version == 2
    # a graph without types is the one-type case: "_N", ("_N", "_E", "_N"), every table of "_N"
    assert list(info.types.ntypes) == ["_N"]
    assert [(e.src_type, e.relation, e.dst_type) for e in info.types.etypes] == [("_N", "_E", "_N")]
    assert list(info.types.ntype_offsets) == [0, 50, 50, 100] and list(info.types.etype_offsets) == [0, info.num_edges]
    assert {s.ntype for s in info.node_data} == {"_N"}
    assert info.num_local_edges == server.store.info().num_local_edges > 0


def test_sample_neighbors_over_the_wire(server: Server, orig: np.ndarray) -> None:
    seeds = np.arange(50, dtype=np.int64)
    resp = server.stub.SampleNeighbors(_sample(seeds, -1), timeout=10)
    offsets, src = codec.decode(resp.offsets, bulk=resp.bulk), codec.decode(resp.src, bulk=resp.bulk)
    assert len(codec.decode(resp.edge_ids, bulk=resp.bulk)) == len(src)
    for i, seed in enumerate(seeds):
        assert set(orig[src[offsets[i] : offsets[i + 1]]].tolist()) == expected_in_neighbors(
            int(orig[seed]), N, MAX_DEG
        )
    # A sampled request gives exactly what the core gives for the same rng_seed.
    resp = server.stub.SampleNeighbors(_sample(seeds, 3, rng_seed=99), timeout=10)
    local = server.store.sample_neighbors(seeds, 3, False, 99)
    assert codec.decode(resp.offsets, bulk=resp.bulk).tobytes() == local.offsets.tobytes()
    src, eids = codec.decode(resp.src, bulk=resp.bulk), codec.decode(resp.edge_ids, bulk=resp.bulk)
    assert src.dtype == eids.dtype == np.int32  # inline, ids that fit travel as int32 (half the bytes)
    assert src.tobytes() == local.src.astype(np.int32).tobytes()
    assert eids.tobytes() == local.edge_ids.astype(np.int32).tobytes()


def test_node_data_streams_in_chunks(server: Server, orig: np.ndarray) -> None:
    ids = np.arange(49, -1, -1, dtype=np.int64)
    msgs = _node_data(server.stub, "feat", ids)
    assert [m.start for m in msgs] == list(range(0, 50, 2))
    assert all(len(m.bulk) <= CHUNK_BYTES + bulk.ALIGN for m in msgs)
    feat = np.concatenate([codec.decode(m.rows, bulk=m.bulk) for m in msgs])
    assert np.array_equal(feat, arithmetic_features(orig[ids]))


def test_degrees_and_split(server: Server, orig: np.ndarray) -> None:
    ids = np.array([5, 0, 49], dtype=np.int64)
    deg = codec.decode(server.stub.GetDegrees(pb.GetDegreesRequest(ids=_ids(ids)), timeout=10).degrees)
    assert deg.tolist() == (1 + orig[ids] % MAX_DEG).tolist()
    train = codec.decode(server.stub.GetSplit(pb.GetSplitRequest(name="train"), timeout=10).ids)
    assert np.array_equal(train, np.flatnonzero(orig[:50] % 5 <= 2))


def _mismatched_bytes() -> pb.SampleNeighborsRequest:
    req = _sample(np.array([0, 1]), 2)
    del req.seeds.shape[:]
    req.seeds.shape.append(3)  # 3 int64s need 24 bytes; 16 are there
    return req


def _too_many() -> np.ndarray:
    return np.zeros(MAX_IDS + 1, dtype=np.int64)


BAD_CALLS: dict[str, tuple[Callable[[pb_grpc.GraphStoreServiceStub], object], grpc.StatusCode, str]] = {
    "float32 seeds": (
        lambda s: s.SampleNeighbors(pb.SampleNeighborsRequest(seeds=_ids([0, 1], np.float32), fanout=2), timeout=10),
        grpc.StatusCode.INVALID_ARGUMENT,
        "DTYPE_INT64",
    ),
    "2-D seeds": (
        lambda s: s.SampleNeighbors(
            pb.SampleNeighborsRequest(seeds=codec.encode(np.zeros((2, 2), np.int64)), fanout=2), timeout=10
        ),
        grpc.StatusCode.INVALID_ARGUMENT,
        "1-D",
    ),
    "empty seeds": (
        lambda s: s.SampleNeighbors(_sample(np.array([]), 2), timeout=10),
        grpc.StatusCode.INVALID_ARGUMENT,
        "empty",
    ),
    "fanout -5": (
        lambda s: s.SampleNeighbors(_sample(np.array([0]), -5), timeout=10),
        grpc.StatusCode.INVALID_ARGUMENT,
        "fanout",
    ),
    "shape/bytes mismatch": (
        lambda s: s.SampleNeighbors(_mismatched_bytes(), timeout=10),
        grpc.StatusCode.INVALID_ARGUMENT,
        "bytes",
    ),
    "unowned seed": (
        lambda s: s.SampleNeighbors(_sample(np.array([0, 99]), 2), timeout=10),
        grpc.StatusCode.NOT_FOUND,
        "99",
    ),
    "unowned node-data id": (lambda s: _node_data(s, "feat", np.array([50])), grpc.StatusCode.NOT_FOUND, "[0, 50)"),
    "unowned degree id": (
        lambda s: s.GetDegrees(pb.GetDegreesRequest(ids=_ids([-3])), timeout=10),
        grpc.StatusCode.NOT_FOUND,
        "-3",
    ),
    "unknown node data": (lambda s: _node_data(s, "embedding", np.array([0])), grpc.StatusCode.NOT_FOUND, "embedding"),
    "unknown split": (
        lambda s: s.GetSplit(pb.GetSplitRequest(name="holdout"), timeout=10),
        grpc.StatusCode.NOT_FOUND,
        "holdout",
    ),
    # Echoed back clipped: 16 KB in the status message would exceed gRPC's metadata limit.
    "16 KB split name": (
        lambda s: s.GetSplit(pb.GetSplitRequest(name="x" * 16_000), timeout=10),
        grpc.StatusCode.NOT_FOUND,
        "characters cut",
    ),
    "first_position >= 2^63": (
        lambda s: s.SampleNeighbors(
            pb.SampleNeighborsRequest(seeds=_ids(np.array([0])), fanout=2, first_position=1 << 63), timeout=10
        ),
        grpc.StatusCode.INVALID_ARGUMENT,
        "first_position",
    ),
    "too many seeds": (
        lambda s: s.SampleNeighbors(_sample(_too_many(), 2), timeout=10),
        grpc.StatusCode.RESOURCE_EXHAUSTED,
        "limit of 64",
    ),
    "too many node-data ids": (
        lambda s: _node_data(s, "label", _too_many()),
        grpc.StatusCode.RESOURCE_EXHAUSTED,
        "limit of 64",
    ),
}


@pytest.mark.parametrize("case", list(BAD_CALLS))
def test_bad_requests_get_the_documented_status(server: Server, case: str) -> None:
    call, code, text = BAD_CALLS[case]
    with pytest.raises(grpc.RpcError) as info:
        call(server.stub)
    assert info.value.code() == code
    assert text in info.value.details()
    # The server is still healthy and answers a good request.
    resp = server.stub.SampleNeighbors(_sample(np.array([0, 1]), 2), timeout=10)
    assert len(codec.decode(resp.offsets, bulk=resp.bulk)) == 3


def test_health_reports_serving(server: Server) -> None:
    health = health_pb2_grpc.HealthStub(server.channel)
    for name in ("", SERVICE_NAME):
        resp = health.Check(health_pb2.HealthCheckRequest(service=name), timeout=10)
        assert resp.status == health_pb2.HealthCheckResponse.SERVING


def test_reflection_lists_the_service(server: Server) -> None:
    db = ProtoReflectionDescriptorDatabase(server.channel)
    assert SERVICE_NAME == "graphfeed.graph_store.v1.GraphStoreService"
    assert SERVICE_NAME in db.get_services()
    assert db.FindFileContainingSymbol(SERVICE_NAME).name.endswith("graph_store.proto")


def _scrape(port: int) -> str:
    with urllib.request.urlopen(f"http://127.0.0.1:{port}/metrics", timeout=10) as resp:
        return resp.read().decode()


def test_metrics_endpoint_counts_codes_and_domain_metrics(server: Server) -> None:
    with pytest.raises(grpc.RpcError):
        server.stub.SampleNeighbors(_sample(np.array([0]), -5), timeout=10)
    server.stub.SampleNeighbors(_sample(np.array([0, 1]), -1), timeout=10)
    _node_data(server.stub, "label", np.array([0, 1, 2]))
    text = _scrape(server.metrics_port)
    lines = text.splitlines()
    bad = [ln for ln in lines if ln.startswith("graphfeed_rpc_requests_total{") and 'code="INVALID_ARGUMENT"' in ln]
    assert any('method="SampleNeighbors"' in ln and float(ln.split()[-1]) >= 1 for ln in bad), bad
    assert 'graphfeed_graph_store_partition_info{partition="0"} 1.0' in lines
    value = {ln.split()[0]: float(ln.split()[1]) for ln in lines if ln and not ln.startswith("#")}
    assert value["graphfeed_graph_store_sampled_edges_total"] >= 4  # 1 + 3 in-edges of input nodes 0 and 2
    assert value['graphfeed_graph_store_node_data_rows_total{name="label"}'] >= 3
    assert value['graphfeed_graph_store_node_data_bytes_total{name="label"}'] >= 24
    assert value["graphfeed_graph_store_rocksdb_bytes"] > 0
    assert value["graphfeed_graph_store_sampling_latency_seconds_count"] >= 1
    assert 'name="embedding"' not in text, "unknown names must not become label values"


def _counter(port: int, name: str) -> float:
    return sum(float(ln.split()[-1]) for ln in _scrape(port).splitlines() if ln.startswith(name))


def test_rpc_byte_counters_are_the_serialized_lengths(server: Server) -> None:
    sel = '{method="SampleNeighbors",service="GraphStoreService"}'
    req_before = _counter(server.metrics_port, "graphfeed_rpc_request_bytes_total" + sel)
    resp_before = _counter(server.metrics_port, "graphfeed_rpc_response_bytes_total" + sel)
    req = _sample(np.array([0, 1, 2]), 2, rng_seed=9)
    resp = server.stub.SampleNeighbors(req, timeout=10)
    assert _counter(server.metrics_port, "graphfeed_rpc_request_bytes_total" + sel) - req_before == len(
        req.SerializeToString()
    )
    assert _counter(server.metrics_port, "graphfeed_rpc_response_bytes_total" + sel) - resp_before == len(
        resp.SerializeToString()
    )


# -- GetNodeData straight into the caller's shared memory ------------------------------------

needs_shm = pytest.mark.skipif(
    not shm.DEFAULT_DIR.is_dir() or not os.access(shm.DEFAULT_DIR, os.W_OK), reason="needs /dev/shm"
)


def _target_request(ids: np.ndarray, segment: str, num_rows: int, positions: np.ndarray) -> pb.GetNodeDataRequest:
    req = pb.GetNodeDataRequest(name="feat", ids=_ids(ids))
    req.target.segment, req.target.offset, req.target.num_rows = segment, 0, num_rows
    codec.encode(np.asarray(positions, dtype=np.int64), req.target.positions)
    return req


@needs_shm
def test_node_data_written_into_the_callers_segment(server: Server, orig: np.ndarray) -> None:
    offer = shm.shared_offer()
    assert offer is not None, "needs_shm: the offer directory is usable"
    ids = np.arange(10, dtype=np.int64)
    positions = np.arange(19, -1, -2, dtype=np.int64)  # rows 19, 17, .., 1 of a 20-row array
    seg = shm.Segment.create(shm.DEFAULT_DIR, 20 * F * 4)  # feat rows: F float32
    try:
        out = seg.array(0, (20, F), np.float32)
        out[:] = -1
        shm_before = _counter(server.metrics_port, 'graphfeed_rpc_response_shm_bytes_total{method="GetNodeData"')
        msgs = list(
            server.stub.GetNodeData(
                _target_request(ids, seg.name, 20, positions), timeout=10, metadata=offer.metadata()
            )
        )
        assert [m.rows_written for m in msgs] == [10] and not msgs[0].rows.shape
        assert np.array_equal(out[positions], arithmetic_features(orig[ids]))
        assert np.all(out[np.setdiff1d(np.arange(20), positions)] == -1), "other rows untouched"
        assert seg.path.exists(), "the caller's segment is not claimed by the writer"
        grown = (
            _counter(server.metrics_port, 'graphfeed_rpc_response_shm_bytes_total{method="GetNodeData"') - shm_before
        )
        assert grown == 10 * F * 4
    finally:
        seg.close()
        seg.path.unlink()


@needs_shm
@pytest.mark.parametrize("case", ["no offer", "position out of range", "bad segment name", "segment gone", "too small"])
def test_bad_node_data_targets_get_a_clear_status(server: Server, case: str) -> None:
    offer = shm.shared_offer()
    assert offer is not None, "needs_shm: the offer directory is usable"
    seg = shm.Segment.create(shm.DEFAULT_DIR, 4 * F * 4)  # room for 4 float32 feat rows
    ids, name, rows, pos = np.arange(2), seg.name, 4, np.array([0, 1])
    metadata: tuple[tuple[str, str], ...] | None = offer.metadata()
    expected = grpc.StatusCode.INVALID_ARGUMENT
    if case == "no offer":
        metadata, expected = None, grpc.StatusCode.FAILED_PRECONDITION
    elif case == "position out of range":
        pos = np.array([0, 4])
    elif case == "bad segment name":
        name = "../etc/passwd"
    elif case == "segment gone":
        name, expected = (
            seg.name[:-8] + "00000000",
            grpc.StatusCode.FAILED_PRECONDITION,
        )  # the caller's own segment: retrying cannot help
    elif case == "too small":
        rows = 5
    try:
        with pytest.raises(grpc.RpcError) as err:
            list(server.stub.GetNodeData(_target_request(ids, name, rows, pos), timeout=10, metadata=metadata))
        assert err.value.code() == expected, err.value.details()
        assert seg.array(0, (4, F), np.float32).sum() == 0, "nothing written on a rejected request"
        assert len(_node_data(server.stub, "feat", np.array([0]))) == 1, "still serving"
    finally:
        seg.close()
        seg.path.unlink()
