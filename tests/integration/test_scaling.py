"""Replicas that get traffic and health that answers under load, with real servers on loopback:
two samplers behind one round-robin target; a loader whose every handler thread streams."""

from __future__ import annotations

import re
import time
import urllib.request
from collections.abc import Iterator
from pathlib import Path

import grpc
import numpy as np
import pytest
from grpc_health.v1 import health_pb2, health_pb2_grpc
from prometheus_client import CollectorRegistry

from graphfeed.common.rpc import RunningServer
from graphfeed.sampler.client import SamplerClient
from graphfeed.sampler.config import SamplerSettings
from graphfeed.sampler.server import serve as serve_sampler
from graphfeed.trainer.dataloader import RemoteDataLoader
from tests.integration.inprocess import InProcessCluster

pytestmark = pytest.mark.integration


def sample_blocks_calls(metrics_port: int | None) -> float:
    """``graphfeed_rpc_requests_total`` of SampleBlocks answered OK, read from the server's /metrics."""
    text = urllib.request.urlopen(f"http://127.0.0.1:{metrics_port}/metrics", timeout=10).read().decode()
    pattern = r'graphfeed_rpc_requests_total\{code="OK",method="SampleBlocks",service="SamplerService"\} (\S+)'
    found = re.search(pattern, text)
    return float(found.group(1)) if found else 0.0


@pytest.fixture
def two_samplers(arith_root: Path) -> Iterator[list[RunningServer]]:
    cluster = InProcessCluster.start(arith_root)
    stores = [s.address for s in cluster.graph_stores]
    samplers: list[RunningServer] = []
    try:
        for _ in range(2):
            settings = SamplerSettings(graph_store_addresses=stores, port=0, metrics_port=0, health_port=-1)
            samplers.append(serve_sampler(settings, CollectorRegistry())[0])
        yield samplers
    finally:
        for s in samplers:
            s.stop(0)
        cluster.stop()


def test_one_round_robin_target_spreads_calls_over_both_samplers(two_samplers: list[RunningServer]) -> None:
    target = "ipv4:" + ",".join(s.address for s in two_samplers)
    with SamplerClient(target, timeout_s=10) as client:  # one long-lived channel, like a loader's
        for step in range(20):
            client.sample(np.array([step % 100]), [2], False, 0, 0, step)
    calls = [sample_blocks_calls(s.metrics_port) for s in two_samplers]
    assert sum(calls) == 20
    assert min(calls) >= 5, f"both replicas must get traffic, got {calls}"


def test_health_port_answers_while_every_handler_thread_streams(cora_root: Path) -> None:
    cluster = InProcessCluster.start(cora_root, max_workers=2, max_inflight=1, cache_policy="none", health_port=0)
    loaders = [
        RemoteDataLoader(
            cluster.loader.address, "train", fanouts=[10, 10], batch_size=1, shm_dir="", job_id=f"busy-{i}"
        )
        for i in range(3)
    ]
    try:
        streams = [iter(dl) for dl in loaders]
        for s in streams[:2]:
            next(s)  # each holds a handler thread: the loader blocks on the unread stream
        health_req = health_pb2.HealthCheckRequest()
        with grpc.insecure_channel(cluster.loader.address) as main:
            with pytest.raises(grpc.RpcError) as busy:  # the main pool is saturated: a probe there times out
                health_pb2_grpc.HealthStub(main).Check(health_req, timeout=1.0)
            assert busy.value.code() == grpc.StatusCode.DEADLINE_EXCEEDED
        with grpc.insecure_channel(f"127.0.0.1:{cluster.loader.health_port}") as side:
            t0 = time.perf_counter()
            resp = health_pb2_grpc.HealthStub(side).Check(health_req, timeout=1.0)
            assert resp.status == health_pb2.HealthCheckResponse.SERVING
            assert time.perf_counter() - t0 < 1.0
    finally:
        for dl in loaders:
            dl.close()
        cluster.stop()


def test_streams_and_new_calls_outlive_the_max_connection_age(cora_root: Path) -> None:
    age_s = 0.2
    cluster = InProcessCluster.start(cora_root, max_connection_age_s=age_s, cache_policy="none")
    try:
        with RemoteDataLoader(
            cluster.loader.address, "train", fanouts=[5, 5], batch_size=8, shm_dir="", job_id="aged"
        ) as dl:
            t0, got = time.perf_counter(), 0
            for _epoch in range(2):  # the second epoch's stream starts on a connection past its age
                got += sum(1 for _ in dl)
            elapsed = time.perf_counter() - t0
        assert got == 2 * len(dl)
        assert elapsed > 2 * age_s, "the streams must outlive the age for this test to mean anything"
    finally:
        cluster.stop()
