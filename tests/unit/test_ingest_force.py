"""``graphfeed ingest --out DIR [--force]``: DIR is replaced only by an ingest that succeeded."""

from __future__ import annotations

import argparse
from pathlib import Path

import numpy as np
import pytest

import graphfeed.ingest.partition as ingest_partition
from graphfeed.common.partition import MANIFEST, GraphManifest
from graphfeed.ingest import cli

EDGES = "src,dst\n10,11\n11,12\n12,13\n13,10\n10,12\n"


def parse(argv: list[str]) -> argparse.Namespace:
    parser = argparse.ArgumentParser(prog="graphfeed")
    cli.register(parser.add_subparsers(dest="command", required=True))
    return parser.parse_args(argv)


def ingest(csv: Path, out: Path, *flags: str) -> int:
    argv = ["ingest", "--source", "csv", "--path", str(csv), "--out", str(out), "--method", "random", "--no-progress"]
    return cli.run(parse([*argv, *flags]))


def tree(root: Path) -> dict[str, bytes]:
    """Every file under ``root`` by relative path, with its bytes."""
    return {str(f.relative_to(root)): f.read_bytes() for f in sorted(root.rglob("*")) if f.is_file()}


@pytest.fixture
def earlier(tmp_path: Path) -> tuple[Path, dict[str, bytes]]:
    """An ``out`` holding a finished 2-partition ingest of a 4-node CSV graph, and its files."""
    csv = tmp_path / "good.csv"
    csv.write_text(EDGES)
    out = tmp_path / "graph"
    assert ingest(csv, out, "--num-partitions", "2") == 0
    return out, tree(out)


def test_a_bad_input_leaves_the_earlier_ingest_byte_for_byte(
    tmp_path: Path, earlier: tuple[Path, dict[str, bytes]], capsys: pytest.CaptureFixture[str]
) -> None:
    out, before = earlier
    bad = tmp_path / "bad.csv"
    bad.write_text("src,dst\n1,x\n")
    capsys.readouterr()
    assert ingest(bad, out, "--force") == 2
    assert "node ids mix integers and names (e.g. 'x')" in capsys.readouterr().err
    assert tree(out) == before
    assert sorted(p.name for p in tmp_path.iterdir()) == ["bad.csv", "good.csv", "graph"]  # no staging dir left


def test_a_missing_numpy_file_leaves_the_earlier_ingest(
    tmp_path: Path, earlier: tuple[Path, dict[str, bytes]], capsys: pytest.CaptureFixture[str]
) -> None:
    out, before = earlier
    npy = tmp_path / "npy"
    npy.mkdir()
    np.save(npy / "src.npy", np.array([0, 1]))  # dst.npy, feat.npy ... are missing
    argv = ["ingest", "--source", "numpy", "--path", str(npy), "--out", str(out), "--force", "--no-progress"]
    assert cli.run(parse(argv)) == 2
    assert "is missing" in capsys.readouterr().err
    assert tree(out) == before
    assert sorted(p.name for p in tmp_path.iterdir()) == ["good.csv", "graph", "npy"]


@pytest.mark.parametrize("error", [OSError("disk full"), KeyboardInterrupt()])
def test_a_failure_while_writing_leaves_the_earlier_ingest(
    tmp_path: Path, earlier: tuple[Path, dict[str, bytes]], monkeypatch: pytest.MonkeyPatch, error: BaseException
) -> None:
    out, before = earlier
    written: list[int] = []
    real = ingest_partition.write_partition

    def fail_on_second(root: Path, p: int, manifest: GraphManifest, arrays: ingest_partition.PartitionArrays) -> Path:
        if p == 1:  # partition 0 and the graph manifest are already in the staging directory
            raise error
        written.append(p)
        return real(root, p, manifest, arrays)

    monkeypatch.setattr(ingest_partition, "write_partition", fail_on_second)
    with pytest.raises(type(error)):
        ingest(tmp_path / "good.csv", out, "--num-partitions", "3", "--force")
    assert written == [0]
    assert tree(out) == before
    assert sorted(p.name for p in tmp_path.iterdir()) == ["good.csv", "graph"]


def test_force_replaces_the_earlier_ingest_and_keeps_other_files(
    tmp_path: Path, earlier: tuple[Path, dict[str, bytes]]
) -> None:
    out, before = earlier
    (out / "NOTES.txt").write_text("mine")
    (out / "part-00001" / "stale").write_text("from the earlier ingest")
    assert ingest(tmp_path / "good.csv", out, "--num-partitions", "3", "--seed", "0", "--force") == 0
    names = sorted(p.name for p in out.iterdir())
    assert names == ["NOTES.txt", MANIFEST, "orig_ids.npy", "part-00000", "part-00001", "part-00002"]
    assert GraphManifest.load(out).num_partitions == 3 and tree(out)[MANIFEST] != before[MANIFEST]
    assert not (out / "part-00001" / "stale").exists()
    assert (out / "NOTES.txt").read_text() == "mine"
    assert sorted(p.name for p in tmp_path.iterdir()) == ["good.csv", "graph"]  # the old one is gone too


