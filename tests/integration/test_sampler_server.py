"""A real sampler server over two real graph-store servers of the arithmetic graph."""

from __future__ import annotations

import os
import urllib.request
from collections.abc import Callable, Iterator
from pathlib import Path

import grpc
import numpy as np
import numpy.typing as npt
import pytest

from graphfeed.common import blocks as blocks_codec
from graphfeed.common import codec
from graphfeed.common.errors import InvalidArgument, NotFound
from graphfeed.common.rpc import RunningServer
from graphfeed.common.transport import ClientTransport
from graphfeed.common.v1 import tensor_pb2
from graphfeed.graph_store.config import GraphStoreSettings
from graphfeed.graph_store.partitions import LocalPartitionSet
from graphfeed.graph_store.server import serve as serve_graph_store
from graphfeed.graph_store.store import GraphStore
from graphfeed.sampler.client import SamplerClient
from graphfeed.sampler.config import SamplerSettings
from graphfeed.sampler.core import MultiHopSampler
from graphfeed.sampler.server import serve as serve_sampler
from graphfeed.sampler.v1 import sampler_pb2 as pb
from graphfeed.sampler.v1 import sampler_pb2_grpc as pb_grpc

pytestmark = pytest.mark.integration

MAX_SEEDS, MAX_FANOUT = 8, 20
SEEDS = [3, 0, 42, 8, 99, 5, 61]
FANOUTS = [3, 2]


@pytest.fixture(scope="module")
def graph_stores(arith_root: Path) -> Iterator[list[str]]:
    running: list[tuple[RunningServer, GraphStore]] = []
    try:
        # Started in reverse partition order: the sampler must not depend on address order.
        for p in (1, 0):
            settings = GraphStoreSettings(part_dir=arith_root / f"part-0000{p}", port=0, metrics_port=-1)
            running.append(serve_graph_store(settings))
        yield [r.address for r, _ in running]
    finally:
        for r, store in running:
            r.stop(0)
            store.close()


@pytest.fixture(scope="module")
def sampler_server(graph_stores: list[str]) -> Iterator[RunningServer]:
    settings = SamplerSettings(
        graph_store_addresses=graph_stores,
        port=0,
        metrics_port=0,
        max_seeds_per_request=MAX_SEEDS,
        max_fanout=MAX_FANOUT,
    )
    running, sampler = serve_sampler(settings)
    yield running
    running.stop(0)
    sampler.partitions.close()


@pytest.fixture(scope="module")
def stub(sampler_server: RunningServer) -> Iterator[pb_grpc.SamplerServiceStub]:
    channel = grpc.insecure_channel(sampler_server.address)
    yield pb_grpc.SamplerServiceStub(channel)
    channel.close()


@pytest.fixture(scope="module")
def local_sampler(arith_root: Path) -> Iterator[MultiHopSampler]:
    stores = [GraphStore.open(arith_root / f"part-0000{p}") for p in (0, 1)]
    yield MultiHopSampler(LocalPartitionSet(stores), max_seeds=MAX_SEEDS, max_fanout=MAX_FANOUT)
    for s in stores:
        s.close()


def request(
    seeds: list[int] | None = None,
    fanouts: list[int] | None = None,
    replace: bool = False,
    job_seed: int = 5,
    epoch: int = 1,
    step: int = 4,
    dtype: npt.DTypeLike = np.int64,
    exclude: tuple[list[int], list[int]] | None = None,
    exclude_dtype: npt.DTypeLike = np.int64,
) -> pb.SampleBlocksRequest:
    req = pb.SampleBlocksRequest(
        fanouts=FANOUTS if fanouts is None else fanouts,
        replace=replace,
        step_key=tensor_pb2.StepKey(job_seed=job_seed, epoch=epoch, step=step),
    )
    codec.encode(np.array(SEEDS if seeds is None else seeds, dtype=dtype), req.seeds)
    if exclude is not None:
        codec.encode_exclusion(
            (np.array(exclude[0], dtype=exclude_dtype), np.array(exclude[1], dtype=exclude_dtype)), req
        )
    return req


