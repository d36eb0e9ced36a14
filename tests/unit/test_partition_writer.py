"""write_partitioned and `graphfeed ingest`: what is written reads back as exactly the input graph."""

from __future__ import annotations

import argparse
import subprocess
import sys
import time
from pathlib import Path

import numpy as np
import pytest

from graphfeed.common.errors import FailedPrecondition
from graphfeed.common.partition import GraphManifest, PartitionReader, id_dtype, part_dir_name
from graphfeed.ingest import cli
from graphfeed.ingest.graph import GraphData
from graphfeed.ingest.partition import symmetric_csr, write_partitioned
from graphfeed.ingest.sources import load_cora, load_numpy_dir
from graphfeed.ingest.synthetic import generate_preset


@pytest.fixture(scope="module")
def cora() -> GraphData:
    return load_cora(split_seed=0)


@pytest.fixture(scope="module")
def tiny() -> GraphData:
    return generate_preset("tiny", seed=1)


def input_rows(g: GraphData, orig_of_gid: np.ndarray) -> np.ndarray:
    """Input row (0..N-1) of each gid, via the dataset ids kept in orig_ids."""
    orig = np.arange(g.num_nodes) if g.orig_ids is None else g.orig_ids
    order = np.argsort(orig)
    rows = order[np.searchsorted(orig, orig_of_gid, sorter=order)]
    assert np.array_equal(orig[rows], orig_of_gid)
    return rows


def check_round_trip(g: GraphData, root: Path, num_partitions: int) -> float:
    """Asserts that ``root`` holds exactly ``g``; returns the cut fraction."""
    m = GraphManifest.load(root)
    offsets = np.asarray(m.node_offsets)
    assert offsets[0] == 0 and offsets[-1] == g.num_nodes and (np.diff(offsets) > 0).all()
    assert m.num_partitions == num_partitions and m.num_edges == g.num_edges and m.num_classes == g.num_classes
    row_of_gid = input_rows(g, np.load(root / "orig_ids.npy"))
    assert len(np.unique(row_of_gid)) == g.num_nodes
    seen_eids: list[np.ndarray] = []
    seen_splits: dict[str, list[np.ndarray]] = {k: [] for k in g.splits}
    cut = 0
    for p in range(num_partitions):
        r = PartitionReader(root / part_dir_name(p))
        try:
            assert (r.start, r.stop) == (offsets[p], offsets[p + 1])
            assert np.array_equal(r.orig_ids, np.load(root / "orig_ids.npy")[r.start : r.stop])
            dst = r.start + np.repeat(np.arange(r.num_owned), np.diff(r.indptr))
            src = np.asarray(r.indices)
            eids = np.asarray(r.edge_ids)
            # every stored edge is the input edge with that id, in input rows
            assert np.array_equal(row_of_gid[src], g.src[eids]) and np.array_equal(row_of_gid[dst], g.dst[eids])
            if g.edge_ts is not None:
                assert r.edge_ts is not None and np.array_equal(r.edge_ts, g.edge_ts[eids])
            remote = (src < r.start) | (src >= r.stop)
            assert np.array_equal(r.halo, np.unique(src[remote]))
            cut += int(remote.sum())
            seen_eids.append(eids)
            rows = row_of_gid[r.start : r.stop]
            for name, table in g.node_data.items():
                assert np.array_equal(r.node_data(name), table[rows]), name
            for name in g.splits:
                gids = r.split(name)
                assert gids is not None, f"split {name} missing from partition {p}"
                assert ((gids >= r.start) & (gids < r.stop)).all()
                seen_splits[name].append(row_of_gid[gids])
        finally:
            r.close()
    assert np.array_equal(np.sort(np.concatenate(seen_eids)), np.arange(g.num_edges))  # union = input edge list
    for name, ids in g.splits.items():
        assert np.array_equal(np.sort(np.concatenate(seen_splits[name])), np.sort(ids)), name
    return cut / g.num_edges


