"""Loader server over real graph-store and sampler servers on loopback: DescribeJob, a full
epoch through the stub, documented error codes, cancellation, and the metrics endpoint."""

from __future__ import annotations

import os
import threading
import time
import urllib.request
from collections.abc import Callable, Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import grpc
import numpy as np
import pytest
import torch
from prometheus_client import CollectorRegistry
from prometheus_client.parser import text_string_to_metric_families

from graphfeed.common import blocks, bulk, codec, shm
from graphfeed.common.partition import part_dir_name
from graphfeed.common.rpc import RunningServer, channel_options
from graphfeed.common.v1 import tensor_pb2
from graphfeed.graph_store.config import GraphStoreSettings
from graphfeed.graph_store.server import serve as serve_store
from graphfeed.loader.config import LoaderSettings
from graphfeed.loader.core import Loader
from graphfeed.loader.server import close_all
from graphfeed.loader.server import serve as serve_loader
from graphfeed.loader.v1 import loader_pb2 as pb
from graphfeed.loader.v1 import loader_pb2_grpc as pb_grpc
from graphfeed.sampler.config import SamplerSettings
from graphfeed.sampler.server import serve as serve_sampler
from graphfeed.trainer import RemoteDataLoader
from tests.graphs import arithmetic_features, arithmetic_labels

pytestmark = pytest.mark.integration

F = 4


@dataclass
class Cluster:
    servers: list[RunningServer]
    loader_server: RunningServer
    loader: Loader
    stub: pb_grpc.LoaderServiceStub


@pytest.fixture(scope="module")
def cluster(arith_root: Path) -> Iterator[Cluster]:
    servers: list[RunningServer] = []
    stores = []
    for p in range(2):
        srv, store = serve_store(
            GraphStoreSettings(part_dir=arith_root / part_dir_name(p), port=0, metrics_port=-1), CollectorRegistry()
        )
        servers.append(srv)
        stores.append(store)
    addrs = [s.address for s in servers]
    sampler_srv, sampler = serve_sampler(
        SamplerSettings(graph_store_addresses=addrs, port=0, metrics_port=-1), CollectorRegistry()
    )
    servers.append(sampler_srv)
    settings = LoaderSettings(
        graph_store_addresses=addrs,
        sampler_address=sampler_srv.address,
        port=0,
        metrics_port=0,
        cache_policy="lru",
        cache_bytes=30 * F * 4,
        lookahead_steps=3,
        max_inflight=2,
    )
    loader_srv, loader = serve_loader(settings, CollectorRegistry())
    channel = grpc.insecure_channel(loader_srv.address, options=channel_options())
    yield Cluster(servers, loader_srv, loader, pb_grpc.LoaderServiceStub(channel))
    channel.close()
    loader_srv.stop(0.5)
    close_all(loader)
    for s in reversed(servers):
        s.stop(0.5)
    sampler.partitions.close()
    for store in stores:
        store.close()


def job(**changes: Any) -> pb.JobSpec:
    """A valid JobSpec with ``changes`` applied; protobuf checks their names and types."""
    args: dict[str, Any] = dict(
        job_id="it",
        job_seed=3,
        split="train",
        batch_size=8,
        fanouts=[3, 2],
        shuffle=True,
        rank=0,
        world_size=1,
        feature_name="feat",
        label_name="label",
    )
    args.update(changes)
    return pb.JobSpec(**args)


def test_describe_job(cluster: Cluster) -> None:
    resp = cluster.stub.DescribeJob(pb.DescribeJobRequest(job=job()), timeout=30)
    assert (resp.steps_per_epoch, resp.seeds_per_epoch) == (8, 60)
    assert list(resp.feature_row_shape) == [F]
    assert resp.feature_dtype == tensor_pb2.DType.DTYPE_FLOAT32
    assert (resp.num_classes, resp.num_nodes) == (3, 100)


def test_full_epoch_through_the_stub(cluster: Cluster, arith_root: Path) -> None:
    orig = np.load(arith_root / "orig_ids.npy")
    msgs = list(cluster.stub.StreamMinibatches(pb.StreamMinibatchesRequest(job=job(), epoch=1), timeout=60))
    assert [m.step_key.step for m in msgs] == list(range(8))
    assert all(m.step_key.epoch == 1 and m.step_key.job_seed == 3 and m.steps_per_epoch == 8 for m in msgs)
    seeds = []
    for m in msgs:
        assert m.bulk_bytes == 0, "small minibatches travel in one message each"
        sb = blocks.from_proto(m.blocks, bulk=m.bulk)  # a plain protobuf reader: tensors in the bulk field
        v = orig[sb.input_nodes]
        feats = codec.decode(m.input_features, "features", bulk=m.bulk)
        assert np.array_equal(feats, arithmetic_features(v))
        assert np.array_equal(codec.decode(m.labels, "labels", bulk=m.bulk), arithmetic_labels(orig[sb.output_nodes]))
        assert m.stats.cache_hits + m.stats.cache_misses == len(v)
        seeds.append(sb.output_nodes)
    all_seeds = np.concatenate(seeds)
    assert len(all_seeds) == 60 and np.array_equal(np.sort(all_seeds), np.flatnonzero(orig % 5 <= 2))


