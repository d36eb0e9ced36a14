"""Two trainer processes train one model with DDP (gloo), each fed its own rank's seeds."""

from __future__ import annotations

import os
import socket
import subprocess
import sys
from pathlib import Path

import pytest
import torch

from graphfeed.cluster import LocalCluster

pytestmark = [pytest.mark.integration, pytest.mark.slow]


def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def test_two_ranks_train_one_model(process_cluster: LocalCluster, tmp_path: Path) -> None:
    assert process_cluster.loader is not None, "LocalCluster.start starts a loader"
    env = {**os.environ, "MASTER_ADDR": "127.0.0.1", "MASTER_PORT": str(_free_port())}
    procs = []
    for rank in range(2):
        cmd = [
            sys.executable,
            "-m",
            "graphfeed",
            "train",
            "--loader",
            process_cluster.loader.address,
            "--epochs",
            "1",
            "--batch-size",
            "128",
            "--fanouts",
            "5",
            "5",
            "--seed",
            "3",
            "--rank",
            str(rank),
            "--world-size",
            "2",
            "--job-id",
            "ddp",
            "--checkpoint",
            str(tmp_path / f"r{rank}.pt"),
        ]
        procs.append(subprocess.Popen(cmd, env=env, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True))
    outs = [p.communicate(timeout=300) for p in procs]
    for p, (out, err) in zip(procs, outs):
        assert p.returncode == 0, err[-3000:]
        assert "test_acc" in out
    r0, r1 = (torch.load(tmp_path / f"r{r}.pt") for r in range(2))
    # Each rank trains on a different half of the seeds, so only gradient averaging keeps
    # the replicas equal.
    assert len(r0["applied"]) == len(r1["applied"]) > 0
    assert {d for *_, d in r0["applied"]}.isdisjoint({d for *_, d in r1["applied"]})
    for name, tensor in r0["model"].items():
        assert torch.allclose(r1["model"][name], tensor, atol=1e-6), f"replicas diverged: {name}"
