"""Ingest refuses input that would be silently wrong (issue 15): one clear line, nothing written."""

from __future__ import annotations

import argparse
import logging
from pathlib import Path

import numpy as np
import pytest

from graphfeed.common.errors import InvalidArgument
from graphfeed.ingest import cli
from graphfeed.ingest.graph import GraphData
from graphfeed.ingest.partition import write_partitioned
from graphfeed.ingest.sources import load_numpy_dir
from tests.graphs import numpy_source_arrays

BIG = np.uint64(2**63)  # the smallest uint64 that wraps to a negative int64


def write_dir(d: Path, **replace: np.ndarray) -> Path:
    d.mkdir(parents=True)
    for k, v in {**numpy_source_arrays(), **replace}.items():
        np.save(d / f"{k}.npy", v)
    return d


def with_value(a: np.ndarray, index: tuple[int, ...], value: float) -> np.ndarray:
    a = a.copy()
    a[index] = value
    return a


FEAT = numpy_source_arrays()["feat"]

# file replaced -> (file named in the error, what the error says: the problem and an example)
BAD_INPUTS = {
    "nan feature": (
        {"feat": with_value(FEAT, (3, 1), np.nan)},
        "feat.npy",
        r"finite, found 1 NaN/inf value\(s\), e\.g\. nan at row 3, column 1",
    ),
    "+inf feature": ({"feat": with_value(FEAT, (0, 0), np.inf)}, "feat.npy", r"e\.g\. inf at row 0, column 0"),
    "-inf feature": ({"feat": with_value(FEAT, (4, 1), -np.inf)}, "feat.npy", r"e\.g\. -inf at row 4, column 1"),
    "float64 beyond float32": (
        {"feat": with_value(FEAT.astype(np.float64), (2, 0), 1e300)},
        "feat.npy",
        r"1 feature value\(s\) beyond the float32 range.*e\.g\. 1e\+300 at row 2, column 0",
    ),
    "negative label": ({"label": np.array([0, 2, -1, 0, 2])}, "label.npy", r"negative \(e\.g\. node 2 has label -1\)"),
    "label not a class id": (
        {"label": np.array([0, 2, 1, 70, 2])},
        "label.npy",
        r"max label 70 \(node 3\).*71 classes for 5 nodes",
    ),
    "splits overlap": ({"val_idx": np.array([3, 1])}, "val_idx.npy", r"disjoint.*train_idx\.npy \(e\.g\. node 1\)"),
    "empty train": ({"train_idx": np.array([], dtype=np.int64)}, "train_idx.npy", r"train split is empty"),
    "split id too large": ({"test_idx": np.array([4, 9])}, "test_idx.npy", r"\[0, 5\).*entry 1 is 9"),
    "negative split id": ({"val_idx": np.array([-3])}, "val_idx.npy", r"\[0, 5\).*entry 0 is -3"),
    "duplicate in split": (
        {"train_idx": np.array([0, 1, 2, 1])},
        "train_idx.npy",
        r"distinct, node 1 is listed 2 times",
    ),
    "dst out of range": ({"dst": np.array([1, 2, 0, 0, 5])}, "dst.npy", r"\[0, 5\).*entry 4 is 5"),
    "negative src": ({"src": np.array([0, -1, 2, 3, 3])}, "src.npy", r"\[0, 5\).*entry 1 is -1"),
    "uint64 edge id wraps": (
        {"src": np.array([0, 1, 2, 3, BIG], dtype=np.uint64)},
        "src.npy",
        r"2\*\*63.*entry 4 is 9223372036854775808",
    ),
    "uint64 split id wraps": (
        {"train_idx": np.array([BIG + np.uint64(5)], dtype=np.uint64)},
        "train_idx.npy",
        r"2\*\*63.*entry 0 is",
    ),
    "uint64 label wraps": ({"label": np.array([0, 1, 0, 1, BIG], dtype=np.uint64)}, "label.npy", r"2\*\*63.*entry 4"),
}


def parse(argv: list[str]) -> argparse.Namespace:
    parser = argparse.ArgumentParser(prog="graphfeed")
    cli.register(parser.add_subparsers(dest="command", required=True))
    return parser.parse_args(argv)


def wrote_nothing(out: Path) -> bool:
    return not out.exists() or not any(out.iterdir())


@pytest.mark.parametrize("replace, file, message", list(BAD_INPUTS.values()), ids=list(BAD_INPUTS))
def test_numpy_loader_names_file_problem_and_example(
    tmp_path: Path, replace: dict[str, np.ndarray], file: str, message: str
) -> None:
    d = write_dir(tmp_path / "g", **replace)
    with pytest.raises(InvalidArgument, match=message) as e:
        load_numpy_dir(d)
    assert str(d / file) in str(e.value)