def test_matches_in_process_sampler_byte_for_byte(
    stub: pb_grpc.SamplerServiceStub, local_sampler: MultiHopSampler
) -> None:
    for replace in (False, True):
        resp = stub.SampleBlocks(request(replace=replace), timeout=10)
        local = local_sampler.sample(np.array(SEEDS, dtype=np.int64), [3, 2], replace, 5, 1, 4)
        got = blocks_codec.from_proto(resp.blocks, bulk=resp.bulk)  # a plain protobuf reader: tensors in the bulk field
        # On the wire the edge arrays are narrowed to int32 (half the bytes); the values are the same.
        assert {b.edge_src.dtype for b in got.blocks} | {b.edge_ids.dtype for b in got.blocks} == {np.dtype(np.int32)}
        assert np.array_equal(got.input_nodes, local.input_nodes) and got.input_nodes.dtype == np.int64
        for g, w in zip(got.blocks, local.blocks, strict=True):
            assert (g.num_src, g.num_dst) == (w.num_src, w.num_dst)
            for name in ("edge_src", "edge_dst", "edge_ids"):
                assert np.array_equal(getattr(g, name), getattr(w, name)), name
        assert resp.blocks.num_sampled_edges == local.num_sampled_edges > 0


def test_same_request_gives_identical_bytes(stub: pb_grpc.SamplerServiceStub) -> None:
    first = stub.SampleBlocks(request(), timeout=10).SerializeToString()
    assert stub.SampleBlocks(request(), timeout=10).SerializeToString() == first
    assert stub.SampleBlocks(request(step=5), timeout=10).SerializeToString() != first


@pytest.mark.parametrize(
    ("req", "code", "details"),
    [
        (lambda: request(seeds=[]), grpc.StatusCode.INVALID_ARGUMENT, "seeds must not be empty"),
        (lambda: request(dtype=np.float32), grpc.StatusCode.INVALID_ARGUMENT, "seeds must be DTYPE_INT64"),
        (lambda: request(fanouts=[2, -7]), grpc.StatusCode.INVALID_ARGUMENT, f"-1 (all) or in [0, {MAX_FANOUT}]"),
        (
            lambda: request(fanouts=[MAX_FANOUT + 1]),
            grpc.StatusCode.INVALID_ARGUMENT,
            f"[{MAX_FANOUT + 1}] out of range",
        ),
        (lambda: request(fanouts=[]), grpc.StatusCode.INVALID_ARGUMENT, "at least one layer"),
        (lambda: request(seeds=[4, 7, 4]), grpc.StatusCode.INVALID_ARGUMENT, "duplicate seeds: [4]"),
        (lambda: request(seeds=[1, 100]), grpc.StatusCode.NOT_FOUND, "outside the graph [0, 100), e.g. [100]"),
        (
            lambda: request(seeds=list(range(MAX_SEEDS + 1))),
            grpc.StatusCode.RESOURCE_EXHAUSTED,
            f"limit of {MAX_SEEDS}",
        ),
        (
            lambda: request(exclude=([3, 0], [1])),
            grpc.StatusCode.INVALID_ARGUMENT,
            "exclude_dst and exclude_eids must have equal lengths",
        ),
        (
            lambda: request(exclude=([3], [1]), exclude_dtype=np.int32),
            grpc.StatusCode.INVALID_ARGUMENT,
            "exclude_dst must be DTYPE_INT64",
        ),
    ],
    ids=[
        "empty",
        "float",
        "fanout-7",
        "fanout-too-big",
        "no-fanouts",
        "duplicates",
        "not-found",
        "too-many",
        "exclude-lengths",
        "exclude-int32",
    ],
)
def test_bad_requests_get_status_and_server_keeps_serving(
    stub: pb_grpc.SamplerServiceStub,
    req: Callable[[], pb.SampleBlocksRequest],
    code: grpc.StatusCode,
    details: str,
) -> None:
    with pytest.raises(grpc.RpcError) as info:
        stub.SampleBlocks(req(), timeout=10)
    assert info.value.code() == code
    assert details in info.value.details()
    assert stub.SampleBlocks(request(), timeout=10).blocks.num_sampled_edges > 0


def test_client_round_trip(sampler_server: RunningServer, local_sampler: MultiHopSampler) -> None:
    seeds = np.array(SEEDS, dtype=np.int64)
    with SamplerClient(sampler_server.address, timeout_s=10) as client:
        got = client.sample(seeds, [3, 2], False, 5, 1, 4)
        want = local_sampler.sample(seeds, [3, 2], False, 5, 1, 4)
        np.testing.assert_array_equal(got.output_nodes, seeds)
        assert (
            blocks_codec.to_proto(got, narrow=True).SerializeToString()
            == blocks_codec.to_proto(want, narrow=True).SerializeToString()
        )  # the wire narrows edge arrays to int32
        with pytest.raises(NotFound, match="outside the graph"):
            client.sample(np.array([100], dtype=np.int64), [2], False, 0, 0, 0)
        with pytest.raises(InvalidArgument, match="out of range"):
            client.sample(seeds, [-7], False, 0, 0, 0)


