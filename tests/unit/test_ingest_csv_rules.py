"""The rules of an edge-list CSV (README "Input formats"): what each line means is decided, never
guessed into wrong data; every refusal is one line naming the file, the line and the user's node."""

from __future__ import annotations

import argparse
import os
import re
from pathlib import Path

import numpy as np
import pytest

import graphfeed.ingest.csv_lines as csv_lines
from graphfeed.common.errors import InvalidArgument
from graphfeed.ingest import cli
from graphfeed.ingest.csv_source import load_edge_csv
from graphfeed.ingest.graph import GraphData


def ingest(csv: Path, out: Path, *flags: str) -> int:
    parser = argparse.ArgumentParser(prog="graphfeed")
    cli.register(parser.add_subparsers(dest="command", required=True))
    argv = ["ingest", "--source", "csv", "--path", str(csv), "--out", str(out), "--method", "random", "--no-progress"]
    return cli.run(parser.parse_args([*argv, *flags]))


def named_edges(g: GraphData) -> set[tuple[str, str]]:
    names, orig = g.extra["node_names"], g.orig_ids
    assert orig is not None
    return set(zip(names[orig[g.src]].tolist(), names[orig[g.dst]].tolist()))


def write(tmp_path: Path, name: str, text: str) -> Path:
    f = tmp_path / name
    f.write_text(text, encoding="utf-8")
    return f


def test_fields_are_stripped_and_unquoted_comments_skipped_anywhere(tmp_path: Path) -> None:
    f = write(tmp_path, "e.csv", "a, b\n'b' , \"c\"\n# a note in the middle\n% another\n\nc,a\n")
    g = load_edge_csv(f)
    assert list(g.extra["node_names"]) == ["a", "b", "c"]  # no ghost ' b', no quotes kept
    assert named_edges(g) == {("a", "b"), ("b", "c"), ("c", "a")}
    quoted = write(tmp_path, "q.csv", '"Smith, J","Doe, A"\n"Doe, A","Smith, J"\n')
    assert list(load_edge_csv(quoted).extra["node_names"]) == ["Doe, A", "Smith, J"]


def test_an_empty_field_is_refused_naming_its_line(tmp_path: Path) -> None:
    f = write(tmp_path, "e.csv", "a,b\nb,\nc,a\n")
    with pytest.raises(InvalidArgument, match=r"e\.csv: line 2: field 2 is empty"):
        load_edge_csv(f)


def test_header_auto_rules_and_the_flag(tmp_path: Path) -> None:
    words = write(tmp_path, "w.csv", "from,to\nalice,bob\nbob,carol\n")
    assert named_edges(load_edge_csv(words)) == {("alice", "bob"), ("bob", "carol")}  # not an edge from->to
    uv = write(tmp_path, "uv.csv", "u,v\nalice,bob\n")
    assert named_edges(load_edge_csv(uv)) == {("alice", "bob")}
    other = write(tmp_path, "o.csv", "follower,followee\nalice,bob\nbob,carol\n")
    with pytest.raises(InvalidArgument, match=r"o\.csv: line 1 .* pass --header yes or --header no"):
        load_edge_csv(other)
    assert named_edges(load_edge_csv(other, header="yes")) == {("alice", "bob"), ("bob", "carol")}
    assert len(load_edge_csv(other, header="no").extra["node_names"]) == 5
    edge_first = write(tmp_path, "e.csv", "alice,bob\nbob,carol\n")  # alice/bob reappear: an edge
    assert load_edge_csv(edge_first).num_edges == 2
    over_ints = write(tmp_path, "i.csv", "follower,followee\n1,2\n2,3\n")
    assert load_edge_csv(over_ints).num_edges == 2


