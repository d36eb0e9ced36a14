"""Edge splits from the user's files (issue 26, item 1): the same split as fractions when given
the same edges, nodes by the input's own names and ids, held-out edges the graph lacks, and
every bad file refused by file and line, before anything is written."""

from __future__ import annotations

from collections.abc import Sequence
from pathlib import Path

import numpy as np
import pytest

from graphfeed import cli
from graphfeed.common.errors import InvalidArgument, NotFound
from graphfeed.common.partition import GraphManifest, PartitionReader, part_dir_name
from graphfeed.ingest.csv_source import load_edge_csv
from graphfeed.ingest.edge_split import split_edges, split_edges_given
from graphfeed.ingest.edge_split_files import parse_split_files, read_given_edges
from graphfeed.ingest.graph import GraphData, hetero_graph, symmetrize


def _ring(n: int = 40) -> GraphData:
    a = np.arange(n, dtype=np.int64)
    s, d, _ = symmetrize(np.concatenate([a, a[::3]]), np.concatenate([(a + 1) % n, (a[::3] + 7) % n]))
    return GraphData("ring", n, s, d, {"feat": np.arange(2 * n, dtype=np.float32).reshape(n, 2)}, {})


def _write(path: Path, pairs: Sequence[tuple[object, object]], header: str = "") -> Path:
    path.write_text(header + "".join(f"{u},{v}\n" for u, v in pairs))
    return path


def test_files_holding_a_fraction_split_reproduce_it(tmp_path: Path) -> None:
    g = _ring()
    ref = split_edges(g, "_E", (0.6, 0.2, 0.2), seed=5)
    files = {
        name: _write(tmp_path / f"{name}.csv", [tuple(r) for r in ref.edge_splits[name][:, :2].tolist()], "src,dst\n")
        for name in ("train", "val", "test")
    }
    out = split_edges_given(g, "_E", read_given_edges(g, "_E", files))
    np.testing.assert_array_equal(out.src, ref.src)
    np.testing.assert_array_equal(out.dst, ref.dst)
    for name in ("train", "val", "test"):
        np.testing.assert_array_equal(out.edge_splits[name], ref.edge_splits[name])
    # without train=, the train split is every other candidate edge (the same set, in edge order)
    rest = split_edges_given(g, "_E", read_given_edges(g, "_E", {k: files[k] for k in ("val", "test")}))
    assert {tuple(r) for r in rest.edge_splits["train"].tolist()} == {
        tuple(r) for r in ref.edge_splits["train"].tolist()
    }
    assert rest.extra["edge_split"]["files"] == {"val": str(files["val"]), "test": str(files["test"])}


def test_names_and_held_out_edges_the_graph_does_not_have(tmp_path: Path) -> None:
    edges = _write(
        tmp_path / "edges.csv", [("ann", "bob"), ("bob", "cy"), ("cy", "dee"), ("dee", "ann"), ("ann", "cy")]
    )
    g = load_edge_csv(edges, undirected=True)
    names = list(g.extra["node_names"][g.orig_ids])  # gid -> name
    test = _write(tmp_path / "test.csv", [("cy", "bob"), ("bob", "dee")])  # one edge (reversed), one the graph lacks
    out = split_edges_given(g, "_E", read_given_edges(g, "_E", {"test": test}))
    got = [(names[u], names[v]) for u, v in out.edge_splits["test"][:, :2].tolist()]
    assert got == [("cy", "bob"), ("bob", "dee")]
    kept = {(names[u], names[v]) for u, v in zip(out.src.tolist(), out.dst.tolist())}
    assert ("bob", "cy") not in kept and ("cy", "bob") not in kept  # held out in both directions
    assert len(out.edge_splits["val"]) == 0 and len(out.edge_splits["train"]) == 4
    assert out.extra["edge_split"]["held_out_edges_removed"] == 2


def test_typed_relation_reads_each_column_as_its_node_type(tmp_path: Path) -> None:
    g = hetero_graph(
        "uv",
        {"user": 3, "item": 4},
        {("user", "buys", "item"): (np.array([0, 1, 2, 2]), np.array([3, 0, 1, 2]))},
        orig_ids={"user": np.array([10, 11, 12]), "item": np.array([100, 101, 102, 103])},
        add_reverse=True,
    )
    test = _write(tmp_path / "test.csv", [(12, 101)])
    out = split_edges_given(g, "buys", read_given_edges(g, "buys", {"test": test}))
    start = out.ntype_starts()
    assert out.edge_splits["test"][:, :2].tolist() == [[2, start[1] + 1]]  # user 12 -> item 101
    assert len(out.edge_splits["train"]) == 3 and (out.edge_splits["train"][:, 4] >= 0).all()  # twins found
    with pytest.raises(InvalidArgument, match=r"test2.csv: line 1: destination of user:buys:item '12' is not a 'item'"):
        read_given_edges(g, "buys", {"test": _write(tmp_path / "test2.csv", [(12, 12)])})


