"""DistDGL as a benchmark system: 2 servers and 1 trainer on 2 emulated machines over Cora.

Real DGL processes in real mount namespaces (needs root, ``unshare`` and ``nsenter``).
"""

from __future__ import annotations

import json
import os
import shutil
import signal
import subprocess
import sys
from pathlib import Path

import psutil
import pytest

from graphfeed.bench.distdgl import GRAPH_NAME, DistDGLSystem, ensure_partitions
from graphfeed.bench.harness import load_global

pytestmark = [
    pytest.mark.integration,
    pytest.mark.slow,
    pytest.mark.skipif(
        os.geteuid() != 0 or not all(shutil.which(t) for t in ("unshare", "nsenter", "ss")),
        reason="emulated machines need root (mount namespaces), util-linux (unshare, nsenter) and iproute2 (ss)",
    ),
]
REPO = Path(__file__).resolve().parents[2]


@pytest.fixture(scope="module")
def part_config(cora_root: Path, tmp_path_factory: pytest.TempPathFactory) -> Path:
    return ensure_partitions(cora_root, tmp_path_factory.mktemp("distdgl"), load_global)


def _no_load(root: Path) -> tuple:
    raise AssertionError(f"{root} was partitioned already; the cache must be used")


def _mount_ns(pid: int) -> str:
    return os.readlink(f"/proc/{pid}/ns/mnt")


def _shm_files(pid: int) -> list[str]:
    """The /dev/shm that process ``pid`` sees."""
    nsenter = shutil.which("nsenter")
    assert nsenter is not None  # the module is skipped without it
    return subprocess.run(
        [nsenter, f"--target={pid}", "--mount", "ls", "/dev/shm"], capture_output=True, text=True, check=True
    ).stdout.split()


def _gone(pids: list[int]) -> bool:
    return not any(psutil.pid_exists(p) and psutil.Process(p).status() != psutil.STATUS_ZOMBIE for p in pids)


def test_partitions_are_cached_by_dataset(cora_root: Path, part_config: Path) -> None:
    assert ensure_partitions(cora_root, part_config.parent.parent, _no_load) == part_config
    meta = json.loads(part_config.read_text())
    assert (meta["num_parts"], meta["part_method"], meta["num_nodes"]) == (2, "metis", 2708)


def test_two_machines_serve_a_trainer_and_shut_down_cleanly(cora_root: Path, part_config: Path, tmp_path: Path) -> None:
    num_train = len(load_global(cora_root)[2])
    with DistDGLSystem(part_config, tmp_path, [5, 5], batch_size=512) as system:
        assert system.num_train == num_train  # graphfeed's training split, found through the train_mask DistTensor
        pids = {name: p.popen.pid for name, p in system.procs.items()}
        # machine 0 = server 0 + trainer, machine 1 = server 1, neither this process's mounts
        assert _mount_ns(pids["trainer"]) == _mount_ns(pids["server-0"])
        assert len({_mount_ns(pids["server-0"]), _mount_ns(pids["server-1"]), _mount_ns(os.getpid())}) == 3
        # each server's shared memory under the same names, in its own machine's /dev/shm only
        for server in ("server-0", "server-1"):
            assert GRAPH_NAME in _shm_files(pids[server])
        assert not [f for f in os.listdir("/dev/shm") if f.startswith(GRAPH_NAME)]
        runs = [system.run(2), system.run(5)]  # 5 x 512 > 1625 training nodes: the second run crosses into a new epoch
        assert [r.minibatches for r in runs] == [2, 5]
        # the last run's features, pulled at the table's width (DGL names the one node type _N)
        assert system.feat_shapes["_N"][0] == 2708 and system.pulled["_N"][1:] == system.feat_shapes["_N"][1:]
        assert all(r.sampled_edges > 0 and r.seconds > 0 for r in runs)
        assert set(runs[0].cpu_seconds) == {"trainer", "server-0", "server-1"}
        # the trainer reads machine 0's partition from shared memory and machine 1's over TCP
        wire = {k: sum(r.traffic[k] for r in runs) for k in runs[0].traffic}
        assert wire["server-1 rpc wire"] > 10 * wire["server-0 rpc wire"], wire
    assert system.close() == {"server-0": 0, "server-1": 0, "trainer": 0}, "the trainer's exit shuts both servers down"
    assert _gone(list(pids.values()))


def test_a_dead_trainer_fails_the_run_and_its_servers_are_stopped(part_config: Path, tmp_path: Path) -> None:
    system = DistDGLSystem(part_config, tmp_path, [5], batch_size=32, stop_timeout_s=5.0)
    system.start()
    pids = [p.popen.pid for p in system.procs.values()]
    try:
        os.kill(system.procs["trainer"].popen.pid, signal.SIGKILL)
        with pytest.raises(RuntimeError, match="DistDGL trainer"):
            system.run(1)
    finally:
        codes = system.close()
    assert codes["trainer"] == -signal.SIGKILL
    assert _gone(pids), "servers waiting for a dead trainer must not be left behind"


def test_cli_compares_distdgl_with_in_process_dgl(cora_root: Path, part_config: Path, tmp_path: Path) -> None:
    out = tmp_path / "distdgl.json"
    cmd = [
        sys.executable,
        "-m",
        "graphfeed",
        "bench",
        "distdgl",
        "--root",
        str(cora_root),
        "--workdir",
        str(part_config.parent.parent),
        "--steps",
        "2",
        "--repeats",
        "1",
        "--batch-size",
        "32",
        "--fanouts",
        "5",
        "5",
        "--out",
        str(out),
    ]
    done = subprocess.run(cmd, capture_output=True, text=True, timeout=240, cwd=REPO)
    assert done.returncode == 0, done.stderr[-3000:]
    result = json.loads(out.read_text())
    assert set(result["systems"]) == {"dgl_sample_gather", "distdgl"}
    distdgl = result["systems"]["distdgl"]
    assert len(distdgl["runs_minibatches_per_s"]) == 1 and distdgl["minibatches_per_s"] > 0
    assert set(distdgl["cpu_seconds_per_minibatch"]) == {"trainer", "server-0", "server-1"}
    assert result["distdgl_ratio_vs_dgl"] > 0 and "distdgl_ratio_vs_dgl" in out.with_suffix(".md").read_text()
