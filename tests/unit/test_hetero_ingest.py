"""Typed ingest sources (issue 24): imdb, lastfm-hetero, the typed numpy and CSV layouts, the
synthetic mag presets, --add-reverse, and bad typed input refused before anything is written."""

from __future__ import annotations

import argparse
from pathlib import Path

import numpy as np
import pytest

from graphfeed.common.errors import InvalidArgument, NotFound
from graphfeed.ingest import cli
from graphfeed.ingest.graph import GraphData
from graphfeed.ingest.hetero_sources import load_imdb, load_lastfm_hetero
from graphfeed.ingest.sources import load_source
from graphfeed.ingest.synthetic_hetero import HETERO_PRESETS, generate_mag
from graphfeed.ingest.temporal_sources import package_dir


def typed_edges(g: GraphData, etype: tuple[str, str, str]) -> tuple[np.ndarray, np.ndarray]:
    """Type-wise (src, dst) of one edge type of a homogenized graph."""
    r, es, ns = g.etypes.index(etype), g.etype_starts(), g.ntype_starts()
    lo, hi = es[r], es[r + 1]
    return g.src[lo:hi] - ns[g.ntypes.index(etype[0])], g.dst[lo:hi] - ns[g.ntypes.index(etype[2])]


def typed_split(g: GraphData, split: str, ntype: str) -> np.ndarray:
    ns, t = g.ntype_starts(), g.ntypes.index(ntype)
    ids = g.splits[split]
    return ids[(ids >= ns[t]) & (ids < ns[t + 1])] - ns[t]


def parquet_rows(dataset: str, name: str, columns: list[str]) -> dict[str, np.ndarray]:
    import pyarrow.parquet as pq

    f = package_dir("graphdatascience", "") / "resources" / dataset / f"{name}.parquet.gzip"
    table = pq.read_table(f, columns=columns)
    return {c: table.column(c).to_numpy() for c in columns}


# -- imdb, lastfm-hetero ----------------------------------------------------------------------


@pytest.fixture(scope="module")
def imdb() -> GraphData:
    return load_imdb(split_seed=0)


def test_imdb_counts_match_the_parquet_files(imdb: GraphData) -> None:
    rows = {
        n: len(parquet_rows("imdb", f"imdb_{n}", ["nodeId"])["nodeId"])
        for n in ("movies_with_genre", "movies_without_genre", "actors", "directors")
    }
    assert imdb.ntypes == ("movie", "actor", "director")
    assert imdb.node_counts() == (
        rows["movies_with_genre"] + rows["movies_without_genre"],
        rows["actors"],
        rows["directors"],
    )
    acted = len(parquet_rows("imdb", "imdb_acted_in", ["sourceNodeId"])["sourceNodeId"])
    directed = len(parquet_rows("imdb", "imdb_directed_in", ["sourceNodeId"])["sourceNodeId"])
    assert imdb.etypes == (("actor", "acted_in", "movie"), ("director", "directed_in", "movie"))
    assert imdb.edge_counts() == (acted, directed)
    for t in imdb.ntypes:
        assert imdb.node_data[f"{t}/feat"].shape == (imdb.node_counts()[imdb.ntypes.index(t)], 1256)


def test_imdb_labels_and_splits_only_on_movies_with_a_genre(imdb: GraphData) -> None:
    genre = parquet_rows("imdb", "imdb_movies_with_genre", ["nodeId", "genre"])
    assert imdb.num_classes == 3 and set(imdb.node_data) == {"movie/feat", "movie/label", "actor/feat", "director/feat"}
    assert imdb.orig_ids is not None
    movie_orig = imdb.orig_ids[: imdb.node_counts()[0]]
    labelled = np.isin(movie_orig, genre["nodeId"])
    at = np.searchsorted(movie_orig, genre["nodeId"])
    assert np.array_equal(imdb.node_data["movie/label"][at], genre["genre"])  # each labelled movie its genre
    split_ids = np.concatenate([imdb.splits[s] for s in ("train", "val", "test")])
    assert np.array_equal(np.sort(split_ids), np.flatnonzero(labelled))  # every labelled movie, nothing else
    assert len(imdb.splits["train"]) == round(0.6 * len(genre["nodeId"]))