@pytest.mark.parametrize(
    "wire, dtype, rounded",
    [
        ("float16", tensor_pb2.DType.DTYPE_FLOAT16, lambda x: x.astype(np.float16)),
        ("bfloat16", tensor_pb2.DType.DTYPE_BFLOAT16, codec.to_bfloat16),
    ],
)
def test_a_wire_dtype_sends_rounded_features_in_half_the_bytes(
    cluster: Cluster, arith_root: Path, wire: str, dtype: int, rounded: Callable[[np.ndarray], np.ndarray]
) -> None:
    orig = np.load(arith_root / "orig_ids.npy")
    request = pb.StreamMinibatchesRequest(job=job(feature_wire_dtype=wire), epoch=1)
    full = list(cluster.stub.StreamMinibatches(pb.StreamMinibatchesRequest(job=job(), epoch=1), timeout=60))
    msgs = list(cluster.stub.StreamMinibatches(request, timeout=60))
    assert len(msgs) == len(full) == 8
    for m, f in zip(msgs, full):
        sb = blocks.from_proto(m.blocks, bulk=m.bulk)
        assert np.array_equal(sb.input_nodes, blocks.from_proto(f.blocks, bulk=f.bulk).input_nodes), (
            "same job, same samples"
        )
        assert m.input_features.dtype == dtype and f.input_features.dtype == tensor_pb2.DType.DTYPE_FLOAT32
        feats = codec.decode(m.input_features, "features", bulk=m.bulk)
        want = rounded(arithmetic_features(orig[sb.input_nodes]))
        assert feats.dtype == want.dtype and np.array_equal(feats.view(np.uint16), want.view(np.uint16))
        assert np.array_equal(codec.decode(m.labels, "labels", bulk=m.bulk), arithmetic_labels(orig[sb.output_nodes]))
        assert len(f.bulk) - len(m.bulk) >= feats.nbytes - bulk.ALIGN, "the features' half is saved (up to alignment)"


@pytest.mark.parametrize("shm_dir", ["", str(shm.DEFAULT_DIR)])
def test_remote_data_loader_upcasts_wire_features_over_either_transport(
    cluster: Cluster, arith_root: Path, shm_dir: str
) -> None:
    if shm_dir and not os.access(shm_dir, os.W_OK):
        pytest.skip(f"needs a writable {shm_dir}")
    orig = np.load(arith_root / "orig_ids.npy")
    address = cluster.loader_server.address
    shm_before = shm_bytes(cluster)
    job_args: dict[str, Any] = dict(fanouts=[3, 2], batch_size=8, job_id="wire", feature_wire_dtype="bfloat16")
    with RemoteDataLoader(address, "train", shm_dir=shm_dir, **job_args) as dl:
        for input_nodes, _out, bs in dl:
            feat = bs[0].srcdata["feat"]
            want = codec.from_bfloat16(codec.to_bfloat16(arithmetic_features(orig[input_nodes.numpy()])))
            assert feat.dtype == torch.float32 and np.array_equal(feat.numpy(), want)
    assert (shm_bytes(cluster) > shm_before) == bool(shm_dir), "the transport asked for carried the minibatches"


def scrape(cluster: Cluster) -> dict[tuple[str, tuple[tuple[str, str], ...]], float]:
    """The loader's metrics: (name, sorted labels) -> value."""
    text = (
        urllib.request.urlopen(f"http://127.0.0.1:{cluster.loader_server.metrics_port}/metrics", timeout=10)
        .read()
        .decode()
    )
    return {
        (s.name, tuple(sorted(s.labels.items()))): s.value
        for f in text_string_to_metric_families(text)
        for s in f.samples
    }


def shm_bytes(cluster: Cluster) -> float:
    """Minibatch tensor bytes the loader has sent through shared memory."""
    samples = scrape(cluster).items()
    return sum(
        v
        for (n, labels), v in samples
        if n == "graphfeed_rpc_response_shm_bytes_total" and ("method", "StreamMinibatches") in labels
    )


def rpc_error(call: Callable[[], object]) -> grpc.RpcError:
    with pytest.raises(grpc.RpcError) as info:
        call()
    return info.value


