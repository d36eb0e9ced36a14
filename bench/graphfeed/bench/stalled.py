"""``graphfeed bench stalled``: clients that open a minibatch stream, read one message and stop
(issue 28), beside a trainer that reads its epoch through the same loader.

Real processes: Cora in 2 partitions, graph-stores, sampler and loader from
:class:`graphfeed.cluster.LocalCluster`, shared memory off (every byte inline, so what a stream
holds is in the loader's memory). The loader runs with ``--max-streams-per-client`` at least
``--clients``, so each stalled connection counts as its own client, as many hosts would: only
the loader's total of streams (``max_workers`` - 4) bounds them. Each stalled client opens its
own connection and a stream whose minibatches carry whole neighbourhoods (``fanouts -1 -1`` over
the test split: an epoch far larger than a connection's buffers), reads one message and stops.

The trainer's epoch is compared, minibatch by minibatch (a hash of the input features), with
the same job's epoch read before the stalls (exact). The loader's resident memory (``VmRSS`` of
``/proc/<pid>/status``) is taken before the stalls, while they hold their streams, and after the
loader ended them (``stream_stall_timeout_s``); its peak over the stalls is ``VmHWM`` after a
reset (``/proc/<pid>/clear_refs``), else the highest sample. The growth is compared with a bound
from the settings: every open stream at :func:`stream_bound_bytes`, at most ``max_workers - 4``
of them. Writes JSON and a markdown table.
"""

from __future__ import annotations

import argparse
import hashlib
import threading
import time
from pathlib import Path
from typing import Any

from graphfeed.bench import harness
from graphfeed.bench.disk_stores import reset_peak_rss, status_bytes

KIB = 1024
MIB = 1 << 20
TRAINER = {"fanouts": [5, 5], "batch_size": 64, "seed": 3}
STALLED_FANOUTS = [-1, -1]
SAMPLED_EDGE_BYTES = 24  # what one sampled edge of a block holds (LoaderSettings.lookahead_steps)


# --- a process's memory ---------------------------------------------------------------------


def status_kib(pid: int | str, field: str) -> int:
    """``field`` (``VmRSS``, ``VmHWM``) of ``/proc/<pid>/status``, in KiB."""
    return status_bytes(pid, field) // KIB


class RssWatch:
    """Samples ``VmRSS`` of ``pid`` every ``every_s`` while running; ``peak_kib`` is the highest
    sample, or ``VmHWM`` when :func:`~graphfeed.bench.disk_stores.reset_peak_rss` worked at
    start (then nothing between samples is lost)."""

    def __init__(self, pid: int | str, every_s: float = 0.01) -> None:
        self.pid, self.every_s = pid, every_s
        self.start_kib = status_kib(pid, "VmRSS")
        self.hwm = reset_peak_rss(pid)
        self.sampled_kib = self.start_kib
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._run, daemon=True, name="rss-watch")
        self._thread.start()

    def _run(self) -> None:
        while not self._stop.wait(self.every_s):
            self.sampled_kib = max(self.sampled_kib, status_kib(self.pid, "VmRSS"))

    def stop(self) -> int:
        """Stops sampling; the peak in KiB."""
        self._stop.set()
        self._thread.join()
        self.sampled_kib = max(self.sampled_kib, status_kib(self.pid, "VmRSS"))
        self.peak_kib = max(self.sampled_kib, status_kib(self.pid, "VmHWM") if self.hwm else 0)
        return self.peak_kib


# --- what a stream may hold -----------------------------------------------------------------


def minibatch_bound_bytes(root: Path, layers: int) -> tuple[int, int]:
    """Upper bounds on one minibatch of ``root``'s graph, whatever its seeds and fanouts: its
    features (every node's: a minibatch's input nodes are distinct) and its blocks (every edge
    in each of ``layers`` layers)."""
    import numpy as np

    from graphfeed.common.partition import GraphManifest, PartitionReader, part_dir_name

    m = GraphManifest.load(root)
    feat, edges = 0, 0
    for p in range(m.num_partitions):
        reader = PartitionReader(root / part_dir_name(p))
        feat += sum(np.asarray(reader.node_data(k)).nbytes for k in reader.manifest.node_data)
        edges += len(reader.indices)
        reader.close()
    return feat, layers * edges * SAMPLED_EDGE_BYTES


