"""The processes and systems of the benchmarks: a graphfeed cluster in a named layout, helper
processes of the benchmarks themselves, and the systems a run times (each ``run(steps) ->
sampled edges``), in-process DGL among them.

Layouts (``--transport`` of ``bench throughput``), every service a local process
(:func:`graphfeed.cluster.start_service`):

* ``shm``: every hop on this host moves its tensors through shared memory (gRPC carries references);
* ``kubernetes``: graph-stores and sampler over gRPC only (``--shm-dir ""``: pods of their own),
  the loader a sidecar of the trainer, handing it minibatches through shared memory;
* ``grpc``: everything inline on the wire;

and the embedded loader (:meth:`Cluster.embedded`): a loader in the trainer's process over the
remote graph-stores and sampler.
"""

from __future__ import annotations

import socket
import subprocess
import sys
import tempfile
import threading
import time
from collections.abc import Callable, Iterable
from dataclasses import dataclass, field
from pathlib import Path
from typing import IO, Any

import numpy as np

from graphfeed.cluster import LOOPBACK, LocalCluster, Placement, ServiceProcess, start_service
from graphfeed.common.partition import GraphManifest, part_dir_name
from graphfeed.common.service import parse_ready_line

SHM = "/dev/shm"
# layout -> (shared-memory dir of graph-stores and sampler, of loader and trainer); "": none
LAYOUTS: dict[str, tuple[str, str]] = {"shm": (SHM, SHM), "kubernetes": ("", SHM), "grpc": ("", "")}
System = Callable[[int], Any]  # run(steps) -> sampled edges, or a runs.Run it measured itself


@dataclass
class Cluster(LocalCluster):
    """graph-store ×P, a sampler and loaders as local processes in one of :data:`LAYOUTS`.

    Start with :meth:`start`; use as a context manager or call :meth:`stop`.
    """

    log_dir: Path = Path()
    layout: str = "shm"
    loaders: list[ServiceProcess] = field(default_factory=list)  # besides ``loader``

    @classmethod
    def start(  # type: ignore[override]  # a layout instead of LocalCluster's shm_dir
        cls,
        root: Path,
        log_dir: Path,
        loader_args: Iterable[str] = (),
        layout: str = "shm",
        placement: Placement = LOOPBACK,
    ) -> Cluster:
        """One graph-store per partition of ``root`` (where ``placement`` says: elsewhere is
        another machine, which never answers in shared memory), a sampler and a loader."""
        back = LAYOUTS[layout][0] if placement == LOOPBACK else ""
        cluster = cls(log_dir=log_dir, layout=layout)
        try:
            for p in range(GraphManifest.load(root).num_partitions):
                argv = ["graph-store", "--part-dir", str(root / part_dir_name(p)), "--shm-dir", back]
                cluster.graph_stores.append(start_service(f"graph-store-{p}", argv, log_dir, placement=placement))
            argv = ["sampler", "--graph-store-addresses", *cluster.store_addresses, "--shm-dir", LAYOUTS[layout][0]]
            cluster.sampler = start_service("sampler", argv, log_dir)
            cluster.loader = cluster.start_loader("loader", loader_args)
        except BaseException:
            cluster.stop()
            raise
        return cluster

    def __enter__(self) -> Cluster:
        return self

    def __exit__(self, *exc: object) -> None:
        self.stop()

    @property
    def services(self) -> list[ServiceProcess]:
        return [*super().services, *self.loaders]

    @property
    def store_addresses(self) -> list[str]:
        return [s.address for s in self.graph_stores]

    @property
    def shm_dir(self) -> str:
        """The trainer's shared-memory directory in this layout ("": none)."""
        return LAYOUTS[self.layout][1]

    def start_loader(self, name: str, loader_args: Iterable[str] = ()) -> ServiceProcess:
        """Another loader service over the same graph-stores and sampler (stopped with the cluster)."""
        assert self.sampler is not None, "started after the sampler"
        argv = ["loader", "--graph-store-addresses", *self.store_addresses, "--sampler-address", self.sampler.address]
        loader = start_service(name, [*argv, "--shm-dir", self.shm_dir, *loader_args], self.log_dir)
        if self.loader is not None:
            self.loaders.append(loader)
        return loader

    def replace_loader(self, name: str, loader_args: Iterable[str] = ()) -> ServiceProcess:
        """Stops the loader and starts a fresh one (an empty cache) in its place."""
        assert self.loader is not None
        self.loader.stop()
        self.loader = None
        self.loader = self.start_loader(name, loader_args)
        return self.loader

    def remote(self, loader: ServiceProcess | None = None, **job: Any) -> Any:
        """A ``RemoteDataLoader`` of ``job`` (``fanouts``, ``batch_size``, ...) reading ``loader``
        (default the cluster's) as a trainer in this layout does."""
        from graphfeed.trainer.dataloader import RemoteDataLoader

        address = (loader or self.loader).address  # type: ignore[union-attr]
        return RemoteDataLoader(address, "train", shm_dir=self.shm_dir, **job)

    def embedded(self, cache_policy: str = "none", cache_bytes: int = 0, **job: Any) -> Any:
        """An ``EmbeddedDataLoader``: a loader in this process over the graph-stores and the sampler."""
        from graphfeed.graph_store.partitions import RemotePartitionSet
        from graphfeed.loader.core import Loader
        from graphfeed.sampler.client import SamplerClient
        from graphfeed.trainer.dataloader import EmbeddedDataLoader

        shm = LAYOUTS[self.layout][0] or None
        assert self.sampler is not None
        partitions = RemotePartitionSet(self.store_addresses, shm_dir=shm)
        sampler = SamplerClient(self.sampler.address, shm_dir=shm)
        core = Loader(partitions, sampler, cache_policy=cache_policy, cache_bytes=cache_bytes)
        return EmbeddedDataLoader(core, "train", **job)


