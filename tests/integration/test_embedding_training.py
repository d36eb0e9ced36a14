"""The RGCN job with ``--embeddings server`` (issue 25): the featureless ``tag`` type's table
lives in the two graph-stores, trains there, and a trainer that crashed after a step it had not
checkpointed resumes to the same embedding rows and model weights as an uninterrupted run, and
two DDP ranks train one table.

Real gRPC servers of every service (in this process); the typed graph of
tests/integration/test_hetero_end_to_end.py.
"""

from __future__ import annotations

import os
import subprocess
import sys
from collections.abc import Iterator
from pathlib import Path

import numpy as np
import pytest
import torch

from graphfeed.graph_store.partitions import RemotePartitionSet
from graphfeed.ingest.partition import write_partitioned
from graphfeed.trainer.remote_embedding import RemoteEmbedding
from graphfeed.trainer.train import Trainer
from tests.integration.inprocess import InProcessCluster
from tests.integration.test_hetero_end_to_end import typed_graph
from tests.integration.test_hetero_training import _free_port, config

pytestmark = [pytest.mark.integration]


@pytest.fixture(scope="module")
def cluster(tmp_path_factory: pytest.TempPathFactory) -> Iterator[InProcessCluster]:
    root = tmp_path_factory.mktemp("typed-emb") / "g"
    write_partitioned(typed_graph(), root, 2, method="random", seed=3)
    c = InProcessCluster.start(root)
    yield c
    c.stop()


def server_config(c: InProcessCluster, **over: object):  # noqa: ANN201
    return config(c.loader.address, embeddings="server", graph_stores=[s.address for s in c.graph_stores], **over)


def tag_rows(c: InProcessCluster, job: str, dim: int = 16) -> np.ndarray:
    """Every tag's row of ``job``'s table, read from the graph-stores."""
    parts = RemotePartitionSet([s.address for s in c.graph_stores], timeout_s=10)
    emb = parts.embeddings()
    try:
        schema = parts.info.types
        return emb.pull(f"{job}:tag", schema.to_gids("tag", np.arange(schema.num_nodes("tag"))), dim)
    finally:
        emb.close()
        parts.close()


def test_resume_after_a_crash_gives_the_same_rows_and_weights(cluster: InProcessCluster, tmp_path: Path) -> None:
    whole = Trainer(server_config(cluster, job_id="srv-whole", checkpoint=tmp_path / "whole.pt", epochs=3))
    try:
        assert isinstance(whole.model.embed["tag"], RemoteEmbedding)
        assert not any("embed" in n for n, _ in whole.model.named_parameters())  # no local table
        initial = tag_rows(cluster, "srv-whole")
        reports = whole.fit()
        assert reports[-1].loss < reports[0].loss  # it learns
        assert not np.array_equal(initial, tag_rows(cluster, "srv-whole"))  # the tags too, server-side
    finally:
        whole.close()
    ckpt = tmp_path / "split.pt"
    # Checkpoints after steps 3 and 6; the "crash" comes after step 4, which the tables applied
    # but no checkpoint recorded: the resumed job must drop it and compute it again.
    first = Trainer(server_config(cluster, job_id="srv-split", checkpoint=ckpt, checkpoint_every=3, stop_after_steps=4))
    try:
        first.train_epoch()  # no fit(): nothing written after the 4th step, as in a kill -9
    finally:
        first.close()
    assert torch.load(ckpt)["embeddings_step"] == (0, 2)
    second = Trainer(server_config(cluster, job_id="srv-split", checkpoint=ckpt, epochs=3))
    try:
        second.fit()
    finally:
        second.close()
    a, b = torch.load(tmp_path / "whole.pt"), torch.load(ckpt)
    assert b["applied"] == a["applied"]  # same minibatches, digest for digest
    assert a["embeddings_step"] == b["embeddings_step"]
    for k, v in a["model"].items():
        assert torch.equal(v, b["model"][k]), k
    assert tag_rows(cluster, "srv-split").tobytes() == tag_rows(cluster, "srv-whole").tobytes()


@pytest.mark.slow
def test_two_ddp_ranks_share_one_server_table(cluster: InProcessCluster, tmp_path: Path) -> None:
    """Two ``graphfeed train`` processes (gloo DDP): dense gradients all-reduced, the tag
    embeddings' pushed by each rank and combined by the graph-stores; the replicas stay equal."""
    env = {**os.environ, "MASTER_ADDR": "127.0.0.1", "MASTER_PORT": str(_free_port())}
    stores = ",".join(s.address for s in cluster.graph_stores)
    procs = []
    for rank in range(2):
        cmd = [sys.executable, "-m", "graphfeed", "train", "--loader", cluster.loader.address, "--model", "rgcn"]
        cmd += ["--embeddings", "server", "--graph-stores", stores, "--embedding-optimizer", "adagrad"]
        cmd += ["--epochs", "1", "--batch-size", "4", "--fanouts", "3", "3", "--seed", "3", "--hidden", "16"]
        cmd += ["--rank", str(rank), "--world-size", "2", "--job-id", "srv-ddp", "--metrics-port", "0"]
        cmd += ["--checkpoint", str(tmp_path / f"r{rank}.pt"), "--no-progress"]
        procs.append(subprocess.Popen(cmd, env=env, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True))
    outs = [p.communicate(timeout=300) for p in procs]
    for p, (_out, err) in zip(procs, outs):
        assert p.returncode == 0, err[-3000:]
    r0, r1 = (torch.load(tmp_path / f"r{r}.pt") for r in range(2))
    assert len(r0["applied"]) == len(r1["applied"]) > 0
    assert r0["embeddings_step"] == r1["embeddings_step"] == r0["applied"][-1][:2]
    assert {d for *_, d in r0["applied"]}.isdisjoint({d for *_, d in r1["applied"]})  # each rank its own seeds
    for name, tensor in r0["model"].items():
        assert torch.allclose(r1["model"][name], tensor, atol=1e-6), f"replicas diverged: {name}"
    rows = tag_rows(cluster, "srv-ddp")
    assert np.isfinite(rows).all()