@pytest.mark.parametrize("replace, file, message", list(BAD_INPUTS.values()), ids=list(BAD_INPUTS))
def test_cli_prints_one_line_exits_2_and_writes_nothing(
    tmp_path: Path, capsys: pytest.CaptureFixture[str], replace: dict[str, np.ndarray], file: str, message: str
) -> None:
    d = write_dir(tmp_path / "g", **replace)
    out = tmp_path / "out"
    argv = [
        "ingest",
        "--source",
        "numpy",
        "--path",
        str(d),
        "--out",
        str(out),
        "--num-partitions",
        "2",
        "--no-progress",
    ]
    assert cli.run(parse(argv)) == 2
    err = capsys.readouterr().err
    assert len(err.strip().splitlines()) == 1 and err.startswith("graphfeed ingest: error: ")
    assert file in err and "Traceback" not in err
    assert wrote_nothing(out)


def test_good_input_is_accepted_and_logs_the_class_count(tmp_path: Path, caplog: pytest.LogCaptureFixture) -> None:
    small_uint64 = np.array([0, 1, 2, 3, 3], dtype=np.uint64)  # unsigned ids below 2**63 are fine
    d = write_dir(tmp_path / "g", src=small_uint64, feat=FEAT.astype(np.float64))
    with caplog.at_level(logging.INFO, logger="graphfeed.ingest.sources"):
        g = load_numpy_dir(d)
    assert g.num_classes == 3 and g.src.dtype == np.int64 and g.node_data["feat"].dtype == np.float32
    assert "3 classes" in caplog.text


def graph(**change: object) -> GraphData:
    """The good graph as another source would build it, with fields replaced."""
    a = numpy_source_arrays()
    fields: dict = {
        "name": "g",
        "num_nodes": 5,
        "src": a["src"],
        "dst": a["dst"],
        "node_data": {"feat": a["feat"], "label": a["label"]},
        "splits": {"train": a["train_idx"], "val": a["val_idx"], "test": a["test_idx"]},
    }
    return GraphData(**{**fields, **change})


@pytest.mark.parametrize(
    "change, message",
    [
        (
            {"node_data": {"emb": with_value(FEAT, (1, 1), np.nan)}},
            r"g: node data 'emb'.*e\.g\. nan at row 1, column 1",
        ),
        ({"node_data": {"label": np.array([0, -2, 1, 0, 2])}}, r"g: node data 'label'.*node 1 has label -2"),
        ({"node_data": {"label": np.array([0, 9, 1, 0, 2])}}, r"g: node data 'label'.*10 classes for 5 nodes"),
        ({"splits": {"train": np.array([0, 1]), "test": np.array([1, 4])}}, r"g: split 'test'.*disjoint.*'train'"),
        ({"splits": {"train": np.array([], dtype=np.int64), "val": np.array([3])}}, r"g: split 'train'.*empty"),
        ({"splits": {"train": np.array([0, 0, 1])}}, r"g: split 'train'.*node 0 is listed 2 times"),
        ({"splits": {"train": np.array([0, 5])}}, r"g: split 'train'.*entry 1 is 5"),
        ({"dst": np.array([1, 2, 0, 0, 7])}, r"g: dst.*entry 4 is 7"),
    ],
)
def test_every_source_graph_is_checked_before_writing(tmp_path: Path, change: dict, message: str) -> None:
    out = tmp_path / "out"
    with pytest.raises(InvalidArgument, match=message):
        write_partitioned(graph(**change), out, 2, assignment=np.arange(5) % 2)
    assert wrote_nothing(out)


def test_a_graph_without_labels_or_splits_is_still_valid() -> None:
    graph(node_data={}, splits={}).validate()


def test_more_partitions_than_nodes_is_refused_before_anything_is_written(tmp_path: Path) -> None:
    from graphfeed.common.errors import InvalidArgument
    from graphfeed.ingest.partition import assign_partitions
    from graphfeed.ingest.sources import load_edge_csv

    (tmp_path / "e.csv").write_text("0,1\n1,2\n")
    g = load_edge_csv(tmp_path / "e.csv")
    with pytest.raises(InvalidArgument, match="4 partitions of a 3-node graph"):
        assign_partitions(g, 4)
    with pytest.raises(InvalidArgument, match="empty"):
        assign_partitions(g, 3, method="random", seed=0)  # a seed that leaves one partition empty


def test_labels_with_more_unused_class_ids_than_used_are_refused(caplog: pytest.LogCaptureFixture) -> None:
    from graphfeed.common.errors import InvalidArgument
    from graphfeed.ingest.graph import check_labels

    stray = np.zeros(2000, dtype=np.int64)
    stray[1::2], stray[7] = 1, 1000  # 0 and 1, and one 1000
    with pytest.raises(
        InvalidArgument, match=r"3 distinct values up to 1000, so 998 of the ids 0\.\.1000 have no node"
    ):
        check_labels("label.npy", stray, len(stray))
    with caplog.at_level(logging.WARNING, logger="graphfeed.ingest.graph"):
        assert check_labels("label.npy", np.array([0, 1, 3, 3, 0]), 5) == 4  # one gap: kept, and said
    assert "1 of the class ids 0..3 have no node (e.g. [2])" in caplog.text
