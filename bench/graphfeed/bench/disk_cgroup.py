"""The naive ``np.memmap`` baseline of ``graphfeed bench disk`` under a real memory limit: a
child process in its own cgroup (v1 memory controller), limited to its memory without features
plus the budget, so the kernel itself holds the file's page cache to the budget (not the bench
dropping pages, as the in-process "held to the budget" system does).

The child opens the partitions with no feature rows in memory and samples a step (compiling
the kernels), joins the cgroup (what it uses from then on is charged there), touches every
page of the topology and a minibatch buffer, samples three steps, then sets the limit to the
cgroup's peak usage so far (its memory without features) + the budget, and runs the epoch:
sample, ``feat[input_nodes]`` on the memory map. It prints one JSON line (rate, disk bytes,
peak usage, how often the limit was hit). The parent creates the cgroup, runs the child with a
timeout, and removes the cgroup after; where the controller is missing or not writable (not
root, cgroup v2 only) it says so and skips.

Run alone (the child)::

    python -m graphfeed.bench.disk_cgroup --root R --cgroup /sys/fs/cgroup/memory/x --budget-bytes B ...
"""

from __future__ import annotations

import argparse
import json
import os
import subprocess
import sys
import time
from pathlib import Path
from typing import Any

import numpy as np

MEMCG = Path("/sys/fs/cgroup/memory")
SYSTEM = "naive np.memmap, cgroup memory limit (RSS without features + budget)"


def run_in_cgroup(
    root: Path, flat: Path, job: dict[str, Any], budget_bytes: int, max_steps: int, max_seconds: float = 120.0
) -> dict[str, Any]:
    """The memmap epoch in a child process under a cgroup memory limit (module docstring), for
    ``max_steps`` steps (0: all) or until a step ends past ``max_seconds`` (it may thrash).

    Returns:
        The child's JSON result with ``system`` set, or ``{"system": ..., "skipped": reason}``.
    """
    group = MEMCG / f"graphfeed-bench-disk-{os.getpid()}"
    timeout_s = max_seconds + 600  # start-up, and a last step that thrashes
    try:
        group.mkdir()
    except OSError as exc:
        return {"system": SYSTEM, "skipped": f"cannot create a memory cgroup under {MEMCG}: {exc}"}
    try:
        cmd = [sys.executable, "-m", "graphfeed.bench.disk_cgroup", "--root", str(root), "--flat", str(flat)]
        cmd += ["--cgroup", str(group), "--budget-bytes", str(budget_bytes), "--steps", str(max_steps)]
        cmd += ["--job", json.dumps(job), "--max-seconds", str(max_seconds)]
        done = subprocess.run(cmd, capture_output=True, text=True, timeout=timeout_s, check=False)
        lines = [line for line in done.stdout.splitlines() if line.startswith("{")]
        if done.returncode != 0 or not lines:
            why = "killed (the cgroup's OOM killer: memory.oom_control)" if done.returncode == -9 else "failed"
            return {"system": SYSTEM, "skipped": f"child {why}, exit {done.returncode}: {done.stderr[-2000:]}"}
        return {"system": SYSTEM, **json.loads(lines[-1])}
    except subprocess.TimeoutExpired:
        return {"system": SYSTEM, "skipped": f"child ran past {timeout_s:.0f} s"}
    finally:
        _remove(group)


def _remove(group: Path) -> None:
    """Removes the cgroup (its processes have exited; a cgroup directory is removed with rmdir)."""
    for _ in range(50):
        try:
            group.rmdir()
            return
        except FileNotFoundError:
            return
        except OSError:
            time.sleep(0.1)  # the child's exit is still being accounted


