"""A benchmark run on a busy machine is marked so: its ratios against in-process DGL flatter
graphfeed (DGL slows most under load)."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from graphfeed.bench import report


def _sample(busy: float) -> dict:
    return {"loadavg": [0.0, 0.0, 0.0], "cpu_count": 2, "torch_threads": 2, "other_busy_cores": busy}


def test_quiet_only_when_every_sample_is_below_the_limit() -> None:
    assert report.quiet(_sample(0.0), _sample(report.QUIET_CORES - 0.01))
    assert not report.quiet(_sample(0.0), _sample(report.QUIET_CORES))
    assert report.quiet(_sample(0.0) | {"other_busy_cores": None})  # no /proc: nothing to judge by


def test_a_run_that_started_on_a_busy_machine_is_marked_invalid(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    out = tmp_path / "r.json"
    report.write(out, {"e2e_ratio_vs_dgl": 1.4}, "| table |\n", started=_sample(1.2))
    result = json.loads(out.read_text())
    assert result["quiet"] is False and result["machine_load"]["start"]["other_busy_cores"] == 1.2
    assert out.with_suffix(".md").read_text().startswith("**Not quiet**")
    assert "not valid" in capsys.readouterr().err


def test_the_sampler_sees_this_process_as_its_own() -> None:
    """Work done by the benchmark itself is not counted as other processes' load."""
    busy, own = report._busy_seconds()
    assert busy >= own >= 0.0