def test_imdb_split_follows_its_seed(imdb: GraphData) -> None:
    a, b = imdb, load_imdb(split_seed=1)
    assert not np.array_equal(a.splits["train"], b.splits["train"]) and np.array_equal(a.src, b.src)


def test_lastfm_hetero_counts() -> None:
    g = load_lastfm_hetero()
    users = parquet_rows("lastfm", "user_nodes", ["nodeId"])["nodeId"]
    artists = parquet_rows("lastfm", "artist_nodes", ["nodeId"])["nodeId"]
    tags = parquet_rows("lastfm", "user_tag_artist_rels", ["sourceNodeId", "targetNodeId", "tagID"])
    listens = parquet_rows("lastfm", "user_listen_artist_rels", ["sourceNodeId"])["sourceNodeId"]
    friends = parquet_rows("lastfm", "user_friend_df_directed", ["sourceNodeId"])["sourceNodeId"]
    assert g.ntypes == ("user", "artist", "tag")
    assert g.node_counts() == (len(users), len(artists), len(np.unique(tags["tagID"])))
    u, a, t = tags["sourceNodeId"], tags["targetNodeId"], tags["tagID"]
    pairs = lambda x, y: len(np.unique(x * 100_000 + y))  # noqa: E731
    assert dict(zip(g.etypes, g.edge_counts())) == {
        ("user", "listens_to", "artist"): len(listens),
        ("user", "is_friend", "user"): 2 * len(friends),  # both directions of each listed pair
        ("user", "tagged", "artist"): pairs(u, a),
        ("artist", "has_tag", "tag"): pairs(a, t),
        ("user", "used_tag", "tag"): pairs(u, t),
    }
    src, dst = typed_edges(g, ("user", "is_friend", "user"))
    assert set(zip(src.tolist(), dst.tolist())) == set(zip(dst.tolist(), src.tolist()))
    assert g.splits == {} and g.node_data == {}


def test_lastfm_hetero_add_reverse_skips_the_symmetric_friendship() -> None:
    g = load_lastfm_hetero(add_reverse=True)
    rev = [e for e in g.etypes if e[1].startswith("rev_")]
    assert sorted(e[1] for e in rev) == ["rev_has_tag", "rev_listens_to", "rev_tagged", "rev_used_tag"]
    src, dst = typed_edges(g, ("user", "listens_to", "artist"))
    rsrc, rdst = typed_edges(g, ("artist", "rev_listens_to", "user"))
    assert np.array_equal(src, rdst) and np.array_equal(dst, rsrc)


# -- synthetic mag ----------------------------------------------------------------------------


def test_mag_small_is_seeded_and_sized_as_configured() -> None:
    spec = HETERO_PRESETS["mag-small"]
    g, again, other = generate_mag("mag-small", seed=3), generate_mag("mag-small", seed=3), generate_mag("mag-small")
    for a, b in ((g.src, again.src), (g.dst, again.dst), (g.node_data["paper/feat"], again.node_data["paper/feat"])):
        assert np.array_equal(a, b)
    assert all(np.array_equal(g.splits[s], again.splits[s]) for s in g.splits)
    assert not np.array_equal(g.src, other.src)
    assert g.ntypes == ("paper", "author", "institution", "field_of_study")
    assert g.node_counts() == (spec.papers, spec.authors, spec.institutions, spec.fields)
    assert g.edge_counts() == (spec.writes, spec.cites, spec.affiliated_with, spec.has_topic)
    assert g.etypes[0] == ("author", "writes", "paper") and min(g.edge_counts()) > 0
    assert g.node_data["paper/feat"].shape == (spec.papers, spec.feat_dim)
    assert g.node_data["paper/feat"].dtype == np.float32
    assert g.node_data["paper/label"].shape == (spec.papers,) and g.num_classes == spec.num_classes
    assert sum(len(v) for v in g.splits.values()) == spec.papers  # every paper, no other type
    assert g.splits["test"].max() < spec.papers
    src, dst = typed_edges(g, ("paper", "cites", "paper"))
    label = g.node_data["paper/label"]
    assert abs((label[src] == label[dst]).mean() - spec.homophily) < 0.02  # learnable from structure
    keys = src * spec.papers + dst
    assert len(np.unique(keys)) == len(keys) and not (src == dst).any()


