"""``graphfeed bench flood``: clients that open minibatch streams with a shared-memory offer and
never read them, beside a trainer that reads its epochs through the same loader and directory.

What used to happen (issue 15): one such client filled a 128 MiB tmpfs within a second and every
other trainer's stream failed RESOURCE_EXHAUSTED until it went away. With per-client quotas
(``common/shm/quota.py``) and stream slots (``loader/servicer.StreamSlots``) a flooder holds at
most its quota unclaimed, its streams beyond ``max_streams_per_client`` are refused, and the
trainer's epochs complete (partly inline when the directory runs low).

Real processes: Cora in 2 partitions, graph-stores, sampler and loader from
:class:`graphfeed.cluster.LocalCluster`, each flooder its own process (its own offer, so its own
client). As root the shared directory is a fresh tmpfs of ``--tmpfs-mb`` (mounted and unmounted
here); otherwise give ``--shm-dir``. Reports epochs completed and failed, the directory's peak
use, and the loader's refusals by reason (``graphfeed_rpc_shm_declined_total``); writes JSON and
a markdown table.
"""

from __future__ import annotations

import argparse
import os
import shutil
import subprocess
import sys
import threading
import time
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path

from graphfeed.bench import harness
from graphfeed.bench.scrape import samples

JOB = {"fanouts": [10, 10], "batch_size": 128}


def flooder(address: str, shm_dir: str, streams: int) -> None:
    """Opens ``streams`` minibatch streams with an offer and never reads them (until killed)."""
    import grpc

    from graphfeed.common.shm import ShmOffer
    from graphfeed.loader.v1 import loader_pb2 as pb
    from graphfeed.loader.v1 import loader_pb2_grpc as pb_grpc
    from graphfeed.trainer.job import job_spec, job_to_proto

    offer = ShmOffer.create(Path(shm_dir))
    if offer is None:
        raise SystemExit(f"flooder: {shm_dir} is not a writable directory")
    stub = pb_grpc.LoaderServiceStub(grpc.insecure_channel(address))
    calls = []
    for i in range(streams):
        job = job_to_proto(job_spec("train", seed=i, job_id=f"flood-{os.getpid()}-{i}", **JOB))  # type: ignore[arg-type]
        calls.append(stub.StreamMinibatches(pb.StreamMinibatchesRequest(job=job), metadata=offer.metadata()))
    print(f"flooder {os.getpid()}: {streams} streams open", flush=True)
    time.sleep(3600)


@contextmanager
def shared_dir(args: argparse.Namespace) -> Iterator[Path]:
    """The shared-memory directory: ``--shm-dir``, or a fresh tmpfs of ``--tmpfs-mb`` (root)."""
    if args.shm_dir:
        yield Path(args.shm_dir)
        return
    if os.geteuid() != 0:
        raise SystemExit("bench flood: mounting a small tmpfs needs root; give --shm-dir instead")
    mount = args.workdir / "shm"
    mount.mkdir(parents=True, exist_ok=True)
    subprocess.run(["/bin/mount", "-t", "tmpfs", "-o", f"size={args.tmpfs_mb}m", "tmpfs", str(mount)], check=True)
    try:
        yield mount
    finally:
        subprocess.run(["/bin/umount", "-l", str(mount)], check=False)


def epochs(address: str, shm_dir: Path, n: int) -> list[str]:
    """``n`` epochs of a trainer through the loader: "ok <minibatches>" or the error, per epoch."""
    from graphfeed.trainer.dataloader import RemoteDataLoader

    outcome = []
    for epoch in range(n):
        loader = RemoteDataLoader(
            address,
            "train",
            shm_dir=str(shm_dir),
            seed=epoch,
            job_id="reader",
            resume_s=0,
            **JOB,  # type: ignore[arg-type]
        )
        try:
            outcome.append(f"ok {sum(1 for _ in loader)}")
        except Exception as exc:  # noqa: BLE001 - reported, the next epoch tries again
            outcome.append(f"{type(exc).__name__}: {str(exc)[:160]}")
        finally:
            loader.close()
    return outcome


def declined(metrics_address: str | None) -> dict[str, float]:
    """The loader's refusals of shared memory by reason, from its /metrics."""
    if metrics_address is None:
        return {}
    out: dict[str, float] = {}
    for s in samples(metrics_address, "graphfeed_rpc_shm_declined_total"):
        out[s.labels["reason"]] = out.get(s.labels["reason"], 0.0) + s.value
    return out


