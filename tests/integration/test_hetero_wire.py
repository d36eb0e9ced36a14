"""Typed graphs over gRPC: two graph-store servers and a sampler server of the arithmetic
heterograph (tests/hetero_graphs.py) answer byte for byte as the in-process cores do, inline
and through shared memory; the schema round-trips GetPartitionInfo; bad edge-type fanouts get
INVALID_ARGUMENT and the servers keep serving."""

from __future__ import annotations

import os
import urllib.request
from collections.abc import Iterator
from dataclasses import dataclass

import grpc
import numpy as np
import pytest

from graphfeed.common import blocks as blocks_codec
from graphfeed.common import codec
from graphfeed.common.errors import InvalidArgument, NotFound
from graphfeed.common.partition import part_dir_name
from graphfeed.common.rpc import RunningServer
from graphfeed.common.v1 import tensor_pb2
from graphfeed.graph_store.client import GraphStoreClient
from graphfeed.graph_store.config import GraphStoreSettings
from graphfeed.graph_store.fanout import fetch_rows
from graphfeed.graph_store.partitions import LocalPartitionSet, RemotePartitionSet
from graphfeed.graph_store.peers import partition_info
from graphfeed.graph_store.server import serve as serve_graph_store
from graphfeed.graph_store.store import GraphStore
from graphfeed.graph_store.types import Fanout
from graphfeed.graph_store.v1 import graph_store_pb2 as gs_pb
from graphfeed.graph_store.v1 import graph_store_pb2_grpc as gs_grpc
from graphfeed.sampler.client import SamplerClient, encode_fanouts
from graphfeed.sampler.config import SamplerSettings
from graphfeed.sampler.core import MultiHopSampler
from graphfeed.sampler.server import serve as serve_sampler
from graphfeed.sampler.v1 import sampler_pb2 as pb
from graphfeed.sampler.v1 import sampler_pb2_grpc as pb_grpc
from tests.hetero_graphs import ETYPES, item_feat, mixed_seeds, write_hetero

pytestmark = pytest.mark.integration

R = len(ETYPES)
SHM = "/dev/shm"
needs_shm = pytest.mark.skipif(not os.access(SHM, os.W_OK), reason="needs a writable /dev/shm")


@dataclass
class Cluster:
    stores: list[GraphStore]  # by partition id, the servers' own cores
    store_servers: list[RunningServer]  # by partition id
    sampler: RunningServer
    local: MultiHopSampler  # in-process over the same cores
    orig: np.ndarray  # gid -> type-wise input id

    @property
    def addresses(self) -> list[str]:
        return [s.address for s in self.store_servers]


@pytest.fixture(scope="module")
def cluster(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Cluster]:
    root = write_hetero(tmp_path_factory.mktemp("hetero-wire"))
    servers: list[tuple[RunningServer, GraphStore]] = []
    sampler: tuple[RunningServer, MultiHopSampler] | None = None
    try:
        for p in range(2):
            settings = GraphStoreSettings(part_dir=root / part_dir_name(p), port=0, metrics_port=0)
            servers.append(serve_graph_store(settings))
        # 3 seeds per graph-store call: a hop's share goes out in several calls (first_position)
        sampler_settings = SamplerSettings(
            graph_store_addresses=[s.address for s, _ in servers[::-1]], port=0, metrics_port=-1, max_ids_per_request=3
        )
        sampler = serve_sampler(sampler_settings)
        stores = [st for _, st in servers]
        local = MultiHopSampler(LocalPartitionSet(stores))
        yield Cluster(stores, [s for s, _ in servers], sampler[0], local, np.load(root / "orig_ids.npy"))
    finally:
        if sampler is not None:
            sampler[0].stop(0)
            sampler[1].partitions.close()
        for s, st in servers:
            s.stop(0)
            st.close()


def shm_bytes(server: RunningServer, method: str) -> float:
    assert server.metrics_port is not None
    with urllib.request.urlopen(f"http://127.0.0.1:{server.metrics_port}/metrics", timeout=10) as r:
        text = r.read().decode()
    key = f'graphfeed_rpc_response_shm_bytes_total{{method="{method}"'
    return sum(float(line.split()[-1]) for line in text.splitlines() if line.startswith(key))


