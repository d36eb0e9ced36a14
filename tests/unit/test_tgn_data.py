"""TGN event streams from any temporal graph: a CSV with a time column, the directory `graphfeed
ingest` writes from it (same events), the bundled PubMed citations, chronological splits."""

from __future__ import annotations

import json
from pathlib import Path

import numpy as np
import pytest

from graphfeed.cli import main as graphfeed
from graphfeed.common.errors import InvalidArgument
from graphfeed.trainer.temporal.events import load_events, parse_split


def test_a_csv_and_its_ingested_graph_give_the_same_chronological_events(tmp_path: Path) -> None:
    rng = np.random.default_rng(0)
    src, dst, ts = rng.integers(100, 140, 300), rng.integers(200, 230, 300), rng.integers(0, 50, 300)
    csv = tmp_path / "calls.csv"
    csv.write_text("".join(f"{a},{b},{c}\n" for a, b, c in zip(src, dst, ts)))
    a = load_events(str(csv), columns="src,dst,ts")
    assert (a.num_events, a.val_start, a.test_start) == (300, 210, 255)  # 70/15/15
    assert (np.diff(a.t) >= 0).all() and sorted(a.t.tolist()) == sorted(ts.tolist())
    out = tmp_path / "g"
    args = ["ingest", "--source", "csv", "--path", str(csv), "--columns", "src,dst,ts", "--out", str(out)]
    assert graphfeed([*args, "--num-partitions", "2", "--method", "random"]) == 0
    b = load_events(str(out), split=parse_split("0.8,0.1,0.1"))
    assert all(np.array_equal(getattr(a, k), getattr(b, k)) for k in ("src", "dst", "t"))
    assert (b.val_start, b.test_start) == (240, 270) and b.dst_range == a.dst_range  # destinations stay contiguous


def test_pubmed_citations_are_a_yearly_stream() -> None:
    ev = load_events("pubmed")
    assert (ev.num_events, ev.num_nodes) == (44_335, 19_717) and (np.diff(ev.t) >= 0).all()
    assert len(np.unique(ev.t)) == 42 and ev.val_start == round(0.7 * ev.num_events)


@pytest.mark.parametrize("bad", ["0.7,0.3", "0.5,0.5,0.5", "a,b,c", "0,0.5,0.5"])
def test_a_bad_split_is_refused(bad: str) -> None:
    with pytest.raises(InvalidArgument):
        parse_split(bad)


def test_train_temporal_runs_on_a_csv_with_its_own_split_and_seed(tmp_path: Path) -> None:
    rng = np.random.default_rng(1)
    csv = tmp_path / "calls.csv"
    rows = zip(rng.integers(0, 30, 300), rng.integers(30, 60, 300), np.sort(rng.integers(0, 10_000, 300)))
    csv.write_text("src,dst,ts\n" + "".join(f"{a},{b},{c}\n" for a, b, c in rows))
    out = tmp_path / "run.json"
    args = ["train-temporal", "--dataset", str(csv), "--split", "0.8,0.1,0.1", "--seed", "3", "--dim", "8"]
    args += ["--batch-size", "50", "--epochs", "2", "--threads", "1", "--mmap-threshold-kib", "0", "--json", str(out)]
    assert graphfeed([*args, "--visibility", "previous-batches"]) == 0
    result = json.loads(out.read_text())
    assert result["events"] == 300 and result["config"]["seed"] == "3" and result["kept_epoch"] in (1, 2)
    assert result["config"]["visibility"] == "previous-batches"