def test_exclusion_leaves_the_edges_out_of_every_hop(
    sampler_server: RunningServer, local_sampler: MultiHopSampler
) -> None:
    """Through the sampler and the graph-stores over gRPC: no excluded edge in any block, the
    in-process sampler's bytes, and a malformed exclusion refused while the server keeps serving."""
    seeds = np.array(SEEDS, dtype=np.int64)
    with SamplerClient(sampler_server.address, timeout_s=10) as client:
        plain = client.sample(seeds, [3, -1], False, 5, 1, 4)
        dst = np.concatenate([plain.input_nodes[: b.num_dst][b.edge_dst] for b in plain.blocks])
        eids = np.concatenate([b.edge_ids for b in plain.blocks]).astype(np.int64)  # int32 on the wire
        exclude = (dst[::2].copy(), eids[::2].copy())  # half of what both hops sampled
        got = client.sample(seeds, [3, -1], False, 5, 1, 4, exclude=exclude)
        sampled = np.concatenate([b.edge_ids for b in got.blocks]).astype(np.int64)
        assert len(sampled) and not np.isin(sampled, exclude[1]).any()
        want = local_sampler.sample(seeds, [3, -1], False, 5, 1, 4, exclude=exclude)
        assert (
            blocks_codec.to_proto(got, narrow=True).SerializeToString()
            == blocks_codec.to_proto(want, narrow=True).SerializeToString()
        )
        with pytest.raises(InvalidArgument, match="exclude_dst and exclude_eids must have equal lengths"):
            client.sample(seeds, [3, -1], False, 5, 1, 4, exclude=(dst[:3], eids[:2]))
        assert client.sample(seeds, [3, -1], False, 5, 1, 4, exclude=exclude).num_sampled_edges == got.num_sampled_edges


@pytest.mark.parametrize("fanouts", [[3, 2], [-1, 4], [0, 2], [2]])
def test_shared_memory_answers_equal_the_in_process_sampler(
    sampler_server: RunningServer, local_sampler: MultiHopSampler, fanouts: list[int]
) -> None:
    """Through /dev/shm the input layer is compacted straight into the response segment (and the
    rest copied into a second): the bytes must be the in-process sampler's, and every segment claimed."""
    transport = ClientTransport("/dev/shm")
    with grpc.insecure_channel(sampler_server.address) as ch:
        resp = pb_grpc.SamplerServiceStub(ch).SampleBlocks(
            request(fanouts=fanouts), timeout=10, metadata=transport.metadata
        )
    refs = [
        t.shm.segment for t in (resp.blocks.input_nodes, resp.blocks.output_nodes) if t.WhichOneof("payload") == "shm"
    ]
    assert len(set(refs)) == 2, "input layer in one segment, the rest in another"
    got = blocks_codec.from_proto(resp.blocks, transport.reader())
    assert not [n for n in os.listdir("/dev/shm") if n in refs], "both segments claimed"
    want = local_sampler.sample(np.array(SEEDS, dtype=np.int64), fanouts, False, 5, 1, 4)
    assert (
        blocks_codec.to_proto(got, narrow=True).SerializeToString()
        == blocks_codec.to_proto(want, narrow=True).SerializeToString()
    )  # the wire narrows edge arrays to int32


def metric(text: str, name: str) -> float:
    return sum(
        float(line.split()[-1]) for line in text.splitlines() if line.startswith(name) and not line.startswith("#")
    )


def test_metrics_endpoint_counts_sampling(stub: pb_grpc.SamplerServiceStub, sampler_server: RunningServer) -> None:
    stub.SampleBlocks(request(), timeout=10)
    with urllib.request.urlopen(f"http://127.0.0.1:{sampler_server.metrics_port}/metrics", timeout=10) as r:
        text = r.read().decode()
    assert metric(text, "graphfeed_sampler_sampled_edges_total") > 0
    assert metric(text, "graphfeed_sampler_minibatches_total") >= 1
    assert metric(text, 'graphfeed_sampler_partition_requests_total{partition="0"}') >= 2
    assert metric(text, 'graphfeed_sampler_partition_requests_total{partition="1"}') >= 2
    assert metric(text, "graphfeed_sampler_partition_request_seeds_total") > 0
    assert metric(text, "graphfeed_sampler_sampling_latency_seconds_count") >= 1