def test_without_force_a_non_empty_out_is_refused_and_kept(
    tmp_path: Path, earlier: tuple[Path, dict[str, bytes]], capsys: pytest.CaptureFixture[str]
) -> None:
    out, before = earlier
    capsys.readouterr()
    assert ingest(tmp_path / "good.csv", out) == 2
    assert "is not empty; pass --force" in capsys.readouterr().err
    assert tree(out) == before
    assert sorted(p.name for p in tmp_path.iterdir()) == ["good.csv", "graph"]


def test_an_empty_out_directory_and_a_missing_parent_are_written(tmp_path: Path) -> None:
    csv = tmp_path / "good.csv"
    csv.write_text(EDGES)
    empty = tmp_path / "empty"
    empty.mkdir(mode=0o750)
    assert ingest(csv, empty) == 0
    assert (empty / MANIFEST).is_file() and (empty.stat().st_mode & 0o777) == 0o750
    assert ingest(csv, tmp_path / "a" / "b") == 0
    assert (tmp_path / "a" / "b" / "part-00001").is_dir()
    assert sorted(p.name for p in (tmp_path / "a").iterdir()) == ["b"]


def test_a_symlinked_out_keeps_its_link(tmp_path: Path, earlier: tuple[Path, dict[str, bytes]]) -> None:
    out, _ = earlier
    link = tmp_path / "link"
    link.symlink_to(out, target_is_directory=True)
    assert ingest(tmp_path / "good.csv", link, "--num-partitions", "3", "--force") == 0
    assert link.is_symlink() and (out / "part-00002").is_dir()


def test_an_out_that_is_a_file_is_refused(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    csv = tmp_path / "good.csv"
    csv.write_text(EDGES)
    for flags in ([], ["--force"]):
        assert ingest(csv, csv, *flags) == 2
        assert "exists and is not a directory" in capsys.readouterr().err
        assert csv.read_text() == EDGES
    assert sorted(p.name for p in tmp_path.iterdir()) == ["good.csv"]


def test_columns_name_a_headerless_third_column(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    csv = tmp_path / "timed.csv"
    csv.write_text("10,11,5\n11,12,6\n12,13,7\n13,10,8\n")
    assert ingest(csv, tmp_path / "refused") == 2
    assert "3 columns and no header line: name them with --columns" in capsys.readouterr().err
    assert not (tmp_path / "refused").exists()
    assert ingest(csv, tmp_path / "weighted", "--columns", "src,dst,weight") == 0
    weights = np.concatenate([np.load(p) for p in sorted((tmp_path / "weighted").glob("part-*/edge_feat.npy"))])
    assert sorted(weights[:, 0].tolist()) == [5.0, 6.0, 7.0, 8.0]  # kept as an edge feature, not as times
    assert ingest(csv, tmp_path / "timed", "--columns", "src,dst,ts") == 0
    assert not list((tmp_path / "timed").glob("part-*/edge_feat.npy"))


def test_force_replaces_the_node_names_of_an_earlier_named_ingest(tmp_path: Path) -> None:
    first, second, out = tmp_path / "first.csv", tmp_path / "second.csv", tmp_path / "graph"
    first.write_text("src,dst\nalice,bob\nbob,carol\ncarol,dave\ndave,eve\neve,alice\n")
    second.write_text("src,dst\nzed,yan\nyan,xia\nxia,wu\nwu,zed\n")
    assert ingest(first, out, "--num-partitions", "1") == 0
    assert ingest(second, out, "--num-partitions", "1", "--force") == 0
    names, orig = np.load(out / "node_names.npy"), np.load(out / "orig_ids.npy")
    assert sorted(names[orig].tolist()) == ["wu", "xia", "yan", "zed"]  # not the first graph's names
    (tmp_path / "good.csv").write_text(EDGES)
    assert ingest(tmp_path / "good.csv", out, "--force") == 0
    assert not (out / "node_names.npy").exists()  # integer ids: no names left from before


def test_every_root_file_an_ingest_writes_is_replaced_by_force(tmp_path: Path) -> None:
    from graphfeed.ingest.outdir import is_ingest_output
    from graphfeed.ingest.sources import load_edge_csv

    csv = tmp_path / "names.csv"
    csv.write_text("src,dst\nalice,bob\nbob,carol\n")
    ingest_partition.write_partitioned(load_edge_csv(csv), tmp_path / "g", 1, method="random")
    assert all(is_ingest_output(child) for child in (tmp_path / "g").iterdir())