# --- the benchmarks' own helper processes -----------------------------------------------------


def free_port() -> int:
    """A TCP port free now on 127.0.0.1 (for a process that must bind the same one again)."""
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


@dataclass
class Child:
    """``python -m <module> ...`` (behind ``prefix``, e.g. a network namespace's ``ip netns
    exec``) that prints a ``GRAPHFEED_READY ... key=host:port`` line; stderr to a file.

    Use :meth:`spawn`; :meth:`stop` closes its stdin (a server of ``bench link`` exits on
    that) and terminates it.
    """

    name: str
    proc: subprocess.Popen
    stderr: IO[bytes]
    key: str = "grpc"  # the READY line's field that holds its address
    ready: dict[str, str] = field(default_factory=dict)
    got: threading.Event = field(default_factory=threading.Event)

    @classmethod
    def spawn(cls, name: str, module_args: list[str], prefix: Iterable[str] = (), key: str = "grpc") -> Child:
        """Starts ``python -m <module_args>`` behind ``prefix``; :meth:`wait_ready` awaits it."""
        err = tempfile.TemporaryFile()  # noqa: SIM115 - a file, not a pipe: the child never blocks on it
        cmd = [*prefix, sys.executable, "-m", *module_args]
        proc = subprocess.Popen(cmd, stdin=subprocess.PIPE, stdout=subprocess.PIPE, stderr=err, text=True)
        child = cls(name, proc, err, key)
        threading.Thread(target=child._read_stdout, daemon=True, name=f"{name}-stdout").start()
        return child

    def _read_stdout(self) -> None:
        assert self.proc.stdout is not None  # stdout=PIPE
        for line in self.proc.stdout:  # keeps draining so the child never blocks on a full pipe
            parsed = parse_ready_line(line.strip())
            if parsed and not self.got.is_set():
                self.ready.update(parsed)
                self.got.set()

    @property
    def address(self) -> str:
        return self.ready[self.key]

    def wait_ready(self, timeout_s: float = 60.0) -> str:
        """The address its READY line gives (under :attr:`key`); RuntimeError (with its stderr) if it
        died or did not get there within ``timeout_s``."""
        deadline = time.monotonic() + timeout_s
        while not self.got.wait(0.05):
            if self.proc.poll() is not None or time.monotonic() > deadline:
                self.proc.kill()
                raise RuntimeError(f"{self.name} failed to start (exit {self.proc.wait()}):\n{self.tail()}")
        if self.key not in self.ready:
            raise RuntimeError(f"{self.name} is ready without {self.key}=: {self.ready}\n{self.tail()}")
        return self.address

    def cpu_seconds(self) -> float:
        """User + system CPU seconds of the process so far (all its threads)."""
        import psutil

        t = psutil.Process(self.proc.pid).cpu_times()
        return t.user + t.system

    def stop(self, timeout_s: float = 10.0, check: bool = False) -> int:
        """Closes its stdin (a server of ``bench link`` exits then), terminates it if it is
        still there after a second, kills it after ``timeout_s``; returns the exit code. With
        ``check``, RuntimeError with its stderr where it exited non-zero by itself."""
        if self.proc.poll() is None:
            assert self.proc.stdin is not None  # stdin=PIPE
            self.proc.stdin.close()
            try:
                self.proc.wait(1.0)
            except subprocess.TimeoutExpired:
                self.proc.terminate()
                try:
                    self.proc.wait(timeout_s)
                except subprocess.TimeoutExpired:
                    self.proc.kill()
                    self.proc.wait()
                return self.proc.returncode
        if check and self.proc.returncode != 0:
            raise RuntimeError(f"{self.name} exited with {self.proc.returncode}:\n{self.tail()}")
        return self.proc.returncode

    def tail(self) -> str:
        self.stderr.seek(0)
        return self.stderr.read().decode(errors="replace")[-3000:]


