"""``graphfeed train --task link`` over real servers (issue 26): it learns (val MRR above chance),
a trainer stopped mid-epoch resumes from its checkpoint with every step and weight equal to an
uninterrupted run's, and two DDP ranks (processes) train one model."""

from __future__ import annotations

import os
import socket
import subprocess
import sys
from collections.abc import Iterator
from pathlib import Path

import numpy as np
import pytest
import torch

from graphfeed.ingest.edge_split import split_edges
from graphfeed.ingest.partition import write_partitioned
from graphfeed.trainer.baseline import to_dgl
from graphfeed.trainer.linkpred.inference import dgl_inference
from graphfeed.trainer.models import GraphSAGE
from graphfeed.trainer.train import TrainConfig, Trainer
from tests.graphs import arithmetic_graph
from tests.integration.inprocess import InProcessCluster

pytestmark = [pytest.mark.integration, pytest.mark.slow]

JOB = {"fanouts": [4, 4], "batch_size": 32, "epochs": 2, "seed": 5, "hidden": 16, "dropout": 0.0}


GRAPH = split_edges(arithmetic_graph(n=200, max_deg=6), "_E", (0.8, 0.1, 0.1), seed=1)


@pytest.fixture(scope="module")
def root(tmp_path_factory: pytest.TempPathFactory) -> Path:
    out = tmp_path_factory.mktemp("link-training")
    write_partitioned(GRAPH, out, 2, method="random")
    return out


@pytest.fixture(scope="module")
def cluster(root: Path) -> Iterator[InProcessCluster]:
    c = InProcessCluster.start(root)
    try:
        yield c
    finally:
        c.stop()


def _config(cluster: InProcessCluster, **kw: object) -> TrainConfig:
    return TrainConfig(
        loader_address=cluster.loader.address,
        task="link",
        progress=False,
        metrics_port=0,
        shm_dir="",
        eval_negatives=20,
        **{**JOB, **kw},  # type: ignore[arg-type]
    )


def _fit(cfg: TrainConfig) -> tuple[dict, list]:
    trainer = Trainer(cfg)
    try:
        reports = trainer.fit()
        return trainer.model.state_dict(), reports
    finally:
        trainer.close()


def test_link_job_learns_and_resumes_exactly(cluster: InProcessCluster, tmp_path: Path) -> None:
    ref_state, reports = _fit(_config(cluster, checkpoint=tmp_path / "ref.pt", job_id="ref"))
    assert [r.metric for r in reports] == ["val_mrr", "val_mrr"]
    assert reports[-1].val_acc > 2 / 21  # well above the MRR of a random ranking among 20 negatives
    ref = torch.load(tmp_path / "ref.pt")["applied"]

    crashy = _config(cluster, checkpoint=tmp_path / "c.pt", job_id="crashy")
    _fit(crashy.model_copy(update={"stop_after_steps": 3}))
    assert len(torch.load(tmp_path / "c.pt")["applied"]) == 3
    state, _ = _fit(crashy)
    assert torch.load(tmp_path / "c.pt")["applied"] == ref  # every (epoch, step, minibatch digest)
    for name, tensor in ref_state.items():
        assert torch.equal(tensor, state[name]), name


def test_inference_through_the_services_equals_dgls_and_resumes(
    cluster: InProcessCluster, root: Path, tmp_path: Path
) -> None:
    trainer = Trainer(_config(cluster, epochs=1, job_id="infer"))
    try:
        trainer.fit()
        out = tmp_path / "emb"
        h = trainer.node_embeddings(out)
        encoder = trainer.link_predictor().encoder
        assert isinstance(encoder, GraphSAGE)
        want = dgl_inference(encoder, to_dgl(GRAPH), batch_size=64)  # in-process DGL, input ids
        orig = np.load(root / "orig_ids.npy")
        got = np.load(out / "embeddings.npy")[np.argsort(orig)]  # rows by global id -> by input id
        np.testing.assert_allclose(got, want.numpy(), rtol=1e-4, atol=1e-4)  # float32 sums in another order
        kept = sorted(out.glob("layer-*.pt"))
        assert len(kept) == 2
        kept[-1].unlink()  # as if stopped during the last layer: resumes after the first
        (out / "embeddings.npy").unlink()
        again = trainer.node_embeddings(out)
        assert torch.equal(again, h) and (out / "embeddings.npy").exists()
    finally:
        trainer.close()


def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


def test_two_ranks_train_one_link_predictor(cluster: InProcessCluster, tmp_path: Path) -> None:
    env = {**os.environ, "MASTER_ADDR": "127.0.0.1", "MASTER_PORT": str(_free_port())}
    cmd = [sys.executable, "-m", "graphfeed", "train", "--loader", cluster.loader.address, "--task", "link"]
    cmd += ["--epochs", "1", "--batch-size", "32", "--fanouts", "4", "4", "--seed", "3", "--hidden", "16"]
    cmd += ["--eval-negatives", "20", "--world-size", "2", "--job-id", "link-ddp", "--metrics-port", "0"]
    procs = [
        subprocess.Popen(
            [*cmd, "--rank", str(r), "--checkpoint", str(tmp_path / f"r{r}.pt")],
            env=env,
            stdout=subprocess.PIPE,
            stderr=subprocess.PIPE,
            text=True,
        )
        for r in range(2)
    ]
    outs = [p.communicate(timeout=600) for p in procs]
    for p, (out, err) in zip(procs, outs):
        assert p.returncode == 0, err[-3000:]
        assert "test mrr" in out
    r0, r1 = (torch.load(tmp_path / f"r{r}.pt") for r in range(2))
    assert len(r0["applied"]) == len(r1["applied"]) > 0
    assert {d for _, _, d in r0["applied"]}.isdisjoint({d for _, _, d in r1["applied"]})  # each rank its own edges
    for name, tensor in r0["model"].items():
        assert torch.equal(tensor, r1["model"][name]), name
