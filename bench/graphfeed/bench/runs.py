"""Same-run comparisons: systems alternated run by run, each run metered (CPU seconds per
process, bytes per RPC on the servers' wires and through shared memory), summarized per system
(median and mean over the repeats) and as ratios between systems of the same run."""

from __future__ import annotations

import logging
import statistics
import time
from collections.abc import Callable, Iterable
from dataclasses import asdict, dataclass, field
from typing import Any

from graphfeed.bench.scrape import samples

log = logging.getLogger(__name__)

# metric -> how its bytes travelled
_BYTES = {
    "graphfeed_rpc_response_bytes_total": "wire",
    "graphfeed_rpc_request_bytes_total": "wire",
    "graphfeed_rpc_response_shm_bytes_total": "shm",
}


@dataclass
class Run:
    """One timed run of one system."""

    system: str
    minibatches: int
    seconds: float
    sampled_edges: int
    # bytes by "<process> <Method> <wire|shm>" during the run: gRPC request + response bytes
    # on the wire, and response tensor bytes sent through shared memory
    traffic: dict[str, int] = field(default_factory=dict)
    cpu_seconds: dict[str, float] = field(default_factory=dict)  # by process

    @property
    def wire_bytes(self) -> int:
        return sum(v for k, v in self.traffic.items() if k.endswith(" wire"))

    @property
    def minibatches_per_s(self) -> float:
        return self.minibatches / self.seconds


class Meter:
    """CPU seconds of this process ("client") and of service processes, and the bytes their
    servers counted (their ``/metrics``)."""

    def __init__(self, services: Iterable[Any] = ()) -> None:  # graphfeed.cluster.ServiceProcess
        import psutil

        self.procs = {"client": psutil.Process()}
        self.metrics: list[tuple[str, str]] = []
        for s in services:
            self.add(s.name, s)

    def add(self, name: str, service: Any) -> None:
        """Also meters ``service`` (a ``ServiceProcess``) as ``name``."""
        import psutil

        self.procs[name] = psutil.Process(service.proc.pid)
        if service.metrics_address:
            self.metrics.append((name, service.metrics_address))

    def _cpu(self) -> dict[str, float]:
        return {k: sum(p.cpu_times()[:2]) for k, p in self.procs.items()}

    def _bytes(self) -> dict[str, float]:
        out: dict[str, float] = {}
        for proc, address in self.metrics:
            for s in samples(address, *_BYTES):
                key = f"{proc} {s.labels.get('method', '')} {_BYTES[s.name]}"
                out[key] = out.get(key, 0.0) + s.value
        return out

    def start(self) -> tuple[dict[str, float], dict[str, float], float]:
        return self._cpu(), self._bytes(), time.perf_counter()

    def stop(self, system: str, started: tuple, minibatches: int, edges: int) -> Run:
        seconds = time.perf_counter() - started[2]
        cpu = {k: v - started[0][k] for k, v in self._cpu().items()}
        before = started[1]
        traffic = {k: int(v - before.get(k, 0.0)) for k, v in self._bytes().items() if v - before.get(k, 0.0) > 0}
        return Run(system, minibatches, seconds, edges, traffic, cpu)


def alternate(
    systems: dict[str, Callable[[int], Any]], meter: Meter, steps: int, repeats: int, warmup: int = 2
) -> list[Run]:
    """Warms every system up (``warmup`` steps each, untimed), then runs each ``repeats`` times,
    the order reversed every other repeat so that drift on a shared machine hits all alike. A
    system returns its sampled edges, or a :class:`Run` it measured itself (DistDGL: its own
    processes)."""
    for fn in systems.values():  # imports, connections, caches, pipelines' reusable buffers
        fn(max(1, warmup))
    runs: list[Run] = []
    names = list(systems)
    for r in range(repeats):
        for name in names if r % 2 == 0 else names[::-1]:
            started = meter.start()
            got = systems[name](steps)
            runs.append(
                Run(**{**asdict(got), "system": name})
                if isinstance(got, Run)
                else meter.stop(name, started, steps, got)
            )
            log.info("repeat %d %-18s %6.2f minibatches/s", r, name, runs[-1].minibatches_per_s)
    return runs


def summarize(runs: list[Run], order: Iterable[str] | None = None) -> dict[str, dict[str, Any]]:
    """Per system (in ``order``, default as first run): minibatches/s median and mean over the
    runs, sampled edges/s, bytes and CPU seconds per minibatch (by RPC, by process)."""
    systems: dict[str, dict[str, Any]] = {}
    for name in order or dict.fromkeys(r.system for r in runs):
        rs = [r for r in runs if r.system == name]
        if not rs:
            continue
        mb = sum(r.minibatches for r in rs)
        procs = sorted({k for r in rs for k in r.cpu_seconds})
        routes = sorted({k for r in rs for k in r.traffic})
        rates = [r.minibatches_per_s for r in rs]
        systems[name] = {
            "minibatches_per_s": statistics.median(rates),
            "mean_minibatches_per_s": statistics.mean(rates),
            "runs_minibatches_per_s": rates,
            "sampled_edges_per_s": statistics.median(r.sampled_edges / r.seconds for r in rs),
            "wire_bytes_per_minibatch": sum(r.wire_bytes for r in rs) / mb,
            "shm_bytes_per_minibatch": sum(r.traffic.get(k, 0) for r in rs for k in routes if k.endswith(" shm")) / mb,
            # "<server process> <RPC> <wire|shm>": graph-store-<p> is partition p
            "bytes_per_minibatch_by_rpc": {k: sum(r.traffic.get(k, 0) for r in rs) / mb for k in routes},
            "cpu_seconds_per_minibatch": {k: sum(r.cpu_seconds.get(k, 0.0) for r in rs) / mb for k in procs},
        }
    return systems


def ratio(systems: dict[str, dict[str, Any]], a: str, b: str) -> float | None:
    """Median minibatches/s of ``a`` over ``b`` (None unless both ran)."""
    if a not in systems or b not in systems:
        return None
    return systems[a]["minibatches_per_s"] / systems[b]["minibatches_per_s"]


def table(systems: dict[str, dict[str, Any]], extra: dict[str, Callable[[str, dict], str]] | None = None) -> list[str]:
    """Markdown rows: minibatches/s median (mean), runs, sampled edges/s, wire MB and CPU s per
    minibatch by process; ``extra`` adds columns (header -> cell of (name, summary))."""
    extra = extra or {}
    head = "| system | minibatches/s median (mean) | runs | sampled edges/s | wire MB/minibatch "
    lines = [
        head + "".join(f"| {h} " for h in extra) + "| CPU s/minibatch (by process) |",
        "|---|---:|---|---:|---:|" + "---:|" * len(extra) + "---|",
    ]
    for name, s in systems.items():
        cpu = ", ".join(f"{k} {v:.3f}" for k, v in s["cpu_seconds_per_minibatch"].items() if v > 0.0005)
        runs = ", ".join(f"{v:.2f}" for v in s["runs_minibatches_per_s"])
        cells = "".join(f"| {cell(name, s)} " for cell in extra.values())
        lines.append(
            f"| {name} | {s['minibatches_per_s']:.2f} ({s['mean_minibatches_per_s']:.2f}) | {runs} "
            f"| {s['sampled_edges_per_s'] / 1e6:.2f} M | {s['wire_bytes_per_minibatch'] / 1e6:.2f} {cells}| {cpu} |"
        )
    return lines