# --- systems: run(steps) -> sampled edges ------------------------------------------------------


def steady(epoch_iter: Callable[[int], Iterable], per_batch: Callable[[Any], object] | None = None) -> System:
    """``run(steps) -> sampled edges``: ``steps`` minibatches of a new epoch (``epoch_iter(e)``
    starts epoch ``e``; node minibatches ``(input_nodes, output_nodes, blocks)`` or edge ones
    ``(input_nodes, pair_graph, neg_pair_graph, blocks)``), its stream closed at the end of the
    run. A stream left open would keep working ahead (its look-ahead window) while the other
    systems run, charging them its CPU and the link its bytes; closed, a run pays for its own
    look-ahead, partly thrown away, so runs should be much longer than the window (``--steps``)."""
    epoch = [0]

    def run(steps: int) -> int:
        epoch[0] += 1
        it = iter(epoch_iter(epoch[0]))
        edges = 0
        try:
            for _ in range(steps):
                batch = next(it)  # (input_nodes, output_nodes, blocks) or an edge job's 4-tuple
                input_nodes, blocks = batch[0], batch[-1]
                edges += sum(b.num_edges() for b in blocks)
                if per_batch is not None:
                    per_batch(input_nodes)
        finally:
            close = getattr(it, "close", None)
            if close is not None:
                close()  # a graphfeed stream: cancelled now, not when collected
        return edges

    return run


def loader_system(loader: Any) -> System:
    """A graphfeed data loader (``RemoteDataLoader``, ``EmbeddedDataLoader``) as a system."""

    def epoch(e: int) -> Any:
        loader.set_epoch(e)
        return loader

    return steady(epoch)


def dgl_system(
    g: Any, feat: Any, train: Any, fanouts: list[int], batch_size: int, gather: bool, threads: int = 0
) -> System:
    """In-process DGL: ``NeighborSampler`` + ``DataLoader`` (+ ``feat[input_nodes]`` with
    ``gather``; per type on a heterograph, ``feat`` and ``train`` then ``{ntype: ...}``), on
    ``threads`` torch/OMP threads during its runs (0: as they are)."""
    import dgl
    import torch

    sampler = dgl.dataloading.NeighborSampler(fanouts)
    loader = dgl.dataloading.DataLoader(g, train, sampler, batch_size=batch_size, shuffle=True, drop_last=False)

    def gather_rows(input_nodes: Any) -> object:
        if isinstance(feat, dict):  # a heterograph: each type's features of its input nodes
            return {t: table[input_nodes[t]] for t, table in feat.items() if t in input_nodes}
        return feat[input_nodes]

    run = steady(lambda _epoch: loader, gather_rows if gather else None)
    if not threads:
        return run

    def pinned(steps: int) -> int:
        previous = torch.get_num_threads()
        torch.set_num_threads(threads)
        try:
            return run(steps)
        finally:
            torch.set_num_threads(previous)

    return pinned


def sampler_system(
    address: str, train: np.ndarray, fanouts: list[int], batch_size: int, inflight: int, shm_dir: str | None
) -> System:
    """Blocks from the sampler service into this process, ``inflight`` calls outstanding (as the
    loader's look-ahead keeps them), taken in step order."""
    from concurrent.futures import ThreadPoolExecutor

    from graphfeed.sampler.client import SamplerClient

    client = SamplerClient(address, shm_dir=shm_dir or None)
    pool = ThreadPoolExecutor(max_workers=inflight, thread_name_prefix="bench-sample")
    epoch = [0]

    def run(steps: int) -> int:
        epoch[0] += 1
        perm = np.random.default_rng(epoch[0]).permutation(train)

        def call(s: int) -> Any:
            seeds = perm[s * batch_size : (s + 1) * batch_size]
            return pool.submit(client.sample, seeds, fanouts, False, 0, epoch[0], s)

        calls = {s: call(s) for s in range(min(inflight, steps))}  # a step's entry is dropped once taken
        edges = 0
        for step in range(steps):
            sb = calls.pop(step).result()
            if step + inflight < steps:
                calls[step + inflight] = call(step + inflight)
            edges += sb.num_sampled_edges
        return edges

    return run
