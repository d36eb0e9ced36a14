"""``graphfeed bench embeddings`` end to end in its smallest configuration: every part runs
(real graph-store, sampler and loader processes; a real kill -9), and its JSON has the fields
the report and BENCHMARKS.md read, with the exactness ones holding. Timings are not checked."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest

pytestmark = [pytest.mark.integration]


def test_smallest_bench_runs_and_reports_exact_results(tmp_path: Path) -> None:
    out = tmp_path / "emb.json"
    cmd = [sys.executable, "-m", "graphfeed", "bench", "embeddings", "--workdir", str(tmp_path / "work")]
    cmd += ["--out", str(out), "--preset", "mag-small", "--source", "mag-small", "--seeds", "0", "--epochs", "1"]
    cmd += ["--fidelity-batch-size", "256", "--kill-trials", "1", "--steps", "2", "--warmup", "1", "--repeats", "1"]
    cmd += ["--batch-size", "128", "--fanouts", "4", "4", "--hidden", "16", "--featureless-types", "paper"]
    proc = subprocess.run(cmd, capture_output=True, text=True, timeout=300, env=dict(os.environ))
    assert proc.returncode == 0, proc.stderr[-4000:]
    r = json.loads(out.read_text())
    assert r["parts"] == ["fidelity", "durability", "throughput"]

    f = r["fidelity"]
    assert set(f["test_acc"]) == {"dgl", "local", "server"}
    assert all(len(v) == 1 and 0.0 <= v[0] <= 1.0 for v in f["test_acc"].values())
    assert {"server_minus_local_points", "server_minus_dgl_points"} <= set(f)
    assert isinstance(f["within_1_point"], bool)
    assert f["job"]["featureless_types"] == ["paper"]  # the labelled type's features ignored, embedded instead

    d = r["durability"]
    assert len(d["trials"]) == 1
    assert d["retries"] >= 1  # the kill landed while pushes flowed: some call failed and was retried
    assert d["trials"][0]["applied_steps"] == [d["trials"][0]["steps"]] * 2  # each partition, each step once
    assert d["lost_or_twice"] == 0 and d["pulled_rows_differ"] == 0
    assert d["equal"] is True

    t = r["throughput"]
    assert t["same_minibatches"] is True
    assert set(t["median_steps_per_s"]) == {"local", "server"}
    assert all(len(v) == 1 and v[0] > 0 for v in t["steps_per_s"].values())
    assert (out.with_suffix(".md")).read_text().count("###") == 3