def test_partition_info_round_trips_the_schema(cluster: Cluster) -> None:
    want = cluster.stores[0].schema
    for p, address in enumerate(cluster.addresses):
        for info in (GraphStoreClient(address, timeout_s=10).info(), partition_info(address, 10)):
            assert info.partition_id == p and info.schema is not None
            assert info.types.ntypes == want.ntypes == ("user", "item", "tag") and info.types.etypes == ETYPES
            np.testing.assert_array_equal(info.types.ntype_offsets, want.ntype_offsets)
            np.testing.assert_array_equal(info.types.etype_offsets, want.etype_offsets)
            assert {n: (d.ntype, d.row_shape, d.dtype) for n, d in info.node_data.items()} == {
                "user/feat": ("user", (3,), np.float32),
                "item/feat": ("item", (5,), np.float32),
                "item/label": ("item", (), np.int64),
            }
    remote = RemotePartitionSet(cluster.addresses[::-1], timeout_s=10)
    try:
        assert remote.info.types.to_dict() == want.to_dict()
    finally:
        remote.close()


@pytest.mark.parametrize("shm_dir", [None, pytest.param(SHM, marks=needs_shm)], ids=["inline", "shm"])
def test_sample_neighbors_over_grpc_equals_the_core(cluster: Cluster, shm_dir: str | None) -> None:
    fanouts: list[Fanout] = [-1, 2, [2, 1, 0, 3], [-1] * R, np.array([1, 1, 1, 1])]  # type: ignore[list-item]
    for p, (store, server) in enumerate(zip(cluster.stores, cluster.store_servers)):
        client = GraphStoreClient(server.address, timeout_s=10, shm_dir=shm_dir)
        before = shm_bytes(server, "SampleNeighbors")
        try:
            seeds = np.arange(store.start, store.stop, dtype=np.int64)[::-1].copy()
            for fanout in fanouts:
                for replace in (False, True):
                    got = client.sample_neighbors(seeds, fanout, replace, 31 + p, first_position=5)
                    want = store.sample_neighbors(seeds, fanout, replace, 31 + p, None, 5)
                    assert got.offsets.dtype == np.int64 and got.offsets.tobytes() == want.offsets.tobytes()
                    # inline, the ids travel as int32 (they fit): the values are the core's
                    wire = np.int64 if shm_dir is not None else np.int32
                    for g, w in ((got.src, want.src), (got.edge_ids, want.edge_ids)):
                        assert g.dtype == wire and g.tobytes() == w.astype(wire).tobytes(), (fanout, replace)
        finally:
            client.close()
        moved = shm_bytes(server, "SampleNeighbors") - before
        assert (moved > 0) == (shm_dir is not None), "inline answers stay inline, shm ones go through the segment"


def test_node_data_per_type_over_grpc(cluster: Cluster) -> None:
    remote = RemotePartitionSet(cluster.addresses, timeout_s=10)
    try:
        schema = remote.info.types
        items = np.concatenate([np.arange(*schema.owned_range(p, "item")) for p in (1, 0)])
        rows, _ = fetch_rows(remote, "item/feat", items, 4)
        np.testing.assert_array_equal(rows, item_feat(cluster.orig[items]))
        user = schema.owned_range(1, "user")[0]
        with pytest.raises(NotFound, match="are not item nodes owned by partition 1"):
            remote.clients[1].get_node_data("item/feat", np.array([user]))
    finally:
        remote.close()


SAMPLER_FANOUTS: list[list[Fanout]] = [[[2, 1, 1, 1], [1, 2, 0, 2]], [3, [1, 0, 2, 1]], [-1, -1], [[-1] * R]]


@pytest.mark.parametrize("shm_dir", [None, pytest.param(SHM, marks=needs_shm)], ids=["inline", "shm"])
@pytest.mark.parametrize("fanouts", SAMPLER_FANOUTS, ids=["per-etype", "mixed", "all", "all-per-etype"])
def test_sampler_over_grpc_equals_in_process(cluster: Cluster, shm_dir: str | None, fanouts: list[Fanout]) -> None:
    seeds = mixed_seeds(cluster.stores[0].schema)
    want = cluster.local.sample(seeds, fanouts, False, 5, 1, 4)
    assert want.num_sampled_edges > 0
    with SamplerClient(cluster.sampler.address, timeout_s=10, shm_dir=shm_dir) as client:
        got = client.sample(seeds, fanouts, False, 5, 1, 4)
    assert (
        blocks_codec.to_proto(got, narrow=True).SerializeToString()
        == blocks_codec.to_proto(want, narrow=True).SerializeToString()
    )  # the wire narrows edge arrays to int32


