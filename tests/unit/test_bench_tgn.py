"""``graphfeed bench tgn --pyg``: a clear message without torch_geometric, and the summary's
statistics (epoch 1, last epoch, best-validation epoch; mean and sample std over seeds)."""

from __future__ import annotations

import sys

import pytest

from graphfeed.bench import tgn_compare, tgn_pyg
from graphfeed.cli import main as graphfeed


def test_without_torch_geometric_the_bench_says_how_to_install_it(
    monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    monkeypatch.setitem(sys.modules, "torch_geometric", None)  # import fails as if not installed
    monkeypatch.setitem(sys.modules, "torch_geometric.nn", None)
    assert tgn_pyg.available() == tgn_pyg.INSTALL_HINT
    assert graphfeed(["bench", "tgn", "--pyg", "--dataset", "collegemsg", "--events", "100"]) == 2
    err = capsys.readouterr().err
    assert "pip install --no-deps torch_geometric==2.6.1" in err and "Traceback" not in err


def test_the_summary_reports_epoch_one_the_last_and_the_best_validation_epoch() -> None:
    runs = [
        {"dataset": "d", "events": 10, "system": "pyg", "seed": s, "val_ap": v, "test_ap": t, "seconds": 4.0}
        for s, v, t in [(0, [0.5, 0.7], [0.6, 0.8]), (1, [0.9, 0.6], [0.7, 0.5])]
    ]
    (row,) = tgn_compare.summarize(runs)
    assert row["test_ap_epoch1"]["mean"] == pytest.approx(0.65) and row["test_ap_last"]["mean"] == pytest.approx(0.65)
    assert row["test_ap_best_val"]["mean"] == pytest.approx(0.75)  # seed 0's epoch 2, seed 1's epoch 1
    assert row["test_ap_epoch1"]["std"] == pytest.approx(0.0707107, rel=1e-5) and row["seconds_per_epoch"] == 2.0
    assert "0.6500 ± 0.0707" in tgn_compare.table([row], "cmd")
