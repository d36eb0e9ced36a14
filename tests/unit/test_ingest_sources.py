"""Ingest sources: Cora from the graphdatascience wheel, .npy directories, edge-list CSVs."""

from __future__ import annotations

from pathlib import Path

import numpy as np
import pytest

from graphfeed.common.errors import InvalidArgument, NotFound
from graphfeed.ingest.graph import GraphData
from graphfeed.ingest.sources import load_cora, load_edge_csv, load_numpy_dir, load_source, symmetrize
from tests.graphs import numpy_source_arrays


def edge_set(src: np.ndarray, dst: np.ndarray) -> set[tuple[int, int]]:
    return set(zip(src.tolist(), dst.tolist()))


@pytest.fixture(scope="module")
def cora() -> GraphData:
    return load_cora(split_seed=0)


def test_cora_shapes_and_classes(cora: GraphData) -> None:
    assert cora.num_nodes == 2708
    assert cora.node_data["feat"].shape == (2708, 1433) and cora.node_data["feat"].dtype == np.float32
    assert cora.num_classes == 7
    assert set(np.unique(cora.node_data["label"]).tolist()) == set(range(7))
    assert cora.orig_ids is not None and len(np.unique(cora.orig_ids)) == 2708  # paper ids, one per node
    # Cora's features are binary bag-of-words, every paper has some words
    assert set(np.unique(cora.node_data["feat"]).tolist()) == {0.0, 1.0}
    assert (cora.node_data["feat"].sum(1) > 0).all()


def test_cora_edges_symmetric_simple(cora: GraphData) -> None:
    edges = edge_set(cora.src, cora.dst)
    assert len(edges) == cora.num_edges == 10556  # no duplicates; the usual 5278 undirected citations
    assert all((v, u) in edges for u, v in edges)
    assert not (cora.src == cora.dst).any()


def test_cora_split(cora: GraphData) -> None:
    s = cora.splits
    assert (len(s["train"]), len(s["val"]), len(s["test"])) == (1625, 542, 541)
    assert len(np.unique(np.concatenate(list(s.values())))) == 2708  # disjoint and covering
    again = load_cora(split_seed=0)
    other = load_cora(split_seed=1)
    assert all(np.array_equal(s[k], again.splits[k]) for k in s)
    assert not np.array_equal(s["train"], other.splits["train"])
    assert np.array_equal(cora.src, other.src)  # the split seed changes only the split


def write_npy_dir(d: Path, with_ts: bool = True) -> dict[str, np.ndarray]:
    arrays = numpy_source_arrays()
    arrays["dst"] = arrays["dst"].astype(np.int32)  # the source takes any integer dtype
    if with_ts:
        arrays["ts"] = np.array([10, 20, 30, 40, 50])
    d.mkdir(parents=True, exist_ok=True)
    for k, v in arrays.items():
        np.save(d / f"{k}.npy", v)
    return arrays


def test_numpy_dir_round_trip(tmp_path: Path) -> None:
    a = write_npy_dir(tmp_path / "g")
    g = load_source("numpy", path=tmp_path / "g")
    assert g.num_nodes == 5 and g.num_classes == 3
    assert np.array_equal(g.src, a["src"]) and np.array_equal(g.dst, a["dst"]) and g.src.dtype == np.int64
    assert g.edge_ts is not None and np.array_equal(g.edge_ts, a["ts"])
    assert np.array_equal(g.node_data["feat"], a["feat"]) and np.array_equal(g.node_data["label"], a["label"])
    assert {k: v.tolist() for k, v in g.splits.items()} == {"train": [0, 1, 2], "val": [3], "test": [4]}


def test_numpy_dir_undirected_keeps_timestamps(tmp_path: Path) -> None:
    a = write_npy_dir(tmp_path / "g")
    g = load_numpy_dir(tmp_path / "g", undirected=True)
    assert g.edge_ts is not None
    got = set(zip(g.src.tolist(), g.dst.tolist(), g.edge_ts.tolist()))
    want = {(u, v, t) for u, v, t in zip(a["src"].tolist(), a["dst"].tolist(), a["ts"].tolist())}
    assert got == want | {(v, u, t) for u, v, t in want}
    assert g.num_edges == 10


def test_numpy_dir_without_ts(tmp_path: Path) -> None:
    write_npy_dir(tmp_path / "g", with_ts=False)
    assert load_numpy_dir(tmp_path / "g").edge_ts is None


