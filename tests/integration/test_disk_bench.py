"""``graphfeed bench disk``'s unpacked system as a user runs it: budgeted ``--direct-io``
graph-store processes serve the loader's cache misses over gRPC (shared memory and wire only),
and every minibatch equals the in-memory system's, byte for byte."""

from __future__ import annotations

import os
from collections.abc import Iterator
from pathlib import Path

import numpy as np
import pytest

from graphfeed.bench import disk
from graphfeed.bench.disk_stores import BudgetedStores, RemoteRows
from graphfeed.common.partition import GraphManifest, part_dir_name
from graphfeed.graph_store.partitions import LocalPartitionSet, RemotePartitionSet
from graphfeed.graph_store.store import GraphStore
from graphfeed.loader.job import JobSpec
from graphfeed.loader.minibatch import ReadyMinibatch
from tests.graphs import write_arithmetic

pytestmark = pytest.mark.integration

N = 400  # 16-byte rows: 6.4 KB of features, 800 B of them kept in memory by the two stores
JOB = JobSpec(job_id="disk", job_seed=5, batch_size=16, fanouts=(3, 2), shuffle=True)


@pytest.fixture(scope="module")
def root(tmp_path_factory: pytest.TempPathFactory) -> Path:
    return write_arithmetic(tmp_path_factory.mktemp("disk-bench"), n=N)


@pytest.fixture(scope="module")
def local(root: Path) -> Iterator[LocalPartitionSet]:
    parts = LocalPartitionSet([GraphStore.open(root / part_dir_name(p)) for p in range(2)])
    yield parts
    parts.close()


@pytest.fixture(scope="module")
def stores(root: Path, tmp_path_factory: pytest.TempPathFactory) -> Iterator[BudgetedStores]:
    running = BudgetedStores.start(root, budget_bytes=400, log_dir=tmp_path_factory.mktemp("logs"), io_threads=2)
    yield running
    running.stop()  # raises if a graph-store exited non-zero


class Steps:
    """Each streamed step's (input nodes, features, labels), copied as the consumer takes it."""

    def __init__(self) -> None:
        self.got: dict[int, tuple[np.ndarray, np.ndarray, np.ndarray]] = {}

    def __call__(self, mb: ReadyMinibatch) -> None:
        self.got[mb.step] = (mb.blocks.input_nodes.copy(), np.array(mb.features, copy=True), mb.labels.copy())


@pytest.mark.parametrize("shm_dir", ["/dev/shm", ""], ids=["shared-memory", "wire-only"])
def test_budgeted_stores_stream_the_in_memory_minibatches(
    root: Path, local: LocalPartitionSet, stores: BudgetedStores, shm_dir: str
) -> None:
    expected, got = Steps(), Steps()
    disk.run_loader(local, JOB, cache_policy="none", on_minibatch=expected)()
    row_bytes = GraphManifest.load(root).node_data["feat"].row_bytes
    rows = RemoteRows(local, RemotePartitionSet(stores.addresses, timeout_s=30.0, shm_dir=shm_dir))
    shm0 = stores.shm_bytes()
    try:
        prepare = lambda: disk.run_loader(  # noqa: E731
            rows, JOB, cache_policy="static_degree", cache_bytes=40 * row_bytes, on_minibatch=got
        )
        r = disk.measure("stores", prepare, row_bytes, root, stores.pids, cold=False)
    finally:
        rows.close()
    assert len(expected.got) == r["steps"] > 1
    assert sorted(got.got) == sorted(expected.got)
    for step, (nodes, feats, labels) in expected.got.items():
        np.testing.assert_array_equal(got.got[step][0], nodes)
        assert got.got[step][1].dtype == feats.dtype and got.got[step][1].tobytes() == feats.tobytes(), f"step {step}"
        np.testing.assert_array_equal(got.got[step][2], labels)
    # the misses were read from disk by the graph-store processes, and their memory was read
    assert r["cache_misses"] > 0 and r["disk_read_bytes"] >= r["needed_bytes"] > 0
    assert (stores.shm_bytes() > shm0) == bool(shm_dir), "shared memory used exactly where offered"
    assert r["graph_store_processes"] == 2 and r["store_peak_rss_bytes"] >= r["store_rss_before_bytes"] > 0


def test_memmap_baseline_runs_under_a_real_cgroup_limit_and_removes_it(root: Path, tmp_path: Path) -> None:
    """The naive memmap baseline in a child process whose memory cgroup is limited to its memory
    without features + the budget; the cgroup is gone afterwards."""
    from graphfeed.bench import disk_cgroup
    from graphfeed.common.partition import flat_node_data_path

    if not (os.access(disk_cgroup.MEMCG, os.W_OK) and os.geteuid() == 0):
        pytest.skip(f"needs root and a writable cgroup v1 memory controller at {disk_cgroup.MEMCG}")
    flat = tmp_path / "feat.bin"  # partitions own consecutive gids: their flat tables concatenate in gid order
    flat.write_bytes(b"".join(flat_node_data_path(root / part_dir_name(p), "feat").read_bytes() for p in range(2)))
    job = {"job_id": "disk", "job_seed": 5, "batch_size": 16, "fanouts": [3, 2], "shuffle": True}
    before = set(disk_cgroup.MEMCG.iterdir())
    r = disk_cgroup.run_in_cgroup(root, flat, job, budget_bytes=1 << 20, max_steps=0)
    assert "skipped" not in r, r["skipped"]
    steps = -(-N * 3 // 5 // 16)  # the train split (v % 5 in {0, 1, 2}), batches of 16
    assert r["steps"] == steps and r["input_rows"] >= N * 3 // 5
    assert r["cgroup_limit_bytes"] == r["memory_without_features_bytes"] + (1 << 20)
    assert 0 < r["cgroup_max_usage_bytes"] <= r["cgroup_limit_bytes"]
    assert set(disk_cgroup.MEMCG.iterdir()) == before  # the cgroup was removed