def stream_bound_bytes(feat_bytes: int, block_bytes: int, max_inflight: int, lookahead_steps: int) -> int:
    """What one open inline stream holds in the loader at most, given bounds on a minibatch's
    features and blocks: ``max_inflight`` ready minibatches, the one being gathered, the one
    being sent as tensors, as its message and as its serialized frames (4 more), and
    ``lookahead_steps`` sampled steps waiting to be gathered (blocks only)."""
    return (max_inflight + 4) * (feat_bytes + block_bytes) + lookahead_steps * block_bytes


def loader_defaults() -> tuple[int, int, int]:
    """``max_inflight``, ``lookahead_steps`` and ``max_workers`` a loader runs with by default."""
    from graphfeed.loader.config import LoaderSettings

    f = LoaderSettings.model_fields
    return f["max_inflight"].default, f["lookahead_steps"].default, f["max_workers"].default


# --- the clients ----------------------------------------------------------------------------


def epoch_hashes(address: str) -> list[str]:
    """The trainer's epoch: one hash of the input features per minibatch."""
    from graphfeed.trainer.dataloader import RemoteDataLoader

    with RemoteDataLoader(address, "train", job_id="legit", **TRAINER) as loader:  # type: ignore[arg-type]
        return [hashlib.sha256(b[2][0].srcdata["feat"].numpy().tobytes()).hexdigest() for b in loader]


def open_stalled(address: str, clients: int, split: str = "test") -> tuple[list, list, list[str]]:
    """``clients`` connections, each opening one stream and reading its first message (or
    being refused); returns the channels, the admitted calls and the refusals' details."""
    import grpc

    from graphfeed.loader.v1 import loader_pb2 as pb
    from graphfeed.loader.v1 import loader_pb2_grpc as pb_grpc
    from graphfeed.trainer.job import job_spec, job_to_proto

    channels, calls, admitted, refused = [], [], [], []
    for i in range(clients):  # opened first, all at once, then each reads one message
        ch = grpc.insecure_channel(address, options=[("grpc.use_local_subchannel_pool", 1)])
        job = job_to_proto(job_spec(split, fanouts=STALLED_FANOUTS, batch_size=64, seed=i, job_id=f"stall{i}"))
        calls.append(pb_grpc.LoaderServiceStub(ch).StreamMinibatches(pb.StreamMinibatchesRequest(job=job)))
        channels.append(ch)
    for call in calls:
        try:
            next(call)
            admitted.append(call)
        except grpc.RpcError as e:
            if e.code() != grpc.StatusCode.RESOURCE_EXHAUSTED:
                raise
            refused.append(e.details() or "")
    return channels, admitted, refused


def ended(call: Any) -> str:
    """How a stalled stream ended, once what it buffered is read: a status code name."""
    import grpc

    try:
        for _ in call:
            pass
    except grpc.RpcError as e:
        return e.code().name
    return call.code().name


# --- the probe ------------------------------------------------------------------------------