@pytest.mark.parametrize("num_partitions", [2, 3])
@pytest.mark.parametrize("method", ["metis", "random"])
@pytest.mark.parametrize("graph", ["cora", "tiny"])
def test_round_trip(
    request: pytest.FixtureRequest, tmp_path: Path, graph: str, method: str, num_partitions: int
) -> None:
    g = request.getfixturevalue(graph)
    write_partitioned(g, tmp_path, num_partitions, method, seed=0)
    check_round_trip(g, tmp_path, num_partitions)


def test_metis_cuts_far_fewer_edges_than_random(cora: GraphData, tmp_path: Path) -> None:
    metis = write_and_cut(cora, tmp_path / "m", "metis")
    rand = write_and_cut(cora, tmp_path / "r", "random")
    assert rand > 0.4  # random 2-way: about half of all edges cross
    assert metis < 0.25 * rand


def write_and_cut(g: GraphData, root: Path, method: str) -> float:
    write_partitioned(g, root, 2, method, seed=0)
    return check_round_trip(g, root, 2)


def test_edge_timestamps_round_trip(tmp_path: Path) -> None:
    d = tmp_path / "npy"
    d.mkdir()
    rng = np.random.default_rng(0)
    n, e = 50, 300
    arrays: dict[str, np.ndarray] = {
        "src": rng.integers(0, n, e),
        "dst": rng.integers(0, n, e),
        "ts": rng.integers(0, 10**12, e),
        "feat": rng.standard_normal((n, 3)).astype(np.float32),
        "label": rng.integers(0, 4, n),
        "train_idx": np.arange(30),
        "val_idx": np.arange(30, 40),
        "test_idx": np.arange(40, 50),
    }
    for name, arr in arrays.items():
        np.save(d / f"{name}.npy", arr)
    g = load_numpy_dir(d)
    write_partitioned(g, tmp_path / "out", 3, "random", seed=2)
    check_round_trip(g, tmp_path / "out", 3)
    assert GraphManifest.load(tmp_path / "out").has_edge_timestamps


def test_topology_ids_are_as_narrow_as_the_graph_allows(cora: GraphData, tmp_path: Path) -> None:
    assert id_dtype(2**31) == np.int32 and id_dtype(2**31 + 1) == np.int64  # ids are < count
    write_partitioned(cora, tmp_path, 2, "random", seed=0)
    part = tmp_path / part_dir_name(1)
    r = PartitionReader(part)
    assert r.indices.dtype == r.edge_ids.dtype == np.int32 and r.indptr.dtype == np.int64
    r.close()
    # A partition written with int64 ids (before this format, or a graph with >= 2**31 nodes) still serves ...
    for name in ("indices", "edge_ids"):
        np.save(part / f"{name}.npy", np.load(part / f"{name}.npy").astype(np.int64))
    PartitionReader(part).close()
    # ... but float ids are refused with a message naming the file.
    np.save(part / "indices.npy", np.load(part / "indices.npy").astype(np.float64))
    with pytest.raises(FailedPrecondition, match=r"indices\.npy is float64"):
        PartitionReader(part)


def parse(argv: list[str]) -> argparse.Namespace:
    parser = argparse.ArgumentParser(prog="graphfeed")
    cli.register(parser.add_subparsers(dest="command", required=True))
    return parser.parse_args(argv)


