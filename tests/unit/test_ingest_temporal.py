"""Temporal ingest: CollegeMsg and LastFM from installed wheels, ts/edge features in numpy dirs and
CSVs, and the partition files that keep them (rows in time order, features aligned)."""

from __future__ import annotations

import argparse
from pathlib import Path

import numpy as np
import pytest

from graphfeed.common.errors import InvalidArgument
from graphfeed.common.partition import GraphManifest, PartitionReader, part_dir_name
from graphfeed.ingest import cli
from graphfeed.ingest.graph import GraphData
from graphfeed.ingest.partition import write_partitioned
from graphfeed.ingest.sources import load_edge_csv, load_numpy_dir, load_source
from graphfeed.ingest.temporal_sources import tag_features
from tests.graphs import numpy_source_arrays

COLLEGEMSG_EVENTS, COLLEGEMSG_NODES = 59_835, 1_899
LASTFM_EVENTS, LASTFM_USERS, LASTFM_ARTISTS = 186_479, 1_892, 12_523


def read_back(root: Path, num_partitions: int) -> dict[str, np.ndarray]:
    """All partitions' stored edges, concatenated, with each row's timestamps checked ascending."""
    parts: dict[str, list[np.ndarray]] = {"eid": [], "src": [], "dst": [], "ts": [], "feat": []}
    for p in range(num_partitions):
        r = PartitionReader(root / part_dir_name(p))
        try:
            assert r.edge_ts is not None
            indptr, ts = np.asarray(r.indptr), np.asarray(r.edge_ts)
            row_of = np.repeat(np.arange(r.num_owned), np.diff(indptr))
            same_row = row_of[1:] == row_of[:-1]
            assert (ts[1:][same_row] >= ts[:-1][same_row]).all(), f"partition {p}: a row is not in time order"
            parts["eid"].append(np.asarray(r.edge_ids, np.int64))
            parts["src"].append(np.asarray(r.indices, np.int64))
            parts["dst"].append(row_of + r.start)
            parts["ts"].append(ts)
            if r.edge_feat is not None:
                parts["feat"].append(np.asarray(r.edge_feat))
        finally:
            r.close()
    return {k: np.concatenate(v) for k, v in parts.items() if v}


def check_round_trip(g: GraphData, root: Path, num_partitions: int) -> dict[str, np.ndarray]:
    """Writes ``g``, reads it back, and checks every edge, timestamp and feature row by edge id."""
    write_partitioned(g, root, num_partitions, method="random", seed=1)
    got = read_back(root, num_partitions)
    orig = np.load(root / "orig_ids.npy")
    assert np.array_equal(np.sort(got["eid"]), np.arange(g.num_edges))
    assert g.orig_ids is not None and g.edge_ts is not None
    eid = got["eid"]
    assert np.array_equal(orig[got["src"]], g.orig_ids[g.src[eid]])
    assert np.array_equal(orig[got["dst"]], g.orig_ids[g.dst[eid]])
    assert np.array_equal(got["ts"], g.edge_ts[eid])
    if g.edge_feat is None:
        assert "feat" not in got
    else:
        assert np.array_equal(got["feat"], g.edge_feat[eid])
    return got


def test_collegemsg_events_and_partitions(tmp_path: Path) -> None:
    g = load_source("collegemsg")
    assert (g.num_nodes, g.num_edges) == (COLLEGEMSG_NODES, COLLEGEMSG_EVENTS)
    assert g.edge_ts is not None and (np.diff(g.edge_ts) >= 0).all()  # events in time order
    assert g.orig_ids is not None
    # the file's first line: "1,2,4/15/04 2:56 PM" = 2004-04-15T14:56:00Z
    assert (g.orig_ids[g.src[0]], g.orig_ids[g.dst[0]], g.edge_ts[0]) == (1, 2, 1_082_040_960)
    assert g.edge_ts[-1] - g.edge_ts[0] < 194 * 86_400  # 193 days
    split = g.extra["event_split"]
    assert (split["num_events"], split["val_start"], split["test_start"]) == (59_835, 41_884, 50_860)
    check_round_trip(g, tmp_path / "cm", num_partitions=2)


