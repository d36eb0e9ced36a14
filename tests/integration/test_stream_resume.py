"""kill -9 of any one service while a trainer's minibatch stream runs, then a restart on the same
port: the RemoteDataLoader reopens its stream at the next step by itself, and the epoch it sees
is the uninterrupted one, step for step (no step lost, none repeated)."""

from __future__ import annotations

import hashlib
import signal
from collections.abc import Iterator
from pathlib import Path

import pytest

from graphfeed.cluster import LocalCluster, ServiceProcess, start_service
from graphfeed.trainer.dataloader import RemoteDataLoader

pytestmark = pytest.mark.integration
JOB = {"fanouts": [5, 5], "batch_size": 128, "seed": 3, "job_id": "resume-test"}


@pytest.fixture(scope="module")
def cluster(cora_root: Path, tmp_path_factory: pytest.TempPathFactory) -> Iterator[LocalCluster]:
    c = LocalCluster.start(cora_root, tmp_path_factory.mktemp("resume-logs"), shm_dir="")
    yield c
    c.stop()


def _digest(batch: tuple) -> str:
    input_nodes, output_nodes, blocks = batch
    h = hashlib.sha256()
    for t in (input_nodes, output_nodes, blocks[0].srcdata["feat"], blocks[-1].dstdata["label"]):
        h.update(t.numpy().tobytes())
    return h.hexdigest()


def _restart(cluster: LocalCluster, victim: ServiceProcess, cora_root: Path, log_dir: Path) -> ServiceProcess:
    """The same service on the same port, after a SIGKILL."""
    port = victim.address.rsplit(":", 1)[1]
    stores = [s.address for s in cluster.graph_stores]
    if victim.name.startswith("graph-store"):
        args = ["graph-store", "--part-dir", str(cora_root / f"part-{int(victim.name.rsplit('-', 1)[1]):05d}")]
    elif victim.name == "sampler":
        args = ["sampler", "--graph-store-addresses", *stores]
    else:
        assert cluster.sampler is not None
        args = ["loader", "--graph-store-addresses", *stores, "--sampler-address", cluster.sampler.address]
    return start_service(victim.name, [*args, "--shm-dir", "", "--port", port], log_dir)


@pytest.mark.parametrize("victim", ["loader", "sampler", "graph-store-1"])
def test_a_stream_survives_kill_9_and_restart_of(
    cluster: LocalCluster, cora_root: Path, tmp_path: Path, victim: str
) -> None:
    assert cluster.loader is not None
    reference = RemoteDataLoader(cluster.loader.address, "train", shm_dir="", **JOB)  # type: ignore[arg-type]
    want = [_digest(b) for b in reference]
    reference.close()

    loader = RemoteDataLoader(cluster.loader.address, "train", shm_dir="", resume_s=120, **JOB)  # type: ignore[arg-type]
    services = {s.name: s for s in cluster.services}
    got = []
    for step, batch in enumerate(loader):
        got.append(_digest(batch))
        if step == 2:  # mid-epoch: kill, then bring it back where its clients look for it
            proc = services[victim]
            proc.proc.send_signal(signal.SIGKILL)
            proc.proc.wait()
            new = _restart(cluster, proc, cora_root, tmp_path)
            if victim == "loader":
                cluster.loader = new
            elif victim == "sampler":
                cluster.sampler = new
            else:
                cluster.graph_stores[int(victim.rsplit("-", 1)[1])] = new
    loader.close()
    assert got == want, f"{len(got)} steps seen, {len(want)} expected; first difference at " + str(
        next((i for i, (a, b) in enumerate(zip(got, want)) if a != b), min(len(got), len(want)))
    )
    assert loader.epoch == 1 and loader.step == 0
    if victim == "loader":  # its stream died with it: reopened at the next step
        assert loader.resumes >= 1


def test_a_stream_through_shared_memory_survives_a_loader_sigterm(cora_root: Path, tmp_path: Path) -> None:
    """A graceful loader shutdown (SIGTERM: a pod deleted or rolled) while minibatches it sent
    through shared memory are still unread: the trainer loses none and repeats none."""
    shm = tmp_path / "shm"
    shm.mkdir()
    c = LocalCluster.start(cora_root, tmp_path / "logs", shm_dir=str(shm), loader_args=["--grace-s", "0.5"])
    try:
        assert c.loader is not None and c.sampler is not None
        reference = RemoteDataLoader(c.loader.address, "train", shm_dir=str(shm), **JOB)  # type: ignore[arg-type]
        want = [_digest(b) for b in reference]
        reference.close()
        loader = RemoteDataLoader(c.loader.address, "train", shm_dir=str(shm), resume_s=120, **JOB)  # type: ignore[arg-type]
        got = []
        for step, batch in enumerate(loader):
            got.append(_digest(batch))
            if step == 2:  # the stream has sent steps ahead (max_inflight) that are not read yet
                old = c.loader
                assert old.stop() == 0  # SIGTERM: a clean exit, after the grace period
                port = old.address.rsplit(":", 1)[1]
                args = [
                    "loader",
                    "--graph-store-addresses",
                    *(s.address for s in c.graph_stores),
                    "--sampler-address",
                    c.sampler.address,
                    "--shm-dir",
                    str(shm),
                    "--port",
                    port,
                ]
                c.loader = start_service("loader", args, tmp_path / "logs")
        loader.close()
        assert got == want
        assert loader.resumes >= 1
    finally:
        c.stop()