def run(args: argparse.Namespace) -> int:
    from graphfeed.cluster import LocalCluster

    data = harness.dataset(args.workdir, "cora")
    max_inflight, lookahead, default_workers = loader_defaults()
    args.max_workers = args.max_workers or default_workers
    per_client = max(args.clients, args.per_client)
    loader_args = ["--max-workers", str(args.max_workers), "--max-streams-per-client", str(per_client)]
    loader_args += ["--stream-stall-timeout-s", str(args.stall_s)]
    cluster = LocalCluster.start(data, args.workdir / "logs", loader_args=loader_args, shm_dir="")
    channels: list = []
    admitted: list = []
    try:
        assert cluster.loader is not None
        address, pid = cluster.loader.address, cluster.loader.proc.pid
        reference = epoch_hashes(address)  # also warms the loader (cache, threads)
        before = status_kib(pid, "VmRSS")
        watch = RssWatch(pid)
        t0 = time.perf_counter()
        channels, admitted, refused = open_stalled(address, args.clients)
        opened_s = time.perf_counter() - t0
        holding = status_kib(pid, "VmRSS")
        t1 = time.perf_counter()
        epoch = epoch_hashes(address)
        epoch_s = time.perf_counter() - t1
        ends = [ended(call) for call in admitted]  # returns once the loader ended each
        ended_s = time.perf_counter() - t0
        peak = watch.stop()
        time.sleep(1.0)  # the handler threads unwind
        after = status_kib(pid, "VmRSS")
        lifetime_hwm = status_kib(pid, "VmHWM")
    finally:
        for ch in channels:
            ch.close()
        cluster.stop()
    slots = args.max_workers - 4 if args.max_workers > 4 else args.max_workers
    per_stream = stream_bound_bytes(*minibatch_bound_bytes(data, len(STALLED_FANOUTS)), max_inflight, lookahead)
    bound = min(slots, len(admitted)) * per_stream
    exact = epoch == reference
    growth = (peak - before) * KIB
    result = {
        "clients": args.clients,
        "max_workers": args.max_workers,
        "stream_slots": slots,
        "stall_timeout_s": args.stall_s,
        "admitted": len(admitted),
        "refused": len(refused),
        "ends": {code: ends.count(code) for code in sorted(set(ends))},
        "epoch_exact": exact,
        "epoch_minibatches": len(epoch),
        "reference_minibatches": len(reference),
        "epoch_s": epoch_s,
        "open_s": opened_s,
        "all_ended_s": ended_s,
        "rss_before_mib": before / KIB,
        "rss_holding_mib": holding / KIB,
        "rss_peak_mib": peak / KIB,
        "peak_from_hwm": watch.hwm,
        "rss_after_mib": after / KIB,
        "hwm_lifetime_mib": lifetime_hwm / KIB,
        "growth_mib": growth / MIB,
        "bound_per_stream_mib": per_stream / MIB,
        "bound_mib": bound / MIB,
        "unbounded_mib": args.clients * per_stream / MIB,
    }
    table = "\n".join(
        [
            (
                "| stalled clients | admitted / refused | trainer epoch | epoch s | loader RSS MiB before / holding / "
                "peak / after | growth MiB | bound MiB (slots x per stream) |"
            ),
            "|---:|---|---|---:|---|---:|---:|",
            (
                f"| {args.clients} | {len(admitted)} / {len(refused)} | {'exact' if exact else 'DIFFERS'} "
                f"({len(epoch)} minibatches) | {epoch_s:.1f} | {before / KIB:.0f} / {holding / KIB:.0f} / "
                f"{peak / KIB:.0f} / {after / KIB:.0f} | {growth / MIB:.0f} | {bound / MIB:.0f} "
                f"({min(slots, len(admitted))} x {per_stream / MIB:.0f}) |"
            ),
        ]
    )
    out = harness.write(args, result, table + "\n", "stalled")
    print(table)
    print(f"stalled streams ended: {result['ends']}; all ended {ended_s:.1f}s after they opened; JSON {out}")
    return 0 if exact and growth <= bound else 1


def register(sub: argparse._SubParsersAction) -> None:
    help = "clients that read one message and stop, beside a trainer: its epoch and the loader's memory"
    harness.register(sub, "stalled", __doc__, help, add_arguments, run, workdir=Path("runs/bench-stalled"))


def add_arguments(p: argparse.ArgumentParser) -> None:
    p.add_argument("--clients", type=int, default=100, help="stalled clients, one connection each (default 100)")
    p.add_argument("--max-workers", type=int, default=0, help="the loader's --max-workers (default 0: its default)")
    p.add_argument(
        "--per-client",
        type=int,
        default=0,
        help="the loader's --max-streams-per-client (default --clients: every connection its own client)",
    )
    p.add_argument("--stall-s", type=float, default=5.0, help="the loader's --stream-stall-timeout-s (default 5)")
