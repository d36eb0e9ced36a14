"""``graphfeed pack`` of an edge job (issue 26: link prediction out of core, DiskGNN): the packer
draws each step's positives, negatives and exclusions as the loader's stream does, so a loader
with the packs serves an edge epoch's features from them (no fallback), byte-identical to the
epoch without packs; a node job's pack key is what it was before edge jobs were packed."""

from __future__ import annotations

from pathlib import Path

import numpy as np
import pytest
import torch

from graphfeed import cli
from graphfeed.ingest.edge_split import split_edges
from graphfeed.ingest.partition import write_partitioned
from graphfeed.loader.job import JobSpec
from graphfeed.loader.packs.format import job_key
from graphfeed.trainer import RemoteDataLoader
from tests.graphs import arithmetic_features, arithmetic_graph
from tests.integration.inprocess import InProcessCluster

pytestmark = pytest.mark.integration

JOB = {"fanouts": [3, 2], "batch_size": 16, "seed": 7, "seed_edges": True, "num_negatives": 2}
PACK_FLAGS = ["--seed-edges", "--num-negatives", "2", "--batch-size", "16", "--fanouts", "3,2", "--job-seed", "7"]


@pytest.fixture(scope="module")
def root(tmp_path_factory: pytest.TempPathFactory) -> Path:
    out = tmp_path_factory.mktemp("edge-packs")
    write_partitioned(split_edges(arithmetic_graph(), "_E", (0.8, 0.1, 0.1), seed=2), out, 2, method="random")
    return out


def _epochs(address: str, epochs: tuple[int, ...]) -> list[tuple[torch.Tensor, torch.Tensor, torch.Tensor]]:
    """(input nodes, positive pairs' edge ids, input features) of every step of ``epochs``."""
    out = []
    with RemoteDataLoader(address, "train", job_id="edges", **JOB) as dl:  # type: ignore[arg-type]
        for epoch in epochs:
            dl.set_epoch(epoch)
            out += [(i, p.edata["_ID"], b[0].srcdata["feat"]) for i, p, _n, b in dl]
    return out


def test_packed_edge_epochs_stream_the_same_minibatches_from_the_packs(root: Path, tmp_path: Path) -> None:
    orig = np.load(root / "orig_ids.npy")
    plain = InProcessCluster.start(root, cache_policy="none")
    try:
        want = _epochs(plain.loader.address, (0, 1))
    finally:
        plain.stop()
    packs = tmp_path / "packs"
    c = InProcessCluster.start(root, pack_root=str(packs), cache_policy="lru", cache_bytes=20 * 16)
    try:
        stores = ",".join(s.address for s in c.graph_stores)
        args = ["pack", "--graph-stores", stores, "--out", str(packs), "--epochs", "0:2", *PACK_FLAGS]
        assert cli.main([*args, "--steps-per-pack", "2", "--resident-bytes", "160"]) == 0
        assert sorted(p.name for p in packs.iterdir()) == sorted(
            job_key(JobSpec(**{**_spec(), "split": "train"}), e) for e in (0, 1)
        )
        got = _epochs(c.loader.address, (0, 1))
        assert c._loader is not None
        stats = c._loader[1].pack_stats
    finally:
        c.stop()
    assert len(got) == len(want) > 2
    for (gi, gp, gf), (wi, wp, wf) in zip(got, want, strict=True):
        assert torch.equal(gi, wi) and torch.equal(gp, wp) and torch.equal(gf, wf)
        np.testing.assert_array_equal(gf.numpy(), arithmetic_features(orig[gi.numpy()]))
    assert stats.hits > 0 and stats.disk_bytes > 0 and stats.fallbacks == 0 and stats.refused == 0


def _spec() -> dict:
    return {"fanouts": (3, 2), "batch_size": 16, "job_seed": 7, "seed_edges": True, "num_negatives": 2}


def test_edge_fields_key_edge_jobs_only() -> None:
    node = JobSpec(fanouts=(3, 2), batch_size=16, job_seed=7)
    assert job_key(node, 0) == "6821b6171bd4e63d-e0"  # the key packs of this job had before edge jobs
    edge = JobSpec(**_spec())
    assert job_key(edge, 0) != job_key(node, 0)
    assert job_key(edge, 0) != job_key(JobSpec(**{**_spec(), "num_negatives": 3}), 0)
    assert job_key(edge, 0) != job_key(JobSpec(**{**_spec(), "exclude": "self"}), 0)