def test_lastfm_undirected_with_tag_features(tmp_path: Path) -> None:
    g = load_source("lastfm", undirected=True)
    e = LASTFM_EVENTS
    assert g.num_nodes == LASTFM_USERS + LASTFM_ARTISTS and g.num_edges == 2 * e
    assert g.edge_feat is not None and g.edge_feat.shape == (2 * e, 32) and g.edge_feat.dtype == np.float32
    assert g.edge_ts is not None and (np.diff(g.edge_ts[:e]) >= 0).all()
    assert (g.src[:e] < LASTFM_USERS).all() and (g.dst[:e] >= LASTFM_USERS).all()  # user -> artist
    # edge E + i is the reverse of event i, same time and tag
    assert np.array_equal(g.src[e:], g.dst[:e]) and np.array_equal(g.dst[e:], g.src[:e])
    assert np.array_equal(g.edge_ts[e:], g.edge_ts[:e]) and np.array_equal(g.edge_feat[e:], g.edge_feat[:e])
    assert g.orig_ids is not None and g.orig_ids[LASTFM_USERS] > 10_000  # artist ids are offset in the file
    check_round_trip(g, tmp_path / "lastfm", num_partitions=3)


def test_tag_features_are_distinct_unit_codes() -> None:
    codes = tag_features(np.array([5, 7, 5, 0]), dim=16)
    assert codes.shape == (4, 16) and np.array_equal(codes[0], codes[2]) and not np.array_equal(codes[0], codes[1])
    assert np.allclose(np.linalg.norm(codes, axis=1), 1.0, atol=1e-6)
    # a tag's code does not depend on the other tags of the call, so appended events encode alike
    assert np.array_equal(tag_features(np.array([7]), dim=16)[0], codes[1])
    assert np.array_equal(tag_features(np.array([5, 1000]), dim=16)[0], codes[0])


def write_temporal_npy_dir(d: Path) -> dict[str, np.ndarray]:
    arrays = numpy_source_arrays()
    arrays["ts"] = np.array([50, 20, 30, 10, 40])  # not sorted: ingest sorts each row by time
    arrays["edge_feat"] = np.arange(15, dtype=np.float64).reshape(5, 3)
    d.mkdir(parents=True, exist_ok=True)
    for k, v in arrays.items():
        np.save(d / f"{k}.npy", v)
    return arrays


def test_numpy_dir_with_ts_and_edge_features(tmp_path: Path) -> None:
    a = write_temporal_npy_dir(tmp_path / "g")
    g = load_numpy_dir(tmp_path / "g")
    assert g.edge_feat is not None and g.edge_feat.dtype == np.float32
    assert np.array_equal(g.edge_feat, a["edge_feat"].astype(np.float32))
    g.orig_ids = np.arange(g.num_nodes)
    got = check_round_trip(g, tmp_path / "out", num_partitions=2)
    # node 0 has in-edges 2->0 at t=30, then 3->0 at t=10 in the input: stored as 3 (t=10), then 2 (t=30)
    orig = np.load(tmp_path / "out" / "orig_ids.npy")
    into_0 = orig[got["dst"]] == 0
    assert orig[got["src"][into_0]].tolist() == [3, 2] and got["ts"][into_0].tolist() == [10, 30]


def test_numpy_dir_undirected_carries_edge_features(tmp_path: Path) -> None:
    a = write_temporal_npy_dir(tmp_path / "g")
    g = load_numpy_dir(tmp_path / "g", undirected=True)
    assert g.edge_feat is not None and g.edge_ts is not None and g.num_edges == 10
    want = {(u, v, t): tuple(f) for u, v, t, f in zip(a["src"], a["dst"], a["ts"], a["edge_feat"].tolist())}
    want |= {(v, u, t): f for (u, v, t), f in want.items()}
    got = {(u, v, t): tuple(f) for u, v, t, f in zip(g.src, g.dst, g.edge_ts, g.edge_feat.tolist())}
    assert got == want


@pytest.mark.parametrize(
    "value, message",
    [(np.zeros((4, 2)), "one feature row per edge"), (np.zeros(5), "2-D numeric"), (np.full((5, 1), np.nan), "finite")],
)
def test_numpy_dir_bad_edge_features(tmp_path: Path, value: np.ndarray, message: str) -> None:
    write_temporal_npy_dir(tmp_path / "g")
    np.save(tmp_path / "g" / "edge_feat.npy", value)
    with pytest.raises(InvalidArgument, match=message):
        load_numpy_dir(tmp_path / "g")