@pytest.mark.parametrize(
    "changes, code, words",
    [
        (dict(batch_size=0), grpc.StatusCode.INVALID_ARGUMENT, "batch_size"),
        (dict(fanouts=[]), grpc.StatusCode.INVALID_ARGUMENT, "fanouts"),
        (dict(fanouts=[2, -3]), grpc.StatusCode.INVALID_ARGUMENT, "fanout"),
        (dict(rank=2, world_size=2), grpc.StatusCode.INVALID_ARGUMENT, "rank"),
        # Sizes are bounded before anything is sized by them (issue 15: these were INTERNAL).
        (dict(world_size=2**28), grpc.StatusCode.INVALID_ARGUMENT, "world_size must be <= 65536, got 268435456"),
        (dict(world_size=2**31), grpc.StatusCode.INVALID_ARGUMENT, "world_size must be <= 65536, got 2147483648"),
        (dict(batch_size=2**32 - 1), grpc.StatusCode.INVALID_ARGUMENT, "batch_size must be <= 1048576, got 4294967295"),
        (dict(fanouts=[2] * 17), grpc.StatusCode.INVALID_ARGUMENT, "fanouts has 17 layers, more than the limit of 16"),
        (dict(split="nope"), grpc.StatusCode.NOT_FOUND, "nope"),
        (dict(feature_name="nope"), grpc.StatusCode.NOT_FOUND, "feature_name"),
        (
            dict(feature_wire_dtype="float8"),
            grpc.StatusCode.INVALID_ARGUMENT,
            "feature_wire_dtype must be '' (the stored dtype)",
        ),
        (
            dict(feature_name="label", feature_wire_dtype="bfloat16"),
            grpc.StatusCode.INVALID_ARGUMENT,
            "needs floating-point features",
        ),
    ],
)
def test_bad_jobs_get_documented_codes_and_the_server_keeps_serving(
    cluster: Cluster, changes: dict[str, Any], code: grpc.StatusCode, words: str
) -> None:
    bad = job(**changes)
    err = rpc_error(lambda: cluster.stub.DescribeJob(pb.DescribeJobRequest(job=bad), timeout=30))
    assert err.code() == code and words in err.details()
    err = rpc_error(lambda: list(cluster.stub.StreamMinibatches(pb.StreamMinibatchesRequest(job=bad), timeout=30)))
    assert err.code() == code and words in err.details()
    assert cluster.stub.DescribeJob(pb.DescribeJobRequest(job=job()), timeout=30).steps_per_epoch == 8


def test_start_step_past_the_end_is_out_of_range(cluster: Cluster) -> None:
    req = pb.StreamMinibatchesRequest(job=job(), epoch=0, start_step=9)
    err = rpc_error(lambda: list(cluster.stub.StreamMinibatches(req, timeout=30)))
    assert err.code() == grpc.StatusCode.OUT_OF_RANGE and "start_step 9" in err.details()
    last = list(
        cluster.stub.StreamMinibatches(pb.StreamMinibatchesRequest(job=job(), epoch=0, start_step=7), timeout=30)
    )
    assert [m.step_key.step for m in last] == [7]


def producers(job_id: str) -> list[threading.Thread]:
    return [t for t in threading.enumerate() if t.name.startswith(f"loader-producer-{job_id}-")]


def test_cancelled_stream_stops_its_producer(cluster: Cluster) -> None:
    req = pb.StreamMinibatchesRequest(job=job(job_id="cancelme", batch_size=2), epoch=0)  # 30 steps
    call = cluster.stub.StreamMinibatches(req, timeout=60)
    assert next(call).step_key.step == 0
    assert producers("cancelme")
    call.cancel()
    deadline = time.monotonic() + 10
    while producers("cancelme"):
        assert time.monotonic() < deadline, "producer still running after the stream was cancelled"
        time.sleep(0.01)


def test_metrics_endpoint_shows_minibatches_and_cache_counters(cluster: Cluster) -> None:
    list(cluster.stub.StreamMinibatches(pb.StreamMinibatchesRequest(job=job(), epoch=2), timeout=60))
    assert cluster.loader_server.metrics_port
    samples = scrape(cluster)
    assert samples[("graphfeed_loader_minibatches_total", ())] >= 8
    host = (("ntype", "_N"), ("tier", "host"))
    hits, misses = (
        samples[("graphfeed_loader_cache_hits_total", host)],
        samples[("graphfeed_loader_cache_misses_total", host)],
    )
    assert hits > 0 and misses > 0
    assert samples[("graphfeed_loader_cache_inserts_total", host)] > 0
    assert samples[("graphfeed_loader_cache_evictions_total", host)] > 0  # 30-row LRU over a 100-node graph
    assert 0 < samples[("graphfeed_loader_cache_bytes", host)] <= 30 * F * 4
    assert samples[("graphfeed_loader_sampled_edges_total", ())] > 0
    assert sum(v for (n, _), v in samples.items() if n == "graphfeed_loader_remote_feature_bytes_total") > 0
    assert ("graphfeed_loader_queue_depth", ()) in samples
    for name in ("issued", "used", "failed", "bytes"):  # LRU never prefetches, but the series exist
        assert samples[(f"graphfeed_loader_prefetch_{name}_total", host)] == 0
