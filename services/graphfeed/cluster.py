"""Starts graphfeed services as local processes on loopback (the embedded default).

Used by ``graphfeed demo`` and by integration tests that need real processes (crash and
resume). Each service is ``python -m graphfeed serve <service> ... --port 0``; the bound
ports are read from the READY line it prints, so many clusters can run side by side.

A :class:`Placement` puts the graph-stores elsewhere, e.g. in a network namespace joined by
a shaped link (``graphfeed.bench.links``), to emulate graph-stores on other machines.
"""

from __future__ import annotations

import logging
import os
import signal
import subprocess
import sys
import threading
import time
from dataclasses import dataclass, field
from pathlib import Path
from typing import NoReturn

from graphfeed.common.partition import GraphManifest, part_dir_name
from graphfeed.common.readiness import PeerNotReady, wait_serving
from graphfeed.common.service import parse_ready_line

log = logging.getLogger(__name__)


@dataclass(frozen=True)
class Placement:
    """Where a service process runs and the address it binds, advertises and is dialled on.

    Attributes:
        prefix: command words run in front of ``python -m graphfeed serve ...``, e.g.
            ``("ip", "netns", "exec", "gf-1-0")`` to start it in that network namespace.
        host: the address the gRPC server and ``/metrics`` bind to; it must be reachable
            from where the clients run (the READY line carries it).
    """

    prefix: tuple[str, ...] = ()
    host: str = "127.0.0.1"


LOOPBACK = Placement()


@dataclass
class ServiceProcess:
    """One running service process; stderr goes to ``log_path``."""

    name: str
    proc: subprocess.Popen
    address: str
    metrics_address: str | None
    log_path: Path
    health_address: str | None = None  # health on its own threads (--health-port)

    def stop(self, timeout_s: float = 15.0) -> int:
        """SIGTERM (graceful shutdown), then SIGKILL after ``timeout_s``; returns the exit code."""
        if self.proc.poll() is None:
            self.proc.send_signal(signal.SIGTERM)
            try:
                self.proc.wait(timeout_s)
            except subprocess.TimeoutExpired:
                log.warning("%s did not stop within %.0fs; killing", self.name, timeout_s)
                self.proc.kill()
                self.proc.wait()
        return self.proc.returncode


def start_service(
    name: str,
    args: list[str],
    log_dir: Path,
    timeout_s: float = 120.0,
    env: dict | None = None,
    placement: Placement = LOOPBACK,
    serving: bool = True,
) -> ServiceProcess:
    """Starts ``graphfeed serve <args>`` where ``placement`` says and waits for its READY line
    (it listens) and, with ``serving``, for its health to be SERVING (its peers answered),
    all within ``timeout_s``; raises RuntimeError with its log if it dies or times out first."""
    log_dir.mkdir(parents=True, exist_ok=True)
    log_path = log_dir / f"{name}.log"
    where = [] if placement == LOOPBACK else ["--host", placement.host, "--metrics-host", placement.host]
    # Every port not given in ``args`` is picked by the service (read back from its READY line).
    ports = [word for flag in ("--port", "--metrics-port", "--health-port") if flag not in args for word in (flag, "0")]
    cmd = [*placement.prefix, sys.executable, "-m", "graphfeed", "serve", *args, *where, *ports]
    err = open(log_path, "wb")  # noqa: SIM115 - owned by the child for its lifetime
    proc = subprocess.Popen(cmd, stdout=subprocess.PIPE, stderr=err, env={**os.environ, **(env or {})}, text=True)
    ready: dict[str, str] = {}
    got = threading.Event()

    stdout = proc.stdout
    if stdout is None:  # cannot happen with stdout=PIPE; says so to the type checker
        raise RuntimeError(f"{name}: the child's stdout is not a pipe")

    def read_stdout() -> None:
        for line in stdout:  # keeps draining so the child never blocks on a full pipe
            parsed = parse_ready_line(line.strip())
            if parsed and not got.is_set():
                ready.update(parsed)
                got.set()

    threading.Thread(target=read_stdout, daemon=True, name=f"{name}-stdout").start()
    deadline = time.monotonic() + timeout_s
    while not got.wait(0.05):
        if proc.poll() is not None or time.monotonic() > deadline:
            _fail(name, proc, log_path, "failed to start")
    if serving:
        try:
            wait_serving(ready["grpc"], name, timeout_s=max(1.0, deadline - time.monotonic()))
        except PeerNotReady as exc:
            _fail(name, proc, log_path, f"never became SERVING ({exc})")
    return ServiceProcess(name, proc, ready["grpc"], ready.get("metrics"), log_path, ready.get("health"))


def _fail(name: str, proc: subprocess.Popen, log_path: Path, what: str) -> NoReturn:
    proc.kill()
    proc.wait()
    tail = log_path.read_text(errors="replace")[-3000:]
    raise RuntimeError(f"{name} {what} (exit {proc.poll()}); log {log_path}:\n{tail}")


@dataclass
class LocalCluster:
    """graph-store ×P, one sampler and one loader as local processes."""

    graph_stores: list[ServiceProcess] = field(default_factory=list)
    sampler: ServiceProcess | None = None
    loader: ServiceProcess | None = None

    @classmethod
    def start(
        cls,
        data_dir: Path,
        log_dir: Path,
        loader_args: list[str] | None = None,
        shm_dir: str | None = None,
        store_placement: Placement = LOOPBACK,
        embeddings_dir: Path | None = None,
    ) -> LocalCluster:
        """Starts one graph-store per partition of ``data_dir``, a sampler and a loader.

        ``shm_dir`` overrides every service's shared-memory directory ("" disables shared
        memory: every tensor travels inline on the wire); None keeps their default.
        ``store_placement`` starts the graph-stores elsewhere (sampler and loader stay here);
        a graph-store placed elsewhere stands for another machine, so it never answers in
        shared memory. ``embeddings_dir``: graph-store ``p`` keeps its embedding tables in
        ``<embeddings_dir>/<partition dir name>`` (None: in its partition directory), so a run
        can leave a read-only dataset untouched.
        """
        manifest = GraphManifest.load(data_dir)
        common = [] if shm_dir is None else ["--shm-dir", shm_dir]
        store_shm = common if store_placement == LOOPBACK else ["--shm-dir", ""]
        cluster = cls()
        try:
            for p in range(manifest.num_partitions):
                part = str(Path(data_dir) / part_dir_name(p))
                args = ["graph-store", "--part-dir", part, *store_shm]
                if embeddings_dir is not None:
                    args += ["--embeddings-dir", str(Path(embeddings_dir) / part_dir_name(p))]
                cluster.graph_stores.append(start_service(f"graph-store-{p}", args, log_dir, placement=store_placement))
            stores = [s.address for s in cluster.graph_stores]
            cluster.sampler = start_service(
                "sampler", ["sampler", "--graph-store-addresses", *stores, *common], log_dir
            )
            cluster.loader = start_service(
                "loader",
                [
                    "loader",
                    "--graph-store-addresses",
                    *stores,
                    "--sampler-address",
                    cluster.sampler.address,
                    *common,
                    *(loader_args or []),
                ],
                log_dir,
            )
        except BaseException:
            cluster.stop()
            raise
        return cluster

    @property
    def services(self) -> list[ServiceProcess]:
        return [s for s in (*self.graph_stores, self.sampler, self.loader) if s is not None]

    def stop(self) -> dict[str, int]:
        """Stops clients before servers (loader, sampler, graph-stores); returns exit codes."""
        return {s.name: s.stop() for s in reversed(self.services)}