def run(args: argparse.Namespace) -> int:
    from graphfeed.cluster import LocalCluster

    data = harness.dataset(args.workdir, "cora")
    with shared_dir(args) as shm:
        loader_args = ["--shm-client-quota-mb", str(args.quota_mb)] if args.quota_mb else []
        cluster = LocalCluster.start(data, args.workdir / "logs", loader_args=loader_args, shm_dir=str(shm))
        floods: list[subprocess.Popen] = []
        peak, stop = [0], threading.Event()

        def watch() -> None:
            while not stop.is_set():
                peak[0] = max(peak[0], shutil.disk_usage(shm).used)
                time.sleep(0.01)

        try:
            address = cluster.loader.address if cluster.loader else ""
            command = [sys.executable, "-m", "graphfeed.bench.flood", address, str(shm), str(args.streams)]
            floods = [subprocess.Popen(command) for _ in range(args.flooders)]
            threading.Thread(target=watch, daemon=True).start()
            time.sleep(args.settle_s)  # the flooders' streams run until they block on what they sent
            held_mb = peak[0] / 2**20  # the most the flood alone held
            t0 = time.perf_counter()
            outcome = epochs(address, shm, args.epochs)
            took = time.perf_counter() - t0
            refusals = declined(cluster.loader.metrics_address if cluster.loader else None)
        finally:
            stop.set()
            for proc in floods:
                proc.kill()
                proc.wait()
            cluster.stop()
    size_mb = args.tmpfs_mb if not args.shm_dir else shutil.disk_usage(args.shm_dir).total / 2**20
    result = {
        "flooders": args.flooders,
        "streams_each": args.streams,
        "dir_mb": size_mb,
        "quota_mb": args.quota_mb,
        "held_by_flooders_mb": held_mb,
        "peak_mb": peak[0] / 2**20,
        "epochs": outcome,
        "epochs_s": took,
        "refused": refusals,
    }
    ok = sum(o.startswith("ok") for o in outcome)
    table = "\n".join(
        [
            (
                "| flooders x streams | directory MiB | held by flooders MiB | peak MiB | trainer epochs ok "
                "| refusals (quota / full) |"
            ),
            "|---|---:|---:|---:|---:|---|",
            (
                f"| {args.flooders} x {args.streams} | {size_mb:.0f} | {held_mb:.1f} | {peak[0] / 2**20:.1f} "
                f"| {ok} of {len(outcome)} | {refusals.get('quota', 0):.0f} / {refusals.get('full', 0):.0f} |"
            ),
        ]
    )
    harness.write(args, result, table + "\n", "flood")
    for i, o in enumerate(outcome):
        print(f"epoch {i}: {o}")
    return 0 if ok == len(outcome) else 1


def register(sub: argparse._SubParsersAction) -> None:
    help = "clients that never read their streams, beside a trainer that does"
    p = harness.register(sub, "flood", __doc__, help, add_arguments, run, workdir=Path("runs/bench-flood"))
    p.set_defaults(out=Path("runs/bench-flood/flood.json"))


def add_arguments(p: argparse.ArgumentParser) -> None:
    p.add_argument(
        "--shm-dir", default="", help="shared-memory directory to use (default: mount a fresh tmpfs, root only)"
    )
    p.add_argument("--tmpfs-mb", type=int, default=128, help="size of the tmpfs to mount (default 128)")
    p.add_argument("--flooders", type=int, default=3, help="flooding processes (default 3)")
    p.add_argument("--streams", type=int, default=17, help="streams each flooder opens (default 17)")
    p.add_argument(
        "--quota-mb", type=float, default=0, help="the loader's --shm-client-quota-mb (default 0: its default)"
    )
    p.add_argument("--epochs", type=int, default=3, help="the reading trainer's epochs (default 3)")
    p.add_argument("--settle-s", type=float, default=5.0, help="seconds the flood runs before the trainer starts")


if __name__ == "__main__":  # a flooder process: python -m graphfeed.bench.flood ADDRESS SHM_DIR STREAMS
    flooder(sys.argv[1], sys.argv[2], int(sys.argv[3]))