def test_mag_add_reverse_and_overrides_through_load_source() -> None:
    g = load_source("synthetic", preset="mag-small", feat_dim=4, add_reverse=True)
    assert g.node_data["paper/feat"].shape[1] == 4 and len(g.etypes) == 8
    src, dst = typed_edges(g, ("author", "writes", "paper"))
    rsrc, rdst = typed_edges(g, ("paper", "rev_writes", "author"))
    assert np.array_equal(src, rdst) and np.array_equal(dst, rsrc)
    with pytest.raises(InvalidArgument, match="fixes its node and edge counts"):
        load_source("synthetic", preset="mag-small", num_nodes=10)
    with pytest.raises(InvalidArgument, match="add_reverse is for typed graphs"):
        load_source("synthetic", preset="tiny", add_reverse=True)


# -- typed numpy and CSV layouts --------------------------------------------------------------

FEAT = np.arange(8, dtype=np.float32).reshape(4, 2)  # 4 papers
LABEL = np.array([0, 1, 1, 0])
WRITES = (np.array([0, 1, 2, 2]), np.array([0, 0, 3, 1]))  # 3 authors -> papers
CITES = (np.array([1, 2, 3]), np.array([0, 0, 2]))
SPLITS = {"train": np.array([0, 3]), "val": np.array([1]), "test": np.array([2])}


def write_numpy_typed(d: Path) -> Path:
    for sub in ("nodes/paper", "nodes/author", "edges/author__writes__paper", "edges/paper__cites__paper"):
        (d / sub).mkdir(parents=True)
    np.save(d / "nodes/paper/feat.npy", FEAT)
    np.save(d / "nodes/paper/label.npy", LABEL)
    np.save(d / "nodes/paper/year.npy", np.array([2001, 2002, 2003, 2004], dtype=np.int32))
    for s, ids in SPLITS.items():
        np.save(d / f"nodes/paper/{s}.npy", ids)
    (d / "nodes/author/num_nodes.txt").write_text("3\n")  # featureless
    for name, (src, dst) in (("author__writes__paper", WRITES), ("paper__cites__paper", CITES)):
        np.save(d / f"edges/{name}/src.npy", src)
        np.save(d / f"edges/{name}/dst.npy", dst.astype(np.int32))
    return d


def write_csv_typed(d: Path) -> Path:
    (d / "nodes").mkdir(parents=True)
    (d / "edges").mkdir()
    split_of = {int(i): s for s, ids in SPLITS.items() for i in ids}
    lines = ["name,label,split,feat_0,feat_1"]
    lines += [f"p{i},{LABEL[i]},{split_of.get(i, '')},{FEAT[i, 0]},{FEAT[i, 1]}" for i in range(4)]
    (d / "nodes/paper.csv").write_text("\n".join(lines) + "\n")
    (d / "nodes/author.csv").write_text("name\nada\nbob\ncy\n")
    authors = ["ada", "bob", "cy"]
    writes = [f"{authors[s]},p{t}" for s, t in zip(*WRITES)]
    (d / "edges/author__writes__paper.csv").write_text("author,paper\n" + "\n".join(writes) + "\n")
    (d / "edges/paper__cites__paper.csv").write_text("src\tdst\n" + "".join(f"p{s}\tp{t}\n" for s, t in zip(*CITES)))
    return d


def check_round_trip(g: GraphData) -> None:
    assert g.ntypes == ("author", "paper") and g.node_counts() == (3, 4)  # types in name order
    assert g.etypes == (("author", "writes", "paper"), ("paper", "cites", "paper"))
    for etype, (src, dst) in ((g.etypes[0], WRITES), (g.etypes[1], CITES)):
        got = typed_edges(g, etype)
        assert np.array_equal(got[0], src) and np.array_equal(got[1], dst)
    assert np.array_equal(g.node_data["paper/feat"], FEAT) and g.node_data["paper/feat"].dtype == np.float32
    assert np.array_equal(g.node_data["paper/label"], LABEL) and g.num_classes == 2
    assert not any(k.startswith("author/") for k in g.node_data)
    for s, ids in SPLITS.items():
        assert np.array_equal(typed_split(g, s, "paper"), np.sort(ids))


def test_numpy_typed_layout_round_trips(tmp_path: Path) -> None:
    g = load_source("numpy", path=write_numpy_typed(tmp_path / "g"))
    check_round_trip(g)
    assert np.array_equal(g.node_data["paper/year"], [2001, 2002, 2003, 2004])  # any other .npy is a table