def test_node_ids_int_name_and_auto(tmp_path: Path) -> None:
    f = write(tmp_path, "e.csv", "007,7\n7,8\n")
    assert load_edge_csv(f).num_nodes == 3 - 1  # auto: integers, 007 is 7
    g = load_edge_csv(f, node_ids="name")
    assert list(g.extra["node_names"]) == ["007", "7", "8"]
    hexes = write(tmp_path, "h.csv", "1a2f,0042\n0042,ff00\n")
    with pytest.raises(InvalidArgument, match=r"line \d: node ids mix integers and names .* --node-ids name"):
        load_edge_csv(hexes)
    assert list(load_edge_csv(hexes, node_ids="name").extra["node_names"]) == ["0042", "1a2f", "ff00"]
    with pytest.raises(InvalidArgument, match=r"h\.csv: line 1: node '1a2f' is not an integer"):
        load_edge_csv(hexes, node_ids="int")


@pytest.mark.parametrize(
    ("text", "message"),
    [
        ("1,2\n2,²\n", r"line 2: node ids mix integers and names \(e\.g\. '²'\)"),
        ("1,2\n--5,2\n", r"line 2: node ids mix integers and names \(e\.g\. '--5'\)"),
        ("1,2\n2,9223372036854775808\n", r"line 2: node 9223372036854775808 is outside the 64-bit integer range"),
    ],
)
def test_odd_integer_ids_are_refused_in_one_line(
    tmp_path: Path, text: str, message: str, capsys: pytest.CaptureFixture[str]
) -> None:
    f = write(tmp_path, "e.csv", text)
    assert ingest(f, tmp_path / "out") == 2
    err = capsys.readouterr().err
    assert len(err.strip().splitlines()) == 1 and "Traceback" not in err
    assert re.search(message, err), err
    assert not (tmp_path / "out").exists()


def test_nodes_only_in_the_labels_or_features_file_are_isolated_nodes(tmp_path: Path) -> None:
    edges = write(tmp_path, "e.csv", "alice,bob\nbob,alice\n")
    labels = write(tmp_path, "l.csv", "node,label\nalice,0\nbob,1\nloner,1\n")
    feats = write(tmp_path, "f.csv", "loner,3\nbob,2\nalice,1\n")
    g = load_edge_csv(edges, labels=labels, features=feats)
    assert list(g.extra["node_names"]) == ["alice", "bob", "loner"] and g.num_edges == 2
    assert g.node_data["label"].tolist() == [0, 1, 1] and g.node_data["feat"][:, 0].tolist() == [1, 2, 3]
    ints = write(tmp_path, "i.csv", "1,2\n")
    g = load_edge_csv(ints, labels=write(tmp_path, "il.csv", "3,0\n2,1\n1,0\n"))
    assert g.orig_ids is not None and g.orig_ids.tolist() == [1, 2, 3] and g.num_edges == 1


def test_labels_must_be_integers_named_by_node_and_line(tmp_path: Path) -> None:
    edges = write(tmp_path, "e.csv", "alice,bob\n")
    with pytest.raises(InvalidArgument, match=r"l\.csv: line 3: node 'bob' has label '1\.5'"):
        load_edge_csv(edges, labels=write(tmp_path, "l.csv", "node,label\nalice,0\nbob,1.5\n"))
    with pytest.raises(InvalidArgument, match=r"node 'bob' \(line 2\) has label -1"):
        load_edge_csv(edges, labels=write(tmp_path, "n.csv", "alice,0\nbob,-1\n"))
    with pytest.raises(InvalidArgument, match=r"d\.csv: line 3: node 'alice' is listed again \(first on line 1\)"):
        load_edge_csv(edges, labels=write(tmp_path, "d.csv", "alice,0\nbob,1\nalice,1\n"))
    with pytest.raises(InvalidArgument, match=r"x\.csv: line 2: node 'bob' has feature 1 = 'nan'"):
        load_edge_csv(edges, features=write(tmp_path, "x.csv", "alice,1\nbob,nan\n"))


