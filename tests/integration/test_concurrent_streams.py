"""16 trainers streaming from one loader at once: every stream finishes its epoch with the
minibatches a lone trainer gets, the loader's health stays SERVING throughout (on its health
port, whose threads streams cannot take), and memory stays bounded."""

from __future__ import annotations

import hashlib
import resource
import threading
from pathlib import Path

import grpc
import pytest
from grpc_health.v1 import health_pb2, health_pb2_grpc

from graphfeed.trainer.dataloader import RemoteDataLoader
from tests.integration.inprocess import InProcessCluster

pytestmark = pytest.mark.integration
STREAMS = 16


def _epoch(address: str, rank: int) -> list[str]:
    loader = RemoteDataLoader(
        address, "train", shm_dir="", fanouts=[5, 5], batch_size=64, seed=1, job_id="many", rank=rank, world_size=4
    )
    try:
        return [hashlib.sha256(b[2][0].srcdata["feat"].numpy().tobytes()).hexdigest() for b in loader]
    finally:
        loader.close()


def test_sixteen_streams_on_one_loader(cora_root: Path) -> None:
    cluster = InProcessCluster.start(cora_root, cache_policy="lru", cache_bytes=2 << 20)
    try:
        address = cluster.loader.address
        alone = {rank: _epoch(address, rank) for rank in range(4)}  # 4 ranks, each streamed 4 times below
        rss_before = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss
        results: dict[int, list[str]] = {}
        errors: list[BaseException] = []

        def run(i: int) -> None:
            try:
                results[i] = _epoch(address, i % 4)
            except BaseException as exc:  # noqa: BLE001 - reported by the main thread
                errors.append(exc)

        threads = [threading.Thread(target=run, args=(i,)) for i in range(STREAMS)]
        for t in threads:
            t.start()
        health_port = cluster.loader.health_port
        assert health_port, "the loader serves health on its own port"
        probes = []
        with grpc.insecure_channel(f"127.0.0.1:{health_port}") as ch:
            stub = health_pb2_grpc.HealthStub(ch)
            while any(t.is_alive() for t in threads):
                probes.append(stub.Check(health_pb2.HealthCheckRequest(), timeout=2).status)
                threading.Event().wait(0.05)
        for t in threads:
            t.join()
        assert not errors, errors[:3]
        assert all(results[i] == alone[i % 4] for i in range(STREAMS))  # every stream, every step, exact
        assert probes and set(probes) == {health_pb2.HealthCheckResponse.SERVING}
        grown_mb = (resource.getrusage(resource.RUSAGE_SELF).ru_maxrss - rss_before) / 1024
        assert grown_mb < 1024, f"peak RSS grew by {grown_mb:.0f} MB with {STREAMS} streams"
    finally:
        cluster.stop()