def test_csv_typed_layout_round_trips_and_keeps_names(tmp_path: Path) -> None:
    g = load_source("csv", path=write_csv_typed(tmp_path / "g"))
    check_round_trip(g)
    names = g.extra["node_names"]
    assert names[g.orig_ids].tolist() == ["ada", "bob", "cy", "p0", "p1", "p2", "p3"]


@pytest.mark.parametrize("layout", ["numpy", "csv"])
def test_add_reverse_adds_rev_types_with_swapped_endpoints(tmp_path: Path, layout: str) -> None:
    d = (write_numpy_typed if layout == "numpy" else write_csv_typed)(tmp_path / "g")
    g = load_source(layout, path=d, add_reverse=True)
    assert g.etypes[2:] == (("paper", "rev_writes", "author"), ("paper", "rev_cites", "paper"))
    for etype, (src, dst) in ((g.etypes[2], WRITES), (g.etypes[3], CITES)):
        got = typed_edges(g, etype)
        assert np.array_equal(got[0], dst) and np.array_equal(got[1], src)


def _numpy_break(d: Path, what: str) -> None:
    if what == "unknown type":
        (d / "edges/author__writes__paper").rename(d / "edges/author__writes__venue")
    elif what == "bad etype name":
        (d / "edges/author__writes__paper").rename(d / "edges/author_writes_paper")
    elif what == "id out of range":
        np.save(d / "edges/author__writes__paper/src.npy", np.array([0, 1, 2, 3]))
    elif what == "feat rows":
        (d / "nodes/paper/num_nodes.txt").write_text("5")
    elif what == "label length":
        np.save(d / "nodes/paper/label.npy", np.array([0, 1, 1]))
    elif what == "no count":
        (d / "nodes/author/num_nodes.txt").unlink()
    elif what == "edge lengths":
        np.save(d / "edges/paper__cites__paper/dst.npy", np.array([0, 0]))


NUMPY_BAD = {
    "unknown type": ("edges/author__writes__venue", r"unknown node type 'venue'"),
    "bad etype name": ("edges/author_writes_paper", r"named <src_type>__<relation>__<dst_type>"),
    "id out of range": ("author__writes__paper/src.npy", r"author ids; author has 3 nodes.*entry 3 is 3"),
    "feat rows": ("nodes/paper/feat.npy", r"4 rows, but num_nodes.txt says 5 paper nodes"),
    "label length": ("nodes/paper/label.npy", r"3 rows, but feat.npy says 4 paper nodes"),
    "no count": ("nodes/author", r"give its node count in num_nodes.txt"),
    "edge lengths": ("paper__cites__paper", r"src.npy has 3 entries, dst.npy 2"),
}


@pytest.mark.parametrize("what", list(NUMPY_BAD))
def test_bad_numpy_typed_input_names_file_and_problem(tmp_path: Path, what: str) -> None:
    d = write_numpy_typed(tmp_path / "g")
    _numpy_break(d, what)
    where, message = NUMPY_BAD[what]
    with pytest.raises(InvalidArgument, match=message) as e:
        load_source("numpy", path=d)
    assert where in str(e.value)


CSV_BAD = {
    "unknown name": (
        "edges/paper__cites__paper.csv",
        "src,dst\np1,p0\np9,p0\n",
        r"paper__cites__paper.csv: line 3: unknown paper node 'p9'",
    ),
    "unknown type": ("edges/paper__cites__venue.csv", "src,dst\np1,x\n", r"unknown node type 'venue'"),
    "duplicate name": ("nodes/author.csv", "name\nada\nbob\nada\n", r"author.csv: line 4: node name 'ada' is already"),
    "empty label": (
        "nodes/paper.csv",
        "name,label\np0,0\np1,\np2,1\np3,0\n",
        r"paper.csv: line 3: no 'label' value",
    ),
    "negative label": ("nodes/paper.csv", "name,label\np0,0\np1,-1\np2,1\np3,0\n", r"paper.csv.*negative"),
    "gap in features": ("nodes/paper.csv", "name,feat_0,feat_2\np0,1,2\np1,1,2\np2,1,2\np3,1,2\n", r"0..k-1"),
    "three columns": ("edges/author__writes__paper.csv", "a,b,w\nada,p0,1\n", r"expected 2 columns"),
}


