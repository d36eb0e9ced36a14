"""``graphfeed bench profile``: where each process spends its time on the hot path (py-spy).

Starts the local cluster on a synthetic preset, attaches ``py-spy record`` to every service
process and to this one, drives minibatches through the sampler (``--system gf_sampler``) or
end to end (``--system gf_e2e``), and writes per process the raw collapsed stacks plus a table
of the functions with the most samples (self and inclusive, idle threads excluded).

py-spy is a development tool, not a dependency: ``pip install py-spy`` into the venv first.
"""

from __future__ import annotations

import argparse
import collections
import logging
import shutil
import signal
import subprocess
import sys
import time
from pathlib import Path

log = logging.getLogger(__name__)

# Frames that mean "this thread is waiting", not working; their samples are dropped.
_IDLE = (
    "wait (threading.py",
    "_wait_once",
    "select (selectors.py",
    "poll (",
    "get (queue.py",
    "_worker (concurrent",
    "sleep",
    "_next (grpc/_channel.py",
    "result (grpc/_channel.py",
    "next_event",
    "_serve (",
    "wait_for (threading.py",
)


def register(sub: argparse._SubParsersAction) -> None:
    p = sub.add_parser(
        "profile",
        help="py-spy profile of every process on the hot path",
        description=__doc__,
        formatter_class=argparse.RawDescriptionHelpFormatter,
    )
    p.add_argument("--preset", default="small", help="synthetic preset (default small)")
    p.add_argument("--workdir", type=Path, default=Path("runs/bench"), help="datasets and logs (default runs/bench)")
    p.add_argument(
        "--system", choices=("gf_sampler", "gf_e2e"), default="gf_e2e", help="what to drive (default gf_e2e)"
    )
    p.add_argument("--steps", type=int, default=40, help="minibatches to profile (default 40)")
    p.add_argument("--batch-size", type=int, default=1024)
    p.add_argument("--fanouts", type=int, nargs="+", default=[15, 10, 5])
    p.add_argument("--top", type=int, default=12, help="functions listed per process (default 12)")
    p.add_argument(
        "--out", type=Path, default=None, help="output folder (default bench/results/profile-<preset>-<system>)"
    )
    p.set_defaults(func=run)


def _frames(stack: str) -> list[str]:
    return stack.split(";")[1:]  # first entry is the thread


def summarize(raw: Path, top: int) -> tuple[int, list[tuple[str, int]], list[tuple[str, int]]]:
    """Busy samples, top self frames and top inclusive frames of one py-spy raw file."""
    own: collections.Counter[str] = collections.Counter()
    incl: collections.Counter[str] = collections.Counter()
    busy = 0
    for line in raw.read_text().splitlines():
        stack, _, count = line.rpartition(" ")
        frames = _frames(stack)
        if not frames or any(marker in frames[-1] for marker in _IDLE):
            continue
        n = int(count)
        busy += n
        own[frames[-1]] += n
        for f in set(frames):
            incl[f] += n
    return busy, own.most_common(top), incl.most_common(top)


def run(args: argparse.Namespace) -> int:
    from graphfeed.bench.throughput import _gf_e2e_runner, _gf_sampler_runner, ensure_dataset, load_global
    from graphfeed.cluster import LocalCluster

    spy = shutil.which("py-spy") or str(Path(sys.executable).parent / "py-spy")
    if not Path(spy).exists():
        print("py-spy not found: pip install py-spy", file=sys.stderr)
        return 2
    out = args.out or Path("bench/results") / f"profile-{args.preset}-{args.system}"
    out.mkdir(parents=True, exist_ok=True)
    root = ensure_dataset(args.workdir.resolve(), args.preset)
    cluster = LocalCluster.start(
        root, args.workdir.resolve() / "logs", ["--cache-policy", "none", "--cache-bytes", "0"]
    )
    spies = []
    try:
        assert cluster.sampler is not None and cluster.loader is not None, "LocalCluster.start starts both"
        if args.system == "gf_sampler":
            _g, _f, train = load_global(root)
            drive = _gf_sampler_runner(
                cluster.sampler.address, train.numpy(), list(args.fanouts), args.batch_size, 4, "/dev/shm"
            )
        else:
            drive = _gf_e2e_runner(cluster.loader.address, list(args.fanouts), args.batch_size, "/dev/shm")
        drive(2)  # warm-up outside the profile
        procs = {s.name: s.proc.pid for s in cluster.services}
        procs["client"] = __import__("os").getpid()
        for name, pid in procs.items():
            cmd = [
                spy,
                "record",
                "--pid",
                str(pid),
                "--rate",
                "200",
                "--format",
                "raw",
                "--threads",
                "--nonblocking",
                "--output",
                str(out / f"{name}.txt"),
            ]
            spies.append(subprocess.Popen(cmd, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL))
        time.sleep(1.0)
        t0 = time.perf_counter()
        drive(args.steps)
        seconds = time.perf_counter() - t0
    finally:
        for s in spies:
            s.send_signal(signal.SIGINT)
        for s in spies:
            s.wait(30)
        cluster.stop()
    lines = [
        (
            f"`graphfeed bench profile --preset {args.preset} --system {args.system} --steps {args.steps}`: "
            f"{args.steps / seconds:.2f} minibatches/s while profiled (200 Hz)"
        ),
        "",
    ]
    for name in procs:
        raw = out / f"{name}.txt"
        if not raw.exists():
            continue
        busy, own, incl = summarize(raw, args.top)
        per_mb = busy / 200 / args.steps
        lines += [
            f"### {name}: {per_mb * 1000:.0f} ms busy per minibatch (all threads)",
            "",
            "| self % | function | | incl % | function |",
            "|---:|---|---|---:|---|",
        ]
        for (f1, n1), (f2, n2) in zip(own, incl):
            lines.append(f"| {100 * n1 / max(busy, 1):.1f} | `{f1}` | | {100 * n2 / max(busy, 1):.1f} | `{f2}` |")
        lines.append("")
    (out / "summary.md").write_text("\n".join(lines))
    print("\n".join(lines))
    print(f"wrote {out}")
    return 0
