"""The trainer in operation with real servers: /metrics in both modes, waiting for a loader that
starts late, giving up with one line and status 2, DDP ranks from torchrun's environment."""

from __future__ import annotations

import os
import socket
import subprocess
import sys
import threading
import time
import urllib.request
from collections.abc import Callable
from pathlib import Path

import pytest
import torch
from prometheus_client import CollectorRegistry

from graphfeed.loader.config import LoaderSettings
from graphfeed.loader.server import serve as serve_loader
from graphfeed.trainer.metrics import TrainerMetrics
from graphfeed.trainer.train import TrainConfig, Trainer
from tests.integration.inprocess import InProcessCluster

pytestmark = pytest.mark.integration


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


def scrape(port: int) -> str:
    return urllib.request.urlopen(f"http://127.0.0.1:{port}/metrics", timeout=10).read().decode()


def wait_until(cond: Callable[[], bool], timeout_s: float, what: str) -> None:
    deadline = time.monotonic() + timeout_s
    while not cond():
        assert time.monotonic() < deadline, f"timed out after {timeout_s}s waiting for {what}"
        time.sleep(0.1)  # poll interval; the condition is what is waited on


@pytest.mark.parametrize("mode", ["loader", "embedded"])
def test_trainer_metrics_count_steps_data_wait_and_step_time(cora_cluster: InProcessCluster, mode: str) -> None:
    wiring: dict[str, object] = (
        {"loader_address": cora_cluster.loader.address}
        if mode == "loader"
        else {
            "graph_stores": [s.address for s in cora_cluster.graph_stores],
            "sampler_address": cora_cluster.sampler.address,
        }
    )
    cfg = TrainConfig.model_validate(
        {
            **wiring,
            "epochs": 1,
            "batch_size": 32,
            "fanouts": [5, 5],
            "job_id": f"metrics-{mode}",
            "rank": 0,
            "world_size": 1,
            "shm_dir": "",
            "stop_after_steps": 3,
            "gpu_cache_bytes": 0,
        }
    )
    metrics = TrainerMetrics.create(cfg.job_id, cfg.rank)
    port = metrics.serve("127.0.0.1", 0)
    trainer = Trainer(cfg, metrics)
    try:
        trainer.fit()
    finally:
        trainer.close()
    text = scrape(port)
    labels = f'job="metrics-{mode}",rank="0"'
    assert f"graphfeed_trainer_minibatches_total{{{labels}}} 3.0" in text
    assert f"graphfeed_trainer_step_seconds_count{{{labels}}} 3.0" in text
    wait = metrics.registry.get_sample_value(
        "graphfeed_trainer_data_wait_seconds_total", {"job": f"metrics-{mode}", "rank": "0"}
    )
    assert wait is not None and wait > 0


def train_cmd(loader: str, *extra: str) -> list[str]:
    return [
        sys.executable,
        "-m",
        "graphfeed",
        "train",
        "--loader",
        loader,
        "--epochs",
        "1",
        "--batch-size",
        "64",
        "--fanouts",
        "5",
        "5",
        "--shm-dir",
        "",
        *extra,
    ]


class Stderr:
    """Collects a child's stderr lines as they come (so the test can wait on one)."""

    def __init__(self, proc: subprocess.Popen) -> None:
        self.lines: list[str] = []
        assert proc.stderr is not None
        stream = proc.stderr
        self._thread = threading.Thread(target=lambda: self.lines.extend(iter(stream.readline, "")), daemon=True)
        self._thread.start()

    def text(self) -> str:
        self._thread.join(timeout=30)
        return "".join(self.lines)


def test_trainer_waits_for_a_loader_that_starts_late(cora_cluster: InProcessCluster) -> None:
    loader_port, metrics_port = free_port(), free_port()
    cmd = train_cmd(
        f"127.0.0.1:{loader_port}",
        "--connect-timeout-s",
        "180",
        "--metrics-port",
        str(metrics_port),
        "--job-id",
        "late",
        "--stop-after-steps",
        "2",
    )
    proc = subprocess.Popen(cmd, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
    err = Stderr(proc)
    loader = None
    try:
        wait_until(
            lambda: any("waiting for loader at" in line for line in err.lines), 120, "a 'waiting for loader' line"
        )
        assert 'graphfeed_trainer_minibatches_total{job="late",rank="0"} 0.0' in scrape(
            metrics_port
        )  # scraped while waiting
        settings = LoaderSettings(
            graph_store_addresses=[s.address for s in cora_cluster.graph_stores],
            sampler_address=cora_cluster.sampler.address,
            port=loader_port,
            metrics_port=-1,
            health_port=-1,
            shm_dir="",
        )
        loader = serve_loader(settings, CollectorRegistry())[0]
        assert proc.wait(timeout=180) == 0, err.text()[-3000:]
    finally:
        if proc.poll() is None:
            proc.kill()
        if loader is not None:
            loader.stop(0)
    assert "Traceback" not in err.text()


def test_trainer_without_a_loader_exits_2_with_one_line() -> None:
    proc = subprocess.run(
        train_cmd(f"127.0.0.1:{free_port()}", "--connect-timeout-s", "3", "--metrics-port", "0"),
        capture_output=True,
        text=True,
        timeout=180,
    )
    assert proc.returncode == 2, proc.stderr[-3000:]
    assert "Traceback" not in proc.stderr
    last = proc.stderr.strip().splitlines()[-1]
    assert last.startswith("graphfeed train: loader at 127.0.0.1:") and "did not answer within 3s: UNAVAILABLE" in last
    assert "waiting for loader at 127.0.0.1:" in proc.stderr


@pytest.mark.slow
def test_two_ranks_from_torchrun_environment(cora_cluster: InProcessCluster, tmp_path: Path) -> None:
    base = {**os.environ, "MASTER_ADDR": "127.0.0.1", "MASTER_PORT": str(free_port()), "WORLD_SIZE": "2"}
    procs = []
    for rank in range(2):
        env = {**base, "RANK": str(rank), "LOCAL_RANK": str(rank)}  # as torchrun sets them: no --rank flags
        cmd = train_cmd(
            cora_cluster.loader.address,
            "--job-id",
            "torchrun",
            "--metrics-port",
            "0",
            "--seed",
            "3",
            "--checkpoint",
            str(tmp_path / f"r{rank}.pt"),
            "--stop-after-steps",
            "3",
        )
        procs.append(subprocess.Popen(cmd, env=env, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True))
    outs = [p.communicate(timeout=300) for p in procs]
    for p, (_out, err) in zip(procs, outs):
        assert p.returncode == 0, err[-3000:]
    r0, r1 = (torch.load(tmp_path / f"r{r}.pt") for r in range(2))
    assert len(r0["applied"]) == len(r1["applied"]) == 3
    assert {d for *_, d in r0["applied"]}.isdisjoint({d for *_, d in r1["applied"]})  # each rank its own seeds
    for name, tensor in r0["model"].items():
        assert torch.allclose(r1["model"][name], tensor, atol=1e-6), f"replicas diverged: {name}"