def _child(args: argparse.Namespace) -> dict[str, Any]:
    from graphfeed.bench.disk_stores import read_bytes, status_bytes
    from graphfeed.common.partition import GraphManifest, part_dir_name
    from graphfeed.graph_store.partitions import LocalPartitionSet
    from graphfeed.graph_store.store import GraphStore
    from graphfeed.loader.job import JobSpec
    from graphfeed.pack.offline import plan_epoch, sample_steps
    from graphfeed.sampler.core import MultiHopSampler

    n = GraphManifest.load(args.root).num_partitions
    # a budget of one byte keeps no rows in memory: features come from the memory map only
    parts = LocalPartitionSet([GraphStore.open(args.root / part_dir_name(p), memory_budget=1) for p in range(n)])
    spec = json.loads(args.job)
    job = JobSpec(**{**spec, "fanouts": tuple(spec["fanouts"])})
    planned = plan_epoch(parts, job, 0)
    first = MultiHopSampler(parts).sample(planned.plan.seeds(0), list(job.fanouts), job.replace, job.job_seed, 0, 0)
    # the kernels are compiled: from here on, what the process uses is charged to the cgroup
    (args.cgroup / "cgroup.procs").write_text(f"{os.getpid()}\n")  # no limit yet
    for topology in sorted(args.root.glob("part-*/*.npy")):  # every page sampling may read
        int(np.memmap(topology, dtype=np.uint8, mode="r")[::4096].sum())
    spec_ = parts.info.node_data[job.feature_name]
    feat = np.memmap(args.flat, dtype=spec_.dtype, mode="r").reshape(-1, *spec_.row_shape)
    # warm-up in the cgroup: the minibatch buffer touched, then three steps sampled as the epoch
    # samples them: the memory the process uses besides feature pages (anonymous memory cannot be
    # reclaimed without swap, so a limit below it kills the process instead of measuring the
    # page cache); the limit is that peak + the budget
    buf = np.ones((int(1.5 * len(first.input_nodes)), *spec_.row_shape), dtype=spec_.dtype)
    del first
    for step, _ in sample_steps(MultiHopSampler(parts), job, planned, window=2):
        if step == 2:
            break
    without = int((args.cgroup / "memory.max_usage_in_bytes").read_text())
    limit = without + args.budget_bytes
    (args.cgroup / "memory.limit_in_bytes").write_text(f"{limit}\n")
    (args.cgroup / "memory.max_usage_in_bytes").write_text("0\n")
    steps, rows, before, t0 = 0.0, 0, read_bytes(), time.perf_counter()
    for _, ids in sample_steps(MultiHopSampler(parts), job, planned, window=2):
        if len(ids) > len(buf):
            buf = np.empty((len(ids), *spec_.row_shape), dtype=spec_.dtype)
        done = _take(feat, ids, buf, t0 + args.max_seconds)  # "raise" would buffer a copy of out
        steps, rows = steps + done / max(1, len(ids)), rows + done
        if steps >= args.steps > 0 or done < len(ids) or time.perf_counter() - t0 > args.max_seconds:
            break
    seconds = time.perf_counter() - t0
    cg = {name: int((args.cgroup / f"memory.{name}").read_text()) for name in ("max_usage_in_bytes", "failcnt")}
    return {
        "steps": round(steps, 3),
        "input_rows": rows,
        "disk_rows": rows,
        "seconds": seconds,
        "minibatches_per_s": steps / seconds,
        "disk_read_bytes": read_bytes() - before,
        "memory_without_features_bytes": without,
        "cgroup_limit_bytes": limit,
        "cgroup_max_usage_bytes": cg["max_usage_in_bytes"],
        "cgroup_limit_hits": cg["failcnt"],
        "loader_peak_rss_bytes": status_bytes("self", "VmHWM"),
    }


def _take(feat: np.ndarray, ids: np.ndarray, out: np.ndarray, deadline: float, chunk: int = 8192) -> int:
    """``out[:n] = feat[ids[:n]]`` a chunk of ids at a time until done or past ``deadline`` (a
    step can take minutes when the page cache thrashes); returns ``n``."""
    for lo in range(0, len(ids), chunk):
        if time.perf_counter() > deadline:
            return lo
        part = ids[lo : lo + chunk]
        np.take(feat, part, axis=0, out=out[lo : lo + len(part)], mode="clip")
    return len(ids)


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--root", type=Path, required=True, help="partition root")
    p.add_argument("--flat", type=Path, required=True, help="the features in gid order, raw")
    p.add_argument("--cgroup", type=Path, required=True, help="the memory cgroup to join (made by the parent)")
    p.add_argument("--budget-bytes", type=int, required=True)
    p.add_argument("--steps", type=int, default=0, help="stop after this many steps (0: the epoch)")
    p.add_argument("--max-seconds", type=float, default=120.0, help="stop here, within a step (fractional steps)")
    p.add_argument("--job", required=True, help="JobSpec fields as JSON")
    print(json.dumps(_child(p.parse_args(argv))), flush=True)
    return 0


if __name__ == "__main__":
    sys.exit(main())