def blocks_request(fanouts: list[int], etype_fanouts: list[int], seeds: np.ndarray) -> pb.SampleBlocksRequest:
    req = pb.SampleBlocksRequest(
        fanouts=fanouts, etype_fanouts=etype_fanouts, step_key=tensor_pb2.StepKey(job_seed=5, epoch=1, step=4)
    )
    codec.encode(seeds, req.seeds)
    return req


def test_etype_fanouts_are_layer_major_on_the_wire(cluster: Cluster) -> None:
    seeds = mixed_seeds(cluster.stores[0].schema)
    layers = [[2, 1, 1, 1], [1, 2, 0, 2]]
    assert encode_fanouts([layers[0], 4]) == ([2, 4], [2, 1, 1, 1, 4, 4, 4, 4])
    with grpc.insecure_channel(cluster.sampler.address) as ch:
        resp = pb_grpc.SamplerServiceStub(ch).SampleBlocks(
            blocks_request([0, 0], [f for layer in layers for f in layer], seeds), timeout=10
        )
    got = blocks_codec.from_proto(resp.blocks, bulk=resp.bulk)
    want = cluster.local.sample(seeds, layers, False, 5, 1, 4)
    assert (
        blocks_codec.to_proto(got, narrow=True).SerializeToString()
        == blocks_codec.to_proto(want, narrow=True).SerializeToString()
    )  # the wire narrows edge arrays to int32


def test_wrong_count_of_etype_fanouts_is_invalid_and_servers_keep_serving(cluster: Cluster) -> None:
    store, server = cluster.stores[0], cluster.store_servers[0]
    seeds = np.arange(store.start, store.stop, dtype=np.int64)
    with grpc.insecure_channel(server.address) as ch:
        stub = gs_grpc.GraphStoreServiceStub(ch)
        req = gs_pb.SampleNeighborsRequest(seeds=codec.encode(seeds), fanout=2, etype_fanouts=[1, 2])
        with pytest.raises(grpc.RpcError) as info:
            stub.SampleNeighbors(req, timeout=10)
        assert info.value.code() == grpc.StatusCode.INVALID_ARGUMENT
        assert "2 fanouts for the graph's 4 edge types" in (info.value.details() or "")
        ok = stub.SampleNeighbors(gs_pb.SampleNeighborsRequest(seeds=codec.encode(seeds), fanout=2), timeout=10)
        assert len(ok.offsets.shape) == 1
    client = GraphStoreClient(server.address, timeout_s=10)
    try:
        with pytest.raises(InvalidArgument, match="5 fanouts for the graph's 4 edge types"):
            client.sample_neighbors(seeds, [1] * 5, False, 0)
        assert len(client.sample_neighbors(seeds, [1] * R, False, 0).offsets) == len(seeds) + 1
    finally:
        client.close()

    sample_seeds = mixed_seeds(store.schema)
    with grpc.insecure_channel(cluster.sampler.address) as ch:
        stub2 = pb_grpc.SamplerServiceStub(ch)
        for fanouts, flat, detail in (
            (
                [2, 2],
                [1, 1, 1],
                "etype_fanouts has 3 entries for 2 layers; the graph has 4 edge types ['user:buys:item'",
            ),
            ([2], [1, 1, 1, 99999], "out of range"),
        ):
            with pytest.raises(grpc.RpcError) as info:
                stub2.SampleBlocks(blocks_request(fanouts, flat, sample_seeds), timeout=10)
            assert info.value.code() == grpc.StatusCode.INVALID_ARGUMENT
            assert detail in (info.value.details() or "")
        assert stub2.SampleBlocks(blocks_request([2], [], sample_seeds), timeout=10).blocks.num_sampled_edges > 0
    with SamplerClient(cluster.sampler.address, timeout_s=10) as sc:
        with pytest.raises(InvalidArgument, match=r"has 2 entries for 1 layers; the graph has 4 edge types"):
            sc.sample(sample_seeds, [[1, 2]], False, 0, 0, 0)
        with pytest.raises(InvalidArgument, match="each must give one per edge type"):
            sc.sample(sample_seeds, [[1, 2], [1, 1, 1, 1]], False, 0, 0, 0)
        assert sc.sample(sample_seeds, [[1] * R], False, 0, 0, 0).num_sampled_edges > 0