@pytest.mark.parametrize(
    ("lines", "match"),
    [
        ("1,2,3\n", "line 1: 3 fields"),
        ("1,2\n1,77\n", "line 2: destination of _N:_E:_N '77' is not a '_N' node"),
        ("1,x\n", r"line 1: destination of _N:_E:_N 'x' is not an integer"),
        ("1,2\n# note\n2,1\n", r"line 3: edge \(2, 1\) is also on line 1"),  # one undirected pair twice
    ],
)
def test_bad_lines_are_refused_by_file_and_line(tmp_path: Path, lines: str, match: str) -> None:
    g = _ring()
    f = tmp_path / "val.csv"
    f.write_text(lines)
    with pytest.raises(InvalidArgument, match=match):
        split_edges_given(g, "_E", read_given_edges(g, "_E", {"val": f}))


def test_train_edges_must_be_in_the_graph_and_splits_disjoint(tmp_path: Path) -> None:
    g = _ring()
    with pytest.raises(InvalidArgument, match=r"train.csv: line 1: edge \(0, 20\) is not an edge of _N:_E:_N"):
        split_edges_given(g, "_E", read_given_edges(g, "_E", {"train": _write(tmp_path / "train.csv", [(0, 20)])}))
    files = {"val": _write(tmp_path / "v.csv", [(0, 1)]), "test": _write(tmp_path / "t.csv", [(5, 6), (1, 0)])}
    with pytest.raises(InvalidArgument, match=r"t.csv: line 2: edge \(1, 0\) is also on line 1 of .*v.csv"):
        split_edges_given(g, "_E", read_given_edges(g, "_E", files))


@pytest.mark.parametrize(
    ("text", "match"),
    [("val", "SPLIT=PATH"), ("dev=a.csv", "not one of train, val, test"), ("val=a,val=b", "twice"), (",", "no file")],
)
def test_bad_split_file_option(text: str, match: str) -> None:
    with pytest.raises(InvalidArgument, match=match):
        parse_split_files(text)


def test_ingest_writes_the_given_split(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    edges = _write(
        tmp_path / "edges.csv", [(i, (i + 1) % 30) for i in range(30)] + [(i, (i + 5) % 30) for i in range(0, 30, 2)]
    )
    test = _write(tmp_path / "test.csv", [(3, 4), (7, 12)])
    val = _write(tmp_path / "val.csv", [(0, 15)], "source,target\n")  # not an edge of the graph
    out = tmp_path / "out"
    common = ["ingest", "--source", "csv", "--path", str(edges), "--undirected", "--num-partitions", "2"]
    split = ["--edge-split", "_E", "--edge-split-files", f"val={val},test={test}"]
    assert cli.main([*common, *split, "--out", str(out)]) == 0
    m = GraphManifest.load(out)
    orig = np.load(out / "orig_ids.npy")
    got: dict[str, set[tuple[int, int]]] = {}
    for p in range(m.num_partitions):
        r = PartitionReader(out / part_dir_name(p))
        for name in ("train", "val", "test"):
            rows = r.edge_split(name)
            assert rows is not None
            got.setdefault(name, set()).update((int(orig[u]), int(orig[v])) for u, v in rows[:, :2].tolist())
        r.close()
    assert got["test"] == {(3, 4), (7, 12)} and got["val"] == {(0, 15)}
    assert len(got["train"]) == 45 - 1  # 45 undirected pairs; (3, 4) held out, (7, 12) is not an edge
    # refused before reading the input: the options conflict, or a file is missing
    assert cli.main([*common, *split, "--edge-fractions", "0.8,0.1,0.1", "--out", str(tmp_path / "o2")]) == 2
    assert cli.main([*common, "--edge-split-files", f"test={test}", "--out", str(tmp_path / "o3")]) == 2
    assert (
        cli.main([*common, "--edge-split", "_E", "--edge-split-files", "test=nope.csv", "--out", str(tmp_path / "o4")])
        == 2
    )
    err = capsys.readouterr().err
    assert "not both" in err and "need --edge-split RELATION" in err and "nope.csv does not exist" in err
    assert not (tmp_path / "o2").exists() and not (tmp_path / "o4").exists()
    with pytest.raises(NotFound):
        read_given_edges(GraphData("x", 2, np.array([0]), np.array([1]), {}, {}), "_E", {"val": tmp_path / "none"})