def test_cli_ingest_synthetic(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    out = tmp_path / "g"
    argv = [
        "ingest",
        "--source",
        "synthetic",
        "--preset",
        "tiny",
        "--num-nodes",
        "1500",
        "--out",
        str(out),
        "--num-partitions",
        "3",
        "--method",
        "random",
        "--seed",
        "4",
        "--no-progress",
    ]
    assert cli.run(parse(argv)) == 0
    text = capsys.readouterr().out
    assert [line.split(":")[0] for line in text.splitlines()[1:]] == [
        "partition 0",
        "partition 1",
        "partition 2",
        "total",
    ]
    assert "1,500 nodes" in text and "cut fraction" in text
    check_round_trip(generate_preset("tiny", seed=4, split_seed=0, num_nodes=1500), out, 3)

    assert cli.run(parse(argv)) == 2  # refuses to overwrite
    assert "--force" in capsys.readouterr().err
    assert cli.run(parse([*argv[:-5], "--num-partitions", "2", "--force", "--no-progress"])) == 0
    assert sorted(p.name for p in out.iterdir()) == ["manifest.json", "orig_ids.npy", "part-00000", "part-00001"]


@pytest.mark.parametrize(
    "argv, message",
    [
        (["--source", "numpy"], "--path"),
        (["--source", "synthetic", "--num-nodes", "10"], "missing"),
        (["--source", "cora", "--preset", "tiny"], "only apply to --source synthetic"),
    ],
)
def test_cli_user_errors(tmp_path: Path, capsys: pytest.CaptureFixture[str], argv: list[str], message: str) -> None:
    assert cli.run(parse(["ingest", *argv, "--out", str(tmp_path / "o")])) == 2
    assert message in capsys.readouterr().err


def test_cli_help_documents_every_flag(capsys: pytest.CaptureFixture[str]) -> None:
    with pytest.raises(SystemExit):
        parse(["ingest", "--help"])
    text = capsys.readouterr().out
    for flag in [
        "--source",
        "--path",
        "--preset",
        "--num-nodes",
        "--num-edges",
        "--feat-dim",
        "--num-classes",
        "--out",
        "--num-partitions",
        "--method",
        "--seed",
        "--split-seed",
        "--force",
    ]:
        assert flag in text
    subparsers = argparse.ArgumentParser().add_subparsers()
    cli.register(subparsers)
    sub = subparsers.choices["ingest"]
    assert all(a.help for a in sub._actions), [a.dest for a in sub._actions if not a.help]


@pytest.mark.slow
def test_small_preset_metis(tmp_path: Path) -> None:
    t0 = time.perf_counter()
    g = generate_preset("small", seed=0)
    m = write_partitioned(g, tmp_path, 2, "metis")
    assert time.perf_counter() - t0 < 90
    assert m.num_nodes == 100_000 and m.num_edges == 2_000_000
    sizes = np.diff(m.node_offsets)
    assert sizes.min() > 0.4 * m.num_nodes
    cut = 0
    for p in range(2):
        r = PartitionReader(tmp_path / part_dir_name(p))
        idx = np.asarray(r.indices)
        cut += int(((idx < r.start) | (idx >= r.stop)).sum())
        assert np.array_equal(r.node_data("label"), g.node_data["label"][input_rows(g, np.asarray(r.orig_ids))])
        r.close()
    assert cut / m.num_edges < 0.4  # random would cut about half


def test_metis_is_reproducible_across_processes(tmp_path: Path) -> None:
    """Two ingests of one graph (separate processes, as two `graphfeed ingest` runs) agree."""
    code = (
        "import hashlib\n"
        "from graphfeed.ingest.sources import load_cora\n"
        "from graphfeed.ingest.partition import assign_partitions\n"
        "print(hashlib.sha256(assign_partitions(load_cora(), 3, 'metis', 5).tobytes()).hexdigest())\n"
    )
    digests = {
        subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True).stdout
        for _ in range(2)
    }
    assert len(digests) == 1


def test_symmetric_csr_is_the_simple_undirected_graph() -> None:
    xadj, adj = symmetric_csr(np.array([0, 1, 1, 2, 3]), np.array([1, 0, 2, 2, 0]), 4)  # 0<->1 twice, a self-loop
    assert xadj.tolist() == [0, 2, 4, 5, 6] and adj.tolist() == [1, 3, 0, 2, 1, 0]
