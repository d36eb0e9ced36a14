"""A client that opens minibatch streams with a shared-memory offer and never reads them: it
holds at most its quota in the shared directory and at most its share of the loader's streams,
and another trainer on the same loader and directory still gets every minibatch, exact."""

from __future__ import annotations

import hashlib
import time
from collections.abc import Callable
from pathlib import Path

import grpc
import pytest

from graphfeed.common import shm
from graphfeed.loader.v1 import loader_pb2 as pb
from graphfeed.loader.v1 import loader_pb2_grpc as pb_grpc
from graphfeed.trainer.dataloader import RemoteDataLoader
from graphfeed.trainer.job import job_spec, job_to_proto
from tests.integration.inprocess import InProcessCluster

pytestmark = pytest.mark.integration
QUOTA_MB = 2
PER_CLIENT = 3


def _epoch(address: str, shm_dir: Path) -> list[str]:
    loader = RemoteDataLoader(
        address, "train", shm_dir=str(shm_dir), fanouts=[5, 5], batch_size=64, seed=3, job_id="legit"
    )
    try:
        return [hashlib.sha256(b[2][0].srcdata["feat"].numpy().tobytes()).hexdigest() for b in loader]
    finally:
        loader.close()


def _unclaimed(shm_dir: Path) -> list[int]:
    """Sizes of the segments sent and not claimed (a claimed recycled one is renamed)."""
    return [p.stat().st_size for p in shm_dir.glob(f"{shm.SEGMENT_PREFIX}*") if "." not in p.name]


def test_a_client_that_never_reads_cannot_starve_the_others(cora_root: Path, tmp_path: Path) -> None:
    shm_dir = tmp_path / "shm"
    shm_dir.mkdir()
    cluster = InProcessCluster.start(
        cora_root, shm_dir=str(shm_dir), shm_client_quota_mb=QUOTA_MB, max_streams_per_client=PER_CLIENT
    )
    flooder = shm.ShmOffer.create(shm_dir)  # its own probe: another client than this process's loaders
    assert flooder is not None
    channel = grpc.insecure_channel(cluster.loader.address)
    try:
        alone = _epoch(cluster.loader.address, shm_dir)
        stub = pb_grpc.LoaderServiceStub(channel)
        calls = [
            stub.StreamMinibatches(
                pb.StreamMinibatchesRequest(
                    job=job_to_proto(job_spec("train", fanouts=[5, 5], batch_size=64, seed=i, job_id=f"f{i}"))
                ),
                metadata=flooder.metadata(),
            )
            for i in range(PER_CLIENT + 2)
        ]
        deadline = time.monotonic() + 30
        while sum(c.done() for c in calls) < 2 and time.monotonic() < deadline:
            time.sleep(0.05)
        refused = [c for c in calls if c.done()]
        assert len(refused) == 2 and all(c.code() == grpc.StatusCode.RESOURCE_EXHAUSTED for c in refused)
        assert "minibatch streams open" in (refused[0].details() or "")
        held = _settled(lambda: sorted(_unclaimed(shm_dir)))  # the open streams run until they block on what they sent
        assert held and sum(held) <= (QUOTA_MB << 20) + max(held), (
            held
        )  # a quota's worth, plus the one message that crossed it

        assert _epoch(cluster.loader.address, shm_dir) == alone  # the other trainer: every minibatch, exact
        assert sum(_unclaimed(shm_dir)) <= (QUOTA_MB << 20) + max(held)
    finally:
        channel.close()
        flooder.close()
        cluster.stop()


def _settled(read: Callable[[], list[int]], deadline_s: float = 60.0, still_s: float = 0.5) -> list[int]:
    """``read()`` once it is non-empty and has not changed for ``still_s`` (polled, within a deadline)."""
    deadline = time.monotonic() + deadline_s
    last, since = read(), time.monotonic()
    while time.monotonic() < deadline:
        time.sleep(0.05)  # polling interval
        now = read()
        if now != last:
            last, since = now, time.monotonic()
        elif now and time.monotonic() - since >= still_s:
            return now
    raise AssertionError(f"shared memory held by the flooding streams never settled: {last}")
