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
import shutil
import signal
import subprocess
import sys
import time
from pathlib import Path

from graphfeed.bench import edge_systems, harness, systems
from graphfeed.common.partition import GraphManifest

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
    harness.register(
        sub,
        "profile",
        __doc__,
        "py-spy profile of every process on the hot path",
        add_arguments,
        run,
        steps=40,
        **harness.DATASET,
    )


def add_arguments(p: argparse.ArgumentParser) -> None:
    p.add_argument(
        "--system", choices=("gf_sampler", "gf_e2e"), default="gf_e2e", help="what to drive (default gf_e2e)"
    )
    p.add_argument("--top", type=int, default=12, help="functions listed per process (default 12)")
    p.add_argument(
        "--edges",
        default="",
        metavar="RELATION",
        help="edge minibatches of this relation (both systems), as `graphfeed bench throughput --edges` runs them",
    )
    p.add_argument("--num-negatives", type=int, default=1, help="with --edges: negatives per positive (default 1)")
    p.add_argument("--cache-policy", default="none", help="the loader's cache policy (default none)")
    p.add_argument("--cache-bytes", type=int, default=0, help="the loader's cache bytes (default 0)")
    p.add_argument("--warmup", type=int, default=12, help="minibatches driven before the profilers attach (default 12)")
    p.add_argument(
        "--transport",
        choices=tuple(systems.LAYOUTS),
        default="shm",
        help="process layout, as for `graphfeed bench throughput` (default shm)",
    )


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
    spy = shutil.which("py-spy") or str(Path(sys.executable).parent / "py-spy")
    if not Path(spy).exists():
        print("py-spy not found: pip install py-spy", file=sys.stderr)
        return 2
    edges = f"-edges-{args.edges.replace(':', '.')}" if args.edges else ""
    out = args.out or Path("bench/results") / f"profile-{args.preset}{edges}-{args.system}-{args.transport}"  # a folder
    out.mkdir(parents=True, exist_ok=True)
    root = harness.ensure_dataset(args)
    loader_args = ["--cache-policy", args.cache_policy, "--cache-bytes", str(args.cache_bytes)]
    cluster = systems.Cluster.start(root, args.workdir.resolve() / "logs", loader_args, args.transport)
    spies = []
    try:
        assert cluster.sampler is not None
        shm = systems.LAYOUTS[args.transport][0]
        if args.system == "gf_sampler" and args.edges:  # the edge steps `bench throughput --edges` samples
            rows, schema = harness.edge_rows(root), GraphManifest.load(root).schema()
            fanouts = list(args.fanouts)
            drive = edge_systems.sampler_system(
                cluster.sampler.address, rows, schema, fanouts, args.batch_size, args.num_negatives, 4, shm
            )
        elif args.system == "gf_sampler":
            train = harness.load_global(root)[2].numpy()
            drive = systems.sampler_system(cluster.sampler.address, train, list(args.fanouts), args.batch_size, 4, shm)
        else:
            edge_job = edge_systems.job(args.num_negatives) if args.edges else {}
            drive = systems.loader_system(
                cluster.remote(fanouts=list(args.fanouts), batch_size=args.batch_size, **edge_job)
            )
        drive(max(1, args.warmup))  # warm-up outside the profile (pipelines fill their shm files)
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
            f"`graphfeed bench profile --preset {args.preset}{' --edges ' + args.edges if args.edges else ''} "
            f"--system {args.system} --transport {args.transport} "
            + (f"--cache-policy {args.cache_policy} --cache-bytes {args.cache_bytes} " if args.cache_bytes else "")
            + f"--steps {args.steps}`: "
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
