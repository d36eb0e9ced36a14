"""The example RGCN job on a typed graph (``graphfeed train --model rgcn``): it learns, a trainer
stopped mid-epoch resumes with no lost or repeated step (the same applied digests and final
weights as one uninterrupted run), and two DDP ranks train it together.

Real gRPC servers of every service (in this process); the typed graph of
tests/integration/test_hetero_end_to_end.py, whose item labels are a function of the item.
"""

from __future__ import annotations

import os
import socket
import subprocess
import sys
from collections.abc import Iterator
from pathlib import Path

import pytest
import torch

from graphfeed.ingest.partition import write_partitioned
from graphfeed.trainer.hetero_models import RGCN
from graphfeed.trainer.train import TrainConfig, Trainer
from tests.integration.inprocess import InProcessCluster
from tests.integration.test_hetero_end_to_end import typed_graph

pytestmark = [pytest.mark.integration]


@pytest.fixture(scope="module")
def cluster(tmp_path_factory: pytest.TempPathFactory) -> Iterator[InProcessCluster]:
    root = tmp_path_factory.mktemp("typed-train") / "g"
    write_partitioned(typed_graph(), root, 2, method="random", seed=3)
    c = InProcessCluster.start(root)
    yield c
    c.stop()


def config(address: str, **over: object) -> TrainConfig:
    values: dict = dict(
        loader_address=address,
        model="rgcn",
        epochs=2,
        batch_size=4,
        fanouts=[3, 3],
        seed=5,
        hidden=16,
        lr=0.05,
        progress=False,
        metrics_port=0,
        job_id="rgcn",
    )
    values.update(over)
    return TrainConfig(**values)


def test_rgcn_job_trains_and_embeds_featureless_tags(cluster: InProcessCluster) -> None:
    trainer = Trainer(config(cluster.loader.address, epochs=3))
    try:
        assert isinstance(trainer.model, RGCN)
        before = trainer.model.embed["tag"].weight.detach().clone()
        reports = trainer.fit()
        assert len(reports) == 3 and all(r.loss == r.loss for r in reports)  # finite
        assert reports[-1].loss < reports[0].loss
        assert not torch.equal(before, trainer.model.embed["tag"].weight)  # tags learn through SparseAdam
        assert 0.0 <= trainer.evaluate("val") <= 1.0
    finally:
        trainer.close()


def test_sage_refuses_a_typed_graph(cluster: InProcessCluster) -> None:
    with pytest.raises(ValueError, match="--model rgcn"):
        Trainer(config(cluster.loader.address, model="sage"))


def test_rgcn_resume_repeats_and_loses_nothing(cluster: InProcessCluster, tmp_path: Path) -> None:
    whole = Trainer(config(cluster.loader.address, job_id="rgcn-whole", checkpoint=tmp_path / "whole.pt"))
    try:
        whole.fit()
    finally:
        whole.close()
    ckpt = tmp_path / "split.pt"
    first = Trainer(config(cluster.loader.address, job_id="rgcn-split", checkpoint=ckpt, stop_after_steps=4))
    try:
        first.fit()  # stops after 4 steps, mid-epoch 0 (5 steps per epoch)
    finally:
        first.close()
    second = Trainer(config(cluster.loader.address, job_id="rgcn-split", checkpoint=ckpt))
    try:
        second.fit()
    finally:
        second.close()
    a, b = torch.load(tmp_path / "whole.pt"), torch.load(ckpt)
    assert [s[:2] for s in b["applied"]] == [s[:2] for s in a["applied"]]
    assert b["applied"] == a["applied"]  # same minibatches, digest for digest
    for k, v in a["model"].items():
        assert torch.equal(v, b["model"][k]), k


def test_two_ddp_ranks_train_one_rgcn(cluster: InProcessCluster, tmp_path: Path) -> None:
    """Each rank gets its own seeds; only gradient averaging (dense and the embeddings' sparse
    gradients) keeps the replicas equal."""
    env = {**os.environ, "MASTER_ADDR": "127.0.0.1", "MASTER_PORT": str(_free_port())}
    procs = []
    for rank in range(2):
        cmd = [sys.executable, "-m", "graphfeed", "train", "--loader", cluster.loader.address, "--model", "rgcn"]
        cmd += ["--epochs", "1", "--batch-size", "4", "--fanouts", "3", "3", "--seed", "3", "--hidden", "16"]
        cmd += ["--rank", str(rank), "--world-size", "2", "--job-id", "rgcn-ddp", "--metrics-port", "0"]
        cmd += ["--checkpoint", str(tmp_path / f"r{rank}.pt"), "--no-progress"]
        procs.append(subprocess.Popen(cmd, env=env, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True))
    outs = [p.communicate(timeout=300) for p in procs]
    for p, (_out, err) in zip(procs, outs):
        assert p.returncode == 0, err[-3000:]
    r0, r1 = (torch.load(tmp_path / f"r{r}.pt") for r in range(2))
    assert len(r0["applied"]) == len(r1["applied"]) > 0
    assert {d for *_, d in r0["applied"]}.isdisjoint({d for *_, d in r1["applied"]})
    for name, tensor in r0["model"].items():
        assert torch.allclose(r1["model"][name], tensor, atol=1e-6), f"replicas diverged: {name}"


def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]
