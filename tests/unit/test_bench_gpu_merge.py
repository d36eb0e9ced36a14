"""``bench/gpu.py``'s merge: the runs of each part averaged, stale runs forgotten (no GPU needed)."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import pytest

from graphfeed.bench import gpu


def _gpu_run(zero_copy: float) -> dict[str, Any]:
    row = {"table_rows": 10, "batch_rows": 4, "pinned_copy_gbps": 50.0, "zero_copy_gbps": zero_copy}
    return {"meta": {"device": "H100"}, "transfer": [row], "cache": [], "sampling_gpu": [], "temporal_gpu": []}


def test_the_report_gives_the_mean_of_each_part_s_runs(tmp_path: Path) -> None:
    for name, value in (("gpu", 30.0), ("gpu2", 40.0), ("gpu3", 50.0)):
        (tmp_path / f"{name}.json").write_text(json.dumps(_gpu_run(value)))
    (tmp_path / "gpu_bench.json").write_text("{}")  # the merged report: no run of the gpu part
    res = gpu.merge(tmp_path)
    row = res["transfer"][0]
    assert res["gpu_meta"] == {"device": "H100", "runs": 3}
    assert row["zero_copy_gbps"] == pytest.approx(40.0) and row["table_rows"] == 10
    assert row["zero_copy_vs_pinned_copy"] == pytest.approx(0.8)
    assert res["cpu_meta"] is None  # no cpu part measured


def test_a_new_measurement_forgets_the_earlier_runs(tmp_path: Path) -> None:
    for name in ("gpu", "gpu2", "gpu3", "cpu"):
        (tmp_path / f"{name}.json").write_text("{}")
    gpu._forget_runs(tmp_path, "gpu")
    assert sorted(p.name for p in tmp_path.iterdir()) == ["cpu.json"]