def test_an_unreadable_file_is_one_line(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    f = write(tmp_path, "e.csv", "1,2\n")
    os.chmod(f, 0)
    if os.access(f, os.R_OK):  # root reads any file: fail the open as it fails for other users

        def denied(*args: object, **kwargs: object) -> None:
            raise PermissionError(13, "Permission denied")

        monkeypatch.setattr(csv_lines, "open", denied, raising=False)
    assert ingest(f, tmp_path / "out") == 2
    err = capsys.readouterr().err
    assert "e.csv: cannot read it: Permission denied" in err and "Traceback" not in err
    monkeypatch.undo()
    binary = tmp_path / "b.csv"
    binary.write_bytes(b"1,2\n\xff\xfe,3\n")
    with pytest.raises(InvalidArgument, match=r"line 2 is not UTF-8 text"):
        load_edge_csv(binary)


def test_a_line_without_end_is_refused_after_a_bounded_read(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    monkeypatch.setattr(csv_lines, "MAX_LINE_BYTES", 1 << 20)
    f = tmp_path / "long.csv"
    f.write_bytes(b"1,2\n" + b"7" * (3 << 20))  # no newline: never read whole
    assert ingest(f, tmp_path / "out") == 2
    err = capsys.readouterr().err
    assert "long.csv: line 2 is longer than 1 MiB" in err and "Traceback" not in err


def test_options_are_checked_before_the_input_is_read(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    missing = tmp_path / "not-there.csv"  # reading it would fail with another message
    assert ingest(missing, tmp_path / "out", "--num-partitions", "0") == 2
    assert "--num-partitions must be >= 1, got 0" in capsys.readouterr().err


def test_header_and_node_ids_flags_reach_the_loader(tmp_path: Path) -> None:
    f = write(tmp_path, "e.csv", "who,whom\n007,7\n7,8\n8,007\n")
    assert ingest(f, tmp_path / "out", "--header", "yes", "--node-ids", "name", "--num-partitions", "1") == 0
    names = np.load(tmp_path / "out" / "node_names.npy")
    assert sorted(names.tolist()) == ["007", "7", "8"]


def test_what_a_line_cannot_hold_is_refused_by_line(tmp_path: Path) -> None:
    with pytest.raises(InvalidArgument, match=r"u\.csv: line 1: a double quote is not closed"):
        load_edge_csv(write(tmp_path, "u.csv", '"a,b\nb,c\n'))
    edges = write(tmp_path, "e.csv", "alice,bob\n")
    with pytest.raises(InvalidArgument, match=r"x\.csv: line 2: node 'bob' has feature 2 = '1e300'"):
        load_edge_csv(edges, features=write(tmp_path, "x.csv", "alice,1,2\nbob,3,1e300\n"))  # inf as float32
    with pytest.raises(InvalidArgument, match=r"w\.csv: line 2: column 'weight' holds '1e300'"):
        load_edge_csv(write(tmp_path, "w.csv", "src,dst,weight\n1,2,1e300\n"))
    with pytest.raises(InvalidArgument, match=r"l\.csv: empty labels file"):
        load_edge_csv(edges, labels=write(tmp_path, "l.csv", "# nothing yet\n"))


def test_the_csv_flags_are_refused_where_they_mean_nothing(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    typed = tmp_path / "typed"
    (typed / "nodes").mkdir(parents=True)
    (typed / "edges").mkdir()
    (typed / "nodes" / "a.csv").write_text("name\nx\ny\n")
    (typed / "edges" / "a__r__a.csv").write_text("src,dst\nx,y\n")
    assert ingest(typed, tmp_path / "out", "--node-ids", "name") == 2
    assert "--node-ids only apply to an edge-list file" in capsys.readouterr().err
    parser = argparse.ArgumentParser(prog="graphfeed")
    cli.register(parser.add_subparsers(dest="command", required=True))
    args = parser.parse_args(["ingest", "--source", "cora", "--out", str(tmp_path / "c"), "--header", "yes"])
    assert cli.run(args) == 2
    assert "--header and --node-ids only apply to --source csv" in capsys.readouterr().err


def test_a_quoted_name_starting_with_a_comment_mark_is_data(tmp_path: Path) -> None:
    g = load_edge_csv(write(tmp_path, "e.csv", '# tags\n"#ml",#ai\n"#ai","#ml"\n'))
    assert named_edges(g) == {("#ml", "#ai"), ("#ai", "#ml")}
