"""A loader whose trainer shares its memory, over graph-stores that cannot see that memory (they
run on other hosts): the graph-stores' direct writes are refused, the loader reads the rows
instead, says so once, and the trainer gets exactly the minibatches of the all-inline path."""

from __future__ import annotations

import hashlib
import logging
from pathlib import Path

import pytest

from graphfeed.trainer import RemoteDataLoader
from tests.integration.inprocess import InProcessCluster

pytestmark = pytest.mark.integration


def _epoch(address: str, shm_dir: str) -> list[str]:
    loader = RemoteDataLoader(address, "train", shm_dir=shm_dir, fanouts=[5, 5], batch_size=128, seed=4, job_id="t")
    try:
        digests = []
        for _, _, blocks in loader:
            feat, label = blocks[0].srcdata["feat"].numpy(), blocks[-1].dstdata["label"].numpy()
            digests.append(hashlib.sha256(feat.tobytes() + label.tobytes()).hexdigest())
        return digests
    finally:
        loader.close()


def test_graph_stores_on_other_hosts_still_feed_a_shared_memory_trainer_exactly(
    cora_root: Path, tmp_path: Path, caplog: pytest.LogCaptureFixture
) -> None:
    pod = tmp_path / "pod"  # the loader's and its trainer's directory
    pod.mkdir()
    # graph-stores on other hosts accept no shared-memory offer (as LocalCluster places them elsewhere)
    cluster = InProcessCluster.start(
        cora_root, store_overrides={"shm_dir": ""}, shm_dir=str(pod), cache_policy="none"
    )  # no cache: every row comes from the graph-stores
    try:
        with caplog.at_level(logging.WARNING, logger="graphfeed.graph_store.client"):
            shared = _epoch(cluster.loader.address, str(pod))
            again = _epoch(cluster.loader.address, str(pod))
        inline = _epoch(cluster.loader.address, "")
    finally:
        cluster.stop()
    assert shared == inline == again and len(shared) > 1
    refused = [r for r in caplog.records if "cannot write into our shared memory" in r.getMessage()]
    assert 1 <= len(refused) <= 2  # once per graph-store client of the loader, then never asked again
