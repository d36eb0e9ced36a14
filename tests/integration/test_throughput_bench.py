"""``graphfeed bench throughput --edges`` end to end in its smallest configuration: edge
minibatches (link prediction) through every system (in-process DGL's edge DataLoader, the
sampler service, the remote and the embedded loader; real service processes; DistDGL's
DistEdgeDataLoader where root can emulate its machines), and its JSON says edge mode and has
each system's rate and the ratios vs DGL. Timings are not checked."""

from __future__ import annotations

import json
import os
import shutil
import subprocess
import sys
from pathlib import Path

import pytest

pytestmark = [pytest.mark.integration, pytest.mark.slow]

SYSTEMS = {"dgl_sample", "dgl_sample_gather", "gf_sampler", "gf_e2e", "gf_embedded"}


@pytest.mark.parametrize(
    ("preset", "relation", "canonical"),
    [("tiny", "_E", "_N:_E:_N"), ("mag-small", "writes", "author:writes:paper")],
)
def test_edge_mode_runs_every_system(tmp_path: Path, preset: str, relation: str, canonical: str) -> None:
    out, work = tmp_path / "tp.json", tmp_path / "work"
    r = _bench(out, work, preset, relation)

    assert r["mode"] == "edges"
    e = r["edges"]
    assert (e["relation"], e["num_negatives"], e["exclude"]) == (canonical, 2, "reverse_id")
    assert e["train_edges"] > 0 and e["train_edges_with_twin"] == e["train_edges"]  # every train edge has a twin
    assert set(r["systems"]) == SYSTEMS
    for name, s in r["systems"].items():
        assert s["runs_minibatches_per_s"] and all(v > 0 for v in s["runs_minibatches_per_s"]), name
        assert s["sampled_edges_per_s"] > 0, name
    for key in ("sample_ratio_vs_dgl", "e2e_ratio_vs_dgl", "embedded_ratio_vs_dgl"):
        assert r[key] > 0, key
    # the split dataset is cached apart from the preset's unsplit one
    assert sorted(p.name for p in work.iterdir()) == ["logs", f"synthetic-{preset}+edges-{relation}-metis-2"]
    assert "edge minibatches" in out.with_suffix(".md").read_text()


@pytest.mark.skipif(
    os.geteuid() != 0 or not all(shutil.which(t) for t in ("unshare", "nsenter", "ss")),
    reason="DistDGL's emulated machines need root (mount namespaces), unshare, nsenter and ss",
)
def test_edge_mode_runs_distdgl_side_by_side(tmp_path: Path) -> None:
    import torch

    out, work = tmp_path / "tp.json", tmp_path / "work"
    r = _bench(out, work, "tiny", "_E", "--distdgl")
    assert set(r["systems"]) == SYSTEMS | {"distdgl"}
    assert all(v > 0 for v in r["systems"]["distdgl"]["runs_minibatches_per_s"])
    assert r["e2e_ratio_vs_distdgl"] > 0 and r["distdgl_ratio_vs_dgl"] > 0
    (edges,) = work.glob("distdgl-*/edges.pt")  # DistDGL's train edges, in its relabelled ids
    e = torch.load(edges)
    assert len(e["train"].unique()) == r["edges"]["train_edges"] == int((e["twin"] >= 0).sum())


def _bench(out: Path, work: Path, preset: str, relation: str, *more: str) -> dict:
    cmd = [sys.executable, "-m", "graphfeed", "bench", "throughput", "--workdir", str(work), "--out", str(out)]
    cmd += ["--preset", preset, "--edges", relation, "--num-negatives", "2", "--steps", "2", "--repeats", "1"]
    cmd += ["--batch-size", "64", "--fanouts", "4", "4", "--no-machine-limits", "--warmup", "1", *more]
    proc = subprocess.run(cmd, capture_output=True, text=True, timeout=240, env=dict(os.environ))
    assert proc.returncode == 0, proc.stderr[-4000:]
    result = json.loads(out.read_text())
    assert result["warmup_steps"] == 1 and "after 1 untimed" in out.with_suffix(".md").read_text()
    return result