@pytest.mark.parametrize("header", ["timestamp,src,dst", "src,dst,t", "SRC,DST,Time"])
def test_csv_timestamp_column_by_name(tmp_path: Path, header: str) -> None:
    cols = header.lower().split(",")
    rows = [{"src": 7, "dst": 9, "ts": 300}, {"src": 9, "dst": 7, "ts": 100}]
    lines = [",".join(str(r["ts" if c in ("t", "time", "timestamp") else c]) for c in cols) for r in rows]
    f = tmp_path / "edges.csv"
    f.write_text("\n".join([header, *lines]) + "\n")
    g = load_edge_csv(f)
    assert g.orig_ids is not None and g.edge_ts is not None
    assert list(zip(g.orig_ids[g.src].tolist(), g.orig_ids[g.dst].tolist(), g.edge_ts.tolist())) == [
        (7, 9, 300),
        (9, 7, 100),
    ]


def test_csv_columns_beyond_src_dst_are_named_never_guessed(tmp_path: Path) -> None:
    weighted = tmp_path / "weighted.csv"
    weighted.write_text("src,dst,weight\n1,2,0.5\n2,1,3\n")
    g = load_edge_csv(weighted, undirected=True)  # a weight is an edge feature, kept (and follows its edge)
    assert g.edge_ts is None and g.edge_feat is not None and g.extra["edge_feat_columns"] == ["weight"]
    assert g.orig_ids is not None
    got = {(int(g.orig_ids[s]), int(g.orig_ids[d])): float(w) for s, d, w in zip(g.src, g.dst, g.edge_feat[:, 0])}
    assert got == {(1, 2): 0.5, (2, 1): 3.0}
    plain = tmp_path / "plain.csv"
    plain.write_text("1,2,300\n2,3,100\n")
    with pytest.raises(InvalidArgument, match="3 columns and no header line: name them with --columns"):
        load_edge_csv(plain)  # the third column could be a time or a weight
    timed = load_edge_csv(plain, columns=["src", "dst", "ts"])
    assert timed.edge_ts is not None and timed.edge_ts.tolist() == [300, 100] and timed.edge_feat is None
    weighed = load_edge_csv(plain, columns=["src", "dst", "w"])
    assert (
        weighed.edge_ts is None and weighed.edge_feat is not None and weighed.edge_feat[:, 0].tolist() == [300.0, 100.0]
    )
    assert load_edge_csv(plain, columns=["src", "dst", "-"]).edge_feat is None  # skipped
    wordy = tmp_path / "wordy.csv"
    wordy.write_text("from,to,time,weight\n1,2,5,0.5\n")  # the endpoints in its own words: the first two
    g = load_edge_csv(wordy)
    assert (
        g.edge_ts is not None
        and g.edge_ts.tolist() == [5]
        and g.edge_feat is not None
        and g.edge_feat.tolist() == [[0.5]]
    )
    for columns, message in [
        (["src", "dst"], "names 2 columns, the file has 3"),
        (["src", "src", "ts"], "exactly one src"),
        (["src", "dst", "dst"], "exactly one dst"),
        (["a", "a", "src"], "exactly one dst"),
    ]:
        with pytest.raises(InvalidArgument, match=message):
            load_edge_csv(plain, columns=columns)
    nonnumeric = tmp_path / "labels.csv"
    nonnumeric.write_text("src,dst,kind\n1,2,friend\n")
    with pytest.raises(InvalidArgument, match="line 2: column 'kind' holds 'friend'; edge features must be numbers"):
        load_edge_csv(nonnumeric)


def test_ingest_command_writes_collegemsg_with_its_event_split(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    parser = argparse.ArgumentParser(prog="graphfeed")
    cli.register(parser.add_subparsers(dest="command", required=True))
    out = tmp_path / "cm"
    argv = [
        "ingest",
        "--source",
        "collegemsg",
        "--undirected",
        "--out",
        str(out),
        "--method",
        "random",
        "--no-progress",
    ]
    assert cli.run(parser.parse_args(argv)) == 0
    assert f"{2 * COLLEGEMSG_EVENTS:,} edges" in capsys.readouterr().out
    manifest = GraphManifest.load(out)
    assert manifest.has_edge_timestamps and manifest.extra["event_split"]["num_events"] == COLLEGEMSG_EVENTS
    assert manifest.extra["undirected"] is True