@pytest.mark.parametrize(
    "name, value, message",
    [
        ("dst", np.array([1, 2, 0]), "dst.npy"),  # length differs from src
        ("label", np.array([0, 1]), "label.npy"),
        ("feat", np.arange(5, dtype=np.float32), "feat.npy"),  # not 2-D
        ("src", np.array([0.0, 1, 2, 3, 3]), "src.npy"),  # not integers
        ("train_idx", np.array([0, 9]), "train_idx.npy"),  # out of range
        ("ts", np.array([1, 2]), "ts.npy"),
    ],
)
def test_numpy_dir_bad_shapes(tmp_path: Path, name: str, value: np.ndarray, message: str) -> None:
    write_npy_dir(tmp_path / "g")
    np.save(tmp_path / "g" / f"{name}.npy", value)
    with pytest.raises(InvalidArgument, match=message):
        load_numpy_dir(tmp_path / "g")


def test_numpy_dir_missing_file(tmp_path: Path) -> None:
    write_npy_dir(tmp_path / "g")
    (tmp_path / "g" / "val_idx.npy").unlink()
    with pytest.raises(NotFound, match=r"val_idx\.npy"):
        load_numpy_dir(tmp_path / "g")
    with pytest.raises(NotFound, match="not a directory"):
        load_numpy_dir(tmp_path / "nowhere")


def test_csv_with_header_remaps_ids(tmp_path: Path) -> None:
    f = tmp_path / "edges.csv"
    f.write_text("ts,src,dst\n5,100,7\n6,7,42\n7,42,100\n8,100,42\n")
    g = load_edge_csv(f, num_features=3, seed=1)
    orig = g.orig_ids
    assert orig is not None and g.edge_ts is not None
    assert g.num_nodes == 3 and orig.tolist() == [7, 42, 100]
    assert list(zip(orig[g.src].tolist(), orig[g.dst].tolist(), g.edge_ts.tolist())) == [
        (100, 7, 5),
        (7, 42, 6),
        (42, 100, 7),
        (100, 42, 8),
    ]
    assert g.node_data["feat"].shape == (3, 3) and g.node_data["feat"].dtype == np.float32
    assert "label" not in g.node_data and g.num_classes == 0
    assert np.array_equal(g.node_data["feat"], load_edge_csv(f, num_features=3, seed=1).node_data["feat"])
    assert sum(len(s) for s in g.splits.values()) == 3


def test_csv_headerless_tabs_undirected(tmp_path: Path) -> None:
    f = tmp_path / "edges.tsv"
    f.write_text("-5\t3\n3\t-5\n3\t9\n9\t9\n")
    g = load_edge_csv(f, undirected=True)
    orig = g.orig_ids
    assert orig is not None
    got = edge_set(orig[g.src], orig[g.dst])
    assert got == {(-5, 3), (3, -5), (3, 9), (9, 3), (9, 9)}
    assert g.num_edges == 5 and g.edge_ts is None and g.node_data == {}


def test_csv_errors(tmp_path: Path) -> None:
    with pytest.raises(NotFound, match=r"missing\.csv"):
        load_edge_csv(tmp_path / "missing.csv")
    bad = tmp_path / "bad.csv"
    bad.write_text("src,dst\n1,2\n3,x\n")
    with pytest.raises(InvalidArgument, match=r"bad\.csv"):
        load_edge_csv(bad)
    wide = tmp_path / "wide.csv"
    wide.write_text("1,2,3,4\n")
    with pytest.raises(InvalidArgument, match="4 columns and no header line"):
        load_edge_csv(wide)


def test_symmetrize_drops_duplicates_and_self_loops() -> None:
    src, dst, _ = symmetrize(np.array([0, 1, 0, 2]), np.array([1, 0, 1, 2]), drop_self_loops=True)
    assert list(zip(src.tolist(), dst.tolist())) == [(0, 1), (1, 0)]


def test_unknown_source() -> None:
    with pytest.raises(InvalidArgument, match="unknown source"):
        load_source("parquet")


