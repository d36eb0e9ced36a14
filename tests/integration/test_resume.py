"""A trainer process killed mid-epoch resumes with no lost or repeated step.

Real processes: graph-stores, sampler and loader via LocalCluster (`graphfeed serve ...`),
and the example trainer via `graphfeed train --checkpoint`. The trainer is SIGKILLed while
it trains; a new process resumes from the checkpoint. Its record of applied steps (kept in
the checkpoint, atomically with the model) must be exactly the uninterrupted run's, step
for step and minibatch digest for minibatch digest, and the final weights identical.
"""

from __future__ import annotations

import os
import signal
import subprocess
import sys
import time
from pathlib import Path

import pytest
import torch

from graphfeed.cluster import LocalCluster

pytestmark = [pytest.mark.integration, pytest.mark.slow]
EPOCHS = 2
BATCH = 64


def _train_cmd(address: str, ckpt: Path) -> list[str]:
    return [
        sys.executable,
        "-m",
        "graphfeed",
        "train",
        "--loader",
        address,
        "--epochs",
        str(EPOCHS),
        "--batch-size",
        str(BATCH),
        "--fanouts",
        "5",
        "5",
        "--seed",
        "7",
        "--checkpoint",
        str(ckpt),
        "--device",
        "cpu",
    ]


def _run(cmd: list[str], timeout_s: float = 300) -> subprocess.CompletedProcess:
    out = subprocess.run(cmd, capture_output=True, text=True, timeout=timeout_s)
    assert out.returncode == 0, out.stderr[-3000:]
    return out


def _applied(ckpt: Path) -> list:
    try:
        return torch.load(ckpt)["applied"]
    except (FileNotFoundError, EOFError, RuntimeError):
        return []


def test_killed_trainer_resumes_without_lost_or_repeated_steps(process_cluster: LocalCluster, tmp_path: Path) -> None:
    cluster = process_cluster
    assert cluster.loader is not None, "LocalCluster.start starts a loader"
    reference = tmp_path / "reference.pt"
    _run(_train_cmd(cluster.loader.address, reference))
    ref = torch.load(reference)
    steps_per_epoch = len(ref["applied"]) // EPOCHS
    assert [(e, s) for e, s, _ in ref["applied"]] == [(e, s) for e in range(EPOCHS) for s in range(steps_per_epoch)]

    ckpt = tmp_path / "crashy.pt"
    proc = subprocess.Popen(_train_cmd(cluster.loader.address, ckpt), stdout=subprocess.DEVNULL, stderr=subprocess.PIPE)
    assert proc.stderr is not None  # stderr=PIPE
    deadline = time.monotonic() + 240
    while len(_applied(ckpt)) < 3:  # mid-epoch 0: 3 of ~26 steps applied
        assert proc.poll() is None, proc.stderr.read().decode()[-3000:]
        assert time.monotonic() < deadline, "trainer made no progress"
        time.sleep(0.05)
    os.kill(proc.pid, signal.SIGKILL)
    proc.wait()
    proc.stderr.close()
    at_kill = _applied(ckpt)
    assert 0 < len(at_kill) < len(ref["applied"]), "the kill must land mid-run"

    _run(_train_cmd(cluster.loader.address, ckpt))
    resumed = torch.load(ckpt)
    assert resumed["applied"] == ref["applied"], "same steps, same order, byte-identical minibatches"
    for name, tensor in ref["model"].items():
        assert torch.equal(resumed["model"][name], tensor), f"weights differ after resume: {name}"
