"""The /proc readings of the out-of-core benchmarks (disk reads, memory, the page cache) and the
unpacked system of ``graphfeed bench disk`` as a user runs it: one budgeted graph-store
process per partition (``--memory-budget``, ``--direct-io``) serving its rows over gRPC, plus the
``/proc`` readings that count those processes' disk reads and memory with the loader's.
"""

from __future__ import annotations

import os
from concurrent.futures import Future
from dataclasses import dataclass
from pathlib import Path

import numpy as np

from graphfeed.bench.scrape import samples
from graphfeed.cluster import ServiceProcess, start_service
from graphfeed.common.partition import GraphManifest, part_dir_name
from graphfeed.graph_store.partitions import ForwardingPartitionSet, RemotePartitionSet
from graphfeed.graph_store.types import Exclusion, Fanout, PartitionSet, SampledNeighbors


def read_bytes(pid: int | str = "self") -> int:
    """Bytes process ``pid`` caused to be read from storage (``/proc/<pid>/io`` ``read_bytes``;
    ``O_DIRECT`` reads included)."""
    for line in Path(f"/proc/{pid}/io").read_text().splitlines():
        if line.startswith("read_bytes:"):
            return int(line.split()[1])
    return 0


def status_bytes(pid: int | str, key: str) -> int:
    """A ``kB`` field of ``/proc/<pid>/status`` (``VmRSS``, ``VmHWM``) in bytes."""
    for line in Path(f"/proc/{pid}/status").read_text().splitlines():
        if line.startswith(f"{key}:"):
            return int(line.split()[1]) * 1024
    raise KeyError(f"no {key} in /proc/{pid}/status")


def drop_caches(level: int = 3) -> bool:
    """Writes dirty pages back and drops the page cache (``/proc/sys/vm/drop_caches``: 1 pages,
    3 pages and slab); False where not permitted (not root)."""
    os.sync()
    try:
        Path("/proc/sys/vm/drop_caches").write_text(f"{level}\n")
    except OSError:
        return False
    return True


def reset_peak_rss(pid: int | str = "self") -> bool:
    """Sets ``VmHWM`` of ``pid`` back to its current RSS (``clear_refs`` 5, Linux >= 4.0), so the
    next reading is the peak of what follows; False where not permitted (then the peak is since start)."""
    try:
        Path(f"/proc/{pid}/clear_refs").write_text("5\n")
    except OSError:
        return False
    return True


@dataclass
class BudgetedStores:
    """``graphfeed serve graph-store --memory-budget B [--direct-io]`` per partition, on loopback.

    Start with :meth:`start`; :meth:`stop` raises if a process did not exit cleanly (with its log).
    """

    processes: list[ServiceProcess]
    budget_bytes: int
    ready_rss_bytes: int = 0  # all processes' RSS once every one was READY: budget rows loaded, nothing served

    @classmethod
    def start(
        cls, root: Path, budget_bytes: int, log_dir: Path, direct_io: bool = True, io_threads: int = 8
    ) -> BudgetedStores:
        """One process per partition of the graph at ``root``, each keeping ``budget_bytes`` of
        node data in memory; returns once every one answers health SERVING."""
        stores = cls([], budget_bytes)
        try:
            for p in range(GraphManifest.load(root).num_partitions):
                args = [
                    "graph-store",
                    "--part-dir",
                    str(root / part_dir_name(p)),
                    "--memory-budget",
                    str(budget_bytes),
                    "--direct-io" if direct_io else "--no-direct-io",
                    "--io-threads",
                    str(io_threads),
                    # a budgeted store bounds its heap too: freed answers go back to the kernel
                    "--malloc-arena-max",
                    "2",
                    "--malloc-mmap-threshold-bytes",
                    str(1 << 20),
                ]
                stores.processes.append(start_service(f"disk-graph-store-{p}", args, log_dir))
            stores.ready_rss_bytes = sum(status_bytes(pid, "VmRSS") for pid in stores.pids)
        except BaseException:
            stores.stop()
            raise
        return stores

    @property
    def addresses(self) -> list[str]:
        return [s.address for s in self.processes]

    @property
    def pids(self) -> list[int]:
        return [s.proc.pid for s in self.processes]

    def shm_bytes(self) -> int:
        """Node-data bytes the processes have answered through shared memory so far (their
        ``graphfeed_rpc_response_shm_bytes_total{method="GetNodeData"}``): tells the two transports apart."""
        name = "graphfeed_rpc_response_shm_bytes_total"
        return int(
            sum(
                sample.value
                for s in self.processes
                if s.metrics_address
                for sample in samples(s.metrics_address, name)
                if sample.labels.get("method") == "GetNodeData"
            )
        )

    def stop(self) -> None:
        """SIGTERM to every process; raises RuntimeError naming those that exited non-zero."""
        failed = [f"{s.name} exit {code} (log {s.log_path})" for s in self.processes if (code := s.stop()) != 0]
        if failed:
            raise RuntimeError(f"graph-stores failed: {failed}")


class RemoteRows(ForwardingPartitionSet):
    """Node data (features, labels) from the graph-store processes in ``remote``; sampling and
    degrees from ``local`` (the same in-process topology every other system of the bench samples
    from), so the systems differ only in where feature rows come from.

    Args:
        local: in-process partitions of the same graph (topology).
        remote: the graph-store processes; closed by :meth:`close`, ``local`` is not.
    """

    def __init__(self, local: PartitionSet, remote: RemotePartitionSet) -> None:
        super().__init__(remote)
        self.local, self.remote = local, remote

    def sample_neighbors(
        self,
        p: int,
        seeds: np.ndarray,
        fanout: Fanout,
        replace: bool,
        rng_seed: int,
        first_position: int = 0,
        exclude: Exclusion | None = None,
    ) -> Future[SampledNeighbors]:
        return self.local.sample_neighbors(p, seeds, fanout, replace, rng_seed, first_position, exclude)

    def get_degrees(self, p: int, ids: np.ndarray) -> Future[np.ndarray]:
        return self.local.get_degrees(p, ids)

    def close(self) -> None:
        self.remote.close()