def test_real_world_edge_lists(tmp_path: Path) -> None:
    """What edge lists in the wild look like: SNAP comment lines, a UTF-8 BOM, quoted ids,
    semicolons or spaces, node names; each read exactly, none losing its first edge."""
    cases = {
        "snap.txt": "# Directed graph: web-Example\n# Nodes: 3 Edges: 3\n# FromNodeId\tToNodeId\n0\t1\n1\t2\n2\t0\n",
        "bom.csv": "\ufeff0,1\n1,2\n2,0\n",
        "quoted.csv": '"0","1"\n"1","2"\n"2","0"\n',
        "semicolon.csv": "0;1\n1;2\n2;0\n",
        "spaces.txt": "0 1\n1 2\n2 0\n",
        "header.csv": "from,to\n0,1\n1,2\n2,0\n",
    }
    for name, text in cases.items():
        (tmp_path / name).write_text(text, encoding="utf-8")
        g = load_edge_csv(tmp_path / name)
        orig = g.orig_ids
        assert orig is not None
        assert edge_set(orig[g.src], orig[g.dst]) == {(0, 1), (1, 2), (2, 0)}, name
    names = tmp_path / "names.csv"
    names.write_text("source,target\nalice,bob\nbob,carol\ncarol,alice\n")
    g = load_edge_csv(names)
    node_names = g.extra["node_names"]
    assert list(node_names) == ["alice", "bob", "carol"] and g.orig_ids is not None
    named = edge_set(node_names[g.orig_ids[g.src]], node_names[g.orig_ids[g.dst]])
    assert named == {("alice", "bob"), ("bob", "carol"), ("carol", "alice")}
    headerless_names = tmp_path / "plain-names.csv"
    headerless_names.write_text("alice,bob\nbob,carol\n")
    assert load_edge_csv(headerless_names).num_edges == 2  # the first line is an edge, not a header
    with pytest.raises(InvalidArgument, match="is a directory"):
        load_edge_csv(tmp_path)


def test_node_names_map_back_from_graphfeed_ids(tmp_path: Path) -> None:
    from graphfeed.ingest.partition import write_partitioned

    f = tmp_path / "names.csv"
    f.write_text("src,dst\nalice,bob\nbob,carol\ncarol,dave\n")
    out = tmp_path / "graph"
    write_partitioned(load_edge_csv(f), out, 2, method="random", seed=0)
    names, orig = np.load(out / "node_names.npy"), np.load(out / "orig_ids.npy")
    assert sorted(names[orig]) == ["alice", "bob", "carol", "dave"]  # every graphfeed id has its name


def test_a_csv_graph_with_labels_and_features_can_be_trained_on(tmp_path: Path) -> None:
    edges, labels, feats = tmp_path / "edges.csv", tmp_path / "labels.csv", tmp_path / "feats.csv"
    edges.write_text("src,dst\nalice,bob\nbob,carol\ncarol,alice\ndave,alice\n")
    labels.write_text("node,label\ncarol,1\nalice,0\nbob,1\ndave,0\n")
    feats.write_text("dave,4,40\nbob,2,20\nalice,1,10\ncarol,3,30\n")
    g = load_edge_csv(edges, labels=labels, features=feats)
    names = list(g.extra["node_names"])
    assert names == ["alice", "bob", "carol", "dave"] and g.num_classes == 2
    assert g.node_data["label"].tolist() == [0, 1, 1, 0]  # in node order, whatever the file's order
    assert g.node_data["feat"].tolist() == [[1, 10], [2, 20], [3, 30], [4, 40]]
    assert g.node_data["feat"].dtype == np.float32
    (tmp_path / "short.csv").write_text("alice,0\nbob,1\n")
    with pytest.raises(InvalidArgument, match="2 lines for 4 nodes"):
        load_edge_csv(edges, labels=tmp_path / "short.csv")
    (tmp_path / "stranger.csv").write_text("alice,0\nbob,1\ncarol,1\neve,0\n")
    with pytest.raises(InvalidArgument, match="4 lines for 5 nodes: node 'dave' has none"):  # eve: isolated
        load_edge_csv(edges, labels=tmp_path / "stranger.csv")
    (tmp_path / "nan.csv").write_text("alice,1\nbob,nan\ncarol,1\ndave,1\n")
    with pytest.raises(InvalidArgument, match="NaN"):
        load_edge_csv(edges, features=tmp_path / "nan.csv")
    (tmp_path / "neg.csv").write_text("alice,0\nbob,-1\ncarol,1\ndave,0\n")
    with pytest.raises(InvalidArgument):
        load_edge_csv(edges, labels=tmp_path / "neg.csv")
    ints = tmp_path / "ints.csv"
    ints.write_text("10,11\n11,12\n")
    (tmp_path / "int-labels.csv").write_text("12,2\n10,0\n11,1\n")
    assert load_edge_csv(ints, labels=tmp_path / "int-labels.csv").node_data["label"].tolist() == [0, 1, 2]