@pytest.mark.parametrize("what", list(CSV_BAD))
def test_bad_csv_typed_input_names_file_line_and_problem(tmp_path: Path, what: str) -> None:
    d = write_csv_typed(tmp_path / "g")
    file, text, message = CSV_BAD[what]
    (d / file).write_text(text)
    with pytest.raises(InvalidArgument, match=message):
        load_source("csv", path=d)


def test_csv_blank_lines_keep_line_numbers_and_empty_splits_are_none(tmp_path: Path) -> None:
    d = write_csv_typed(tmp_path / "g")
    (d / "nodes/paper.csv").write_text("name,split\np0,train\n\np1,\np2,val\np3,\n")
    (d / "edges/paper__cites__paper.csv").write_text("src,dst\np1,p0\n\np2,nope\n")
    with pytest.raises(InvalidArgument, match=r"line 4: unknown paper node 'nope'"):
        load_source("csv", path=d)
    (d / "edges/paper__cites__paper.csv").write_text("src,dst\np1,p0\n")
    g = load_source("csv", path=d)
    assert typed_split(g, "train", "paper").tolist() == [0] and typed_split(g, "val", "paper").tolist() == [2]


def test_a_missing_edge_file_is_not_found(tmp_path: Path) -> None:
    d = write_numpy_typed(tmp_path / "g")
    (d / "edges/paper__cites__paper/dst.npy").unlink()
    with pytest.raises(NotFound, match=r"dst\.npy is missing"):
        load_source("numpy", path=d)


# -- the CLI ----------------------------------------------------------------------------------


def parse(argv: list[str]) -> argparse.Namespace:
    parser = argparse.ArgumentParser(prog="graphfeed")
    cli.register(parser.add_subparsers(dest="command", required=True))
    return parser.parse_args(["ingest", *argv, "--out", "/nonexistent/out", "--no-progress"])


def test_cli_passes_add_reverse_to_typed_sources(tmp_path: Path) -> None:
    d = write_numpy_typed(tmp_path / "g")
    assert cli.source_kwargs(parse(["--source", "imdb", "--add-reverse", "--split-seed", "4"])) == {
        "split_seed": 4,
        "add_reverse": True,
    }
    assert cli.source_kwargs(parse(["--source", "lastfm-hetero"])) == {"add_reverse": False}
    assert cli.source_kwargs(parse(["--source", "numpy", "--path", str(d), "--add-reverse"])) == {
        "path": d,
        "add_reverse": True,
    }
    kwargs = cli.source_kwargs(parse(["--source", "synthetic", "--preset", "mag", "--add-reverse"]))
    assert kwargs["preset"] == "mag" and kwargs["add_reverse"] is True


@pytest.mark.parametrize(
    "argv, message",
    [
        (["--source", "cora", "--add-reverse"], "--source cora gives a homogeneous graph"),
        (["--source", "synthetic", "--preset", "tiny", "--add-reverse"], "homogeneous graph"),
        (["--source", "imdb", "--undirected"], "use --add-reverse"),
    ],
)
def test_cli_refuses_add_reverse_for_homogeneous_sources_and_undirected_for_typed(
    argv: list[str], message: str
) -> None:
    with pytest.raises(InvalidArgument, match=message):
        cli.source_kwargs(parse(argv))


def test_cli_refuses_edge_list_flags_for_a_typed_csv_dir(tmp_path: Path) -> None:
    d = write_csv_typed(tmp_path / "g")
    kwargs = cli.source_kwargs(parse(["--source", "csv", "--path", str(d), "--feat-dim", "8"]))
    with pytest.raises(InvalidArgument, match="--feat-dim only apply to an edge-list file"):
        load_source("csv", **kwargs)


def test_cli_bad_typed_input_exits_2_and_creates_nothing(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    d = write_numpy_typed(tmp_path / "g")
    _numpy_break(d, "id out of range")
    out = tmp_path / "new" / "out"
    args = parse(["--source", "numpy", "--path", str(d), "--add-reverse"])
    args.out = out
    assert cli.run(args) == 2
    err = capsys.readouterr().err
    assert err.startswith("graphfeed ingest: error: ") and "author__writes__paper/src.npy" in err
    assert not (tmp_path / "new").exists()  # not --out, not its parent, no staging directory
