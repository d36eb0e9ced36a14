"""A graph-store with a memory budget serves exactly the rows of the in-memory one, and keeps to its budget."""

from __future__ import annotations

import argparse
import json
import shutil
import subprocess
import sys
from collections.abc import Callable, Iterator
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path
from typing import Any

import numpy as np
import pytest

from graphfeed.bench.rowstore import register
from graphfeed.cli import build_parser
from graphfeed.common.config import settings_from_args
from graphfeed.common.errors import DataLoss, FailedPrecondition
from graphfeed.common.partition import flat_node_data_path
from graphfeed.graph_store.config import GraphStoreSettings
from graphfeed.graph_store.diskrows import plan_reads
from graphfeed.graph_store.store import GraphStore
from graphfeed.ingest.graph import GraphData
from graphfeed.ingest.partition import write_partitioned
from tests.graphs import write_arithmetic

N, F = 2000, 130  # 520-byte rows: not a divisor of 4096, so rows straddle O_DIRECT blocks
ROW_BYTES = F * 4
PART = "part-00000"

# (memory_budget, direct_io, io_threads): few rows in memory, half in memory, with and without O_DIRECT
BUDGETS = [(20_000, False, 1), (20_000, True, 4), (N // 2 * (ROW_BYTES + 8) // 2 + 4 * N, True, 2)]

OpenStore = Callable[..., GraphStore]


@pytest.fixture(scope="module")
def root(tmp_path_factory: pytest.TempPathFactory) -> Path:
    return write_arithmetic(tmp_path_factory.mktemp("arith-wide"), n=N, max_deg=9, feat_dim=F)


@pytest.fixture
def open_store(root: Path) -> Iterator[OpenStore]:
    opened: list[GraphStore] = []

    def _open(part_dir: Path | None = None, **kw: Any) -> GraphStore:
        opened.append(GraphStore.open(part_dir or root / PART, **kw))
        return opened[-1]

    yield _open
    for s in opened:
        s.close()


@pytest.mark.parametrize(("budget", "direct", "threads"), BUDGETS)
def test_budgeted_rows_equal_in_memory_rows(open_store: OpenStore, budget: int, direct: bool, threads: int) -> None:
    full, small = open_store(), open_store(memory_budget=budget, direct_io=direct, io_threads=threads)
    rng = np.random.default_rng(budget)
    owned = np.arange(full.start, full.stop)
    for ids in (
        rng.choice(owned, 700),
        np.concatenate([owned, owned[::-3]]),
        owned[:0],
        owned[5:6],
        np.sort(rng.choice(owned, 300)),
    ):
        for name in ("feat", "label"):
            assert np.array_equal(small.get_node_data(name, ids), full.get_node_data(name, ids)), (name, len(ids))
    stats = small.row_stats()
    assert stats.rows_disk > 0 and stats.rows_memory > 0 and stats.disk_bytes >= stats.rows_disk // 4 * ROW_BYTES // 4
    assert full.row_stats().rows_disk == 0


@pytest.mark.parametrize(("budget", "direct", "threads"), BUDGETS)
def test_every_public_method_agrees_with_the_in_memory_store(
    open_store: OpenStore, budget: int, direct: bool, threads: int
) -> None:
    full = open_store(chunk_bytes=ROW_BYTES * 7)
    small = open_store(chunk_bytes=ROW_BYTES * 7, memory_budget=budget, direct_io=direct, io_threads=threads)
    ids = np.random.default_rng(1).choice(np.arange(full.start, full.stop), 500)
    positions = np.random.default_rng(2).permutation(600)[:500].astype(np.int64)
    a, b = np.zeros((600, F), np.float32), np.zeros((600, F), np.float32)
    assert (
        full.scatter_node_data("feat", ids, a, positions) == small.scatter_node_data("feat", ids, b, positions) == 500
    )
    assert np.array_equal(a, b)
    chunks_full, chunks_small = list(full.iter_node_data("feat", ids)), list(small.iter_node_data("feat", ids))
    assert [s for s, _ in chunks_small] == [s for s, _ in chunks_full] and len(chunks_small) == -(-500 // 7)
    assert all(np.array_equal(x, y) for (_, x), (_, y) in zip(chunks_full, chunks_small, strict=True))
    out = np.empty((len(ids), F), np.float32)
    assert small.get_node_data("feat", ids, out) is out and np.array_equal(out, full.get_node_data("feat", ids))
    assert np.array_equal(small.get_degrees(ids), full.get_degrees(ids))
    assert all(np.array_equal(small.get_split(s), full.get_split(s)) for s in ("train", "val", "test"))
    assert small.info().node_data == full.info().node_data and small.info().num_nodes == full.info().num_nodes
    seeds = ids[:50]
    x, y = full.sample_neighbors(seeds, 3, False, 7), small.sample_neighbors(seeds, 3, False, 7)
    assert np.array_equal(x.src, y.src) and np.array_equal(x.offsets, y.offsets)


def test_concurrent_requests_each_get_their_own_rows(open_store: OpenStore) -> None:
    full, small = open_store(), open_store(memory_budget=20_000, direct_io=True, io_threads=3)
    owned = np.arange(full.start, full.stop)
    batches = [np.random.default_rng(seed).choice(owned, 400) for seed in range(24)]
    with ThreadPoolExecutor(6) as pool:
        got = list(pool.map(lambda ids: small.get_node_data("feat", ids), batches))
    assert all(np.array_equal(g, full.get_node_data("feat", ids)) for g, ids in zip(got, batches, strict=True))


def test_the_highest_in_degree_rows_are_served_from_memory(open_store: OpenStore) -> None:
    full = open_store()
    owned = np.arange(full.start, full.stop)
    budget = 4 * len(owned) + 100 * (ROW_BYTES + 8)  # the slot map and 100 rows of both tables
    small = open_store(memory_budget=budget, direct_io=True)
    hottest = owned[np.argsort(-full.get_degrees(owned), kind="stable")[:100]]
    small.get_node_data("feat", hottest)
    assert (small.row_stats().rows_memory, small.row_stats().rows_disk) == (100, 0)
    coldest = owned[np.argsort(-full.get_degrees(owned), kind="stable")[100:]]
    small.get_node_data("feat", coldest)
    assert small.row_stats().rows_disk == len(coldest)


def test_a_budget_that_holds_everything_reads_nothing_from_disk(open_store: OpenStore) -> None:
    s = open_store(memory_budget=1 << 30)
    s.get_node_data("feat", np.arange(s.start, s.stop))
    assert s.row_stats().rows_disk == 0 and s.row_stats().rows_memory == s.stop - s.start


def test_adjacent_rows_share_reads_and_reads_stay_within_their_cap() -> None:
    offs = np.array([0, 512, 1024, 8192, 8704, 1 << 20], dtype=np.int64)
    off, length, of = plan_reads(offs, 512, 1, 1 << 20)
    assert (
        off.tolist() == [0, 8192, 1 << 20]
        and length.tolist() == [1536, 1024, 512]
        and of.tolist() == [0, 0, 0, 1, 1, 2]
    )
    off, length, of = plan_reads(offs, 512, 4096, 1 << 20)  # one 4 KiB block, then two adjacent ones merged...
    assert off.tolist() == [0, 8192, 1 << 20] and length.tolist() == [4096, 4096, 4096]
    off, length, of = plan_reads(np.arange(0, 64 * 520, 520, dtype=np.int64), 520, 4096, 8192)
    assert (length <= 8192 + 4096).all() and len(off) > 1 and (np.diff(of) >= 0).all()
    assert all(off[of[j]] <= j * 520 and j * 520 + 520 <= off[of[j]] + length[of[j]] for j in range(64))


def _copy_partition(root: Path, tmp_path: Path) -> Path:
    dst = tmp_path / "copy"
    shutil.copytree(root, dst)
    return dst / PART


def test_a_missing_or_truncated_flat_copy_is_exported_again(open_store: OpenStore, root: Path, tmp_path: Path) -> None:
    part = _copy_partition(root, tmp_path)
    feat = flat_node_data_path(part, "feat")
    feat.unlink()
    with flat_node_data_path(part, "label").open("r+b") as f:
        f.truncate(100)
    full, small = open_store(), open_store(part, memory_budget=10_000, direct_io=True)
    ids = np.arange(full.start, full.stop)
    assert np.array_equal(small.get_node_data("feat", ids), full.get_node_data("feat", ids))
    assert np.array_equal(small.get_node_data("label", ids), full.get_node_data("label", ids))
    assert feat.stat().st_size == len(ids) * ROW_BYTES


def test_a_flat_copy_that_cannot_be_written_is_a_clear_error(open_store: OpenStore, root: Path, tmp_path: Path) -> None:
    part = _copy_partition(root, tmp_path)
    shutil.rmtree(part / "node_data")
    (part / "node_data").write_bytes(b"")  # a file where the directory should be (root ignores chmod)
    with pytest.raises(FailedPrecondition, match=r"cannot write .*feat\.bin"):
        open_store(part, memory_budget=10_000)


def test_a_flat_copy_truncated_while_serving_is_data_loss_not_wrong_rows(
    open_store: OpenStore, root: Path, tmp_path: Path
) -> None:
    part = _copy_partition(root, tmp_path)
    s = open_store(part, memory_budget=10_000, direct_io=False, io_threads=1)
    with flat_node_data_path(part, "feat").open("r+b") as f:
        f.truncate(ROW_BYTES * 10)
    with pytest.raises(DataLoss, match="truncated"):
        s.get_node_data("feat", np.arange(s.start, s.stop))


def test_memory_budget_setting_takes_byte_suffixes(root: Path) -> None:
    s = GraphStoreSettings(part_dir=root / PART, memory_budget="128MiB", direct_io=True)
    assert (s.memory_budget, s.direct_io, GraphStoreSettings(part_dir=root / PART).memory_budget) == (
        128 << 20,
        True,
        0,
    )
    args = build_parser().parse_args(
        ["serve", "graph-store", "--part-dir", str(root / PART), "--memory-budget", "16MiB"]
    )
    assert settings_from_args(GraphStoreSettings, args).memory_budget == 16 << 20


# Run in a fresh interpreter: opens the store, reads every row a few times in random batches and
# prints the largest growth of VmRSS (resident anonymous + file pages) over the RSS before open.
_RSS_PROBE = """
import json, sys
import numpy as np
from graphfeed.graph_store.store import GraphStore
from graphfeed.graph_store.diskrows import plan_reads
from graphfeed.common.rows import take_rows

def rss():
    with open("/proc/self/status") as f:
        return next(int(line.split()[1]) * 1024 for line in f if line.startswith("VmRSS:"))

part, budget, direct = sys.argv[1], int(sys.argv[2]), sys.argv[3] == "1"
take_rows(np.zeros((4, 4), np.float32), np.arange(2), None)  # numba code loaded before the baseline
plan_reads(np.arange(2, dtype=np.int64), 8, 1, 64)
base, peak = rss(), 0
s = GraphStore.open(part, memory_budget=budget, direct_io=direct, io_threads=4)
rng = np.random.default_rng(0)
for _ in range(3):
    for batch in np.array_split(rng.permutation(np.arange(s.start, s.stop)), 64):
        rows = s.get_node_data("feat", batch)
        peak = max(peak, rss() - base)
        del rows
print(json.dumps({"growth": peak, "disk_rows": s.row_stats().rows_disk}))
"""

BIG_ROWS, BIG_F = 1 << 17, 128  # 64 MiB of float32 features
BUDGET = 16 << 20
# Independent of the table's size; ~13 MiB measured at a budget near 0: topology pages and the
# degrees (1 MiB each here), the RocksDB handle, allocator arenas of the I/O threads and their
# 320 KiB buffers, a 1 MiB output batch and index temporaries.
OVERHEAD = 16 << 20


@pytest.fixture(scope="module")
def big_part(tmp_path_factory: pytest.TempPathFactory) -> Path:
    n = BIG_ROWS
    v = np.arange(n, dtype=np.int64)
    feat = np.random.default_rng(0).random((n, BIG_F), dtype=np.float32)
    g = GraphData(
        name="big-features",
        num_nodes=n,
        src=(v + 1) % n,
        dst=v,
        node_data={"feat": feat},
        splits={"train": v[:10]},
        num_classes=2,
    )
    root = tmp_path_factory.mktemp("big")
    write_partitioned(g, root, 1, method="random")
    return root / PART


def _rss_growth(part: Path, budget: int, direct: bool) -> dict[str, int]:
    proc = subprocess.run(
        [sys.executable, "-c", _RSS_PROBE, str(part), str(budget), "1" if direct else "0"],
        capture_output=True,
        text=True,
        timeout=300,
    )
    assert proc.returncode == 0, proc.stderr
    return json.loads(proc.stdout.splitlines()[-1])


@pytest.mark.slow
def test_the_memory_budget_is_respected_under_load(big_part: Path) -> None:
    """Features 4x the budget, read in full three times: the process grows by the budget plus a
    stated overhead, with O_DIRECT (nothing in the page cache) and without (pread pages are page
    cache, charged to a cgroup but not to the process's RSS). The unbudgeted store, read the same
    way, grows by the whole table: the measure can fail."""
    table = BIG_ROWS * BIG_F * 4
    for direct in (True, False):
        got = _rss_growth(big_part, BUDGET, direct)
        assert got["disk_rows"] >= 3 * BIG_ROWS * 3 // 4
        assert got["growth"] <= BUDGET + OVERHEAD, (direct, got)
    assert _rss_growth(big_part, 0, False)["growth"] >= table


def test_rowstore_bench_runs_every_method_and_checks_their_rows(tmp_path: Path) -> None:
    parser = argparse.ArgumentParser()
    register(parser.add_subparsers())
    args = parser.parse_args(["rowstore", "--rows", "3000", "--batches", "200", "--samples", "1", "--no-drop"])
    args.out, args.tmp = tmp_path / "rowstore.json", tmp_path
    args.func(args)  # every method's rows are compared with the table (AssertionError otherwise)
    result = json.loads(args.out.read_text())
    names = {r["method"] for r in result["results"]}
    assert {
        "rocksdb_chunks",
        "rocksdb_rows",
        "memmap",
        "flat_direct_t8",
        "flat_pread_t1",
        "store_direct_25pct",
    } <= names
    assert all(r["state"] == "warm" for r in result["results"]) and args.out.with_suffix(".md").exists()
