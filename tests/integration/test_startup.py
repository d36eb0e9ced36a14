"""Start-up in any order, health outside the handler pool, {p} templates and graph versions,
with real graph-store and sampler servers on loopback."""

from __future__ import annotations

import logging
import socket
import time
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import grpc
import numpy as np
import pytest
from grpc_health.v1 import health_pb2, health_pb2_grpc
from prometheus_client import CollectorRegistry

from graphfeed.cluster import start_service
from graphfeed.common.errors import Unavailable
from graphfeed.common.partition import GraphManifest, part_dir_name
from graphfeed.common.readiness import LIVENESS_SERVICE, PeerGate, wait_serving
from graphfeed.common.rpc import RunningServer
from graphfeed.graph_store.config import GraphStoreSettings
from graphfeed.graph_store.server import serve as serve_graph_store
from graphfeed.graph_store.store import GraphStore
from graphfeed.loader.config import LoaderSettings
from graphfeed.loader.server import start as start_loader
from graphfeed.sampler.client import SamplerClient
from graphfeed.sampler.config import SamplerSettings
from graphfeed.sampler.server import start as start_sampler
from graphfeed.trainer.dataloader import RemoteDataLoader
from tests.graphs import write_arithmetic

pytestmark = pytest.mark.integration

SERVING = health_pb2.HealthCheckResponse.SERVING
NOT_SERVING = health_pb2.HealthCheckResponse.NOT_SERVING


def free_port(host: str = "127.0.0.1") -> int:
    """A port nothing listens on right now (the servers started later bind it)."""
    with socket.socket() as s:
        s.bind((host, 0))
        return int(s.getsockname()[1])


def health(address: str, service: str = "", timeout_s: float = 5.0) -> int:
    with grpc.insecure_channel(address) as ch:
        return int(
            health_pb2_grpc.HealthStub(ch)
            .Check(health_pb2.HealthCheckRequest(service=service), timeout=timeout_s)
            .status
        )


def wait_until(cond: Callable[[], bool], timeout_s: float = 30.0, what: str = "condition") -> None:
    deadline = time.monotonic() + timeout_s
    while not cond():
        assert time.monotonic() < deadline, f"timed out after {timeout_s}s waiting for {what}"
        time.sleep(0.05)  # poll interval; the condition is what is waited on


class Stores:
    """Graph-store servers of the partitions under ``root`` on given host:ports."""

    def __init__(self) -> None:
        self.running: list[tuple[RunningServer, GraphStore]] = []

    def start(self, root: Path, hosts_ports: list[tuple[str, int]]) -> None:
        for p, (host, port) in enumerate(hosts_ports):
            settings = GraphStoreSettings(
                part_dir=root / part_dir_name(p), host=host, port=port, metrics_port=-1, health_port=-1
            )
            self.running.append(serve_graph_store(settings, CollectorRegistry()))

    def stop(self) -> None:
        for r, store in self.running:
            r.stop(0)
            store.close()
        self.running = []


@pytest.fixture
def stores() -> Iterator[Stores]:
    s = Stores()
    yield s
    s.stop()


def sampler_settings(addresses: list[str], **kw: object) -> SamplerSettings:
    return SamplerSettings.model_validate(
        {
            "graph_store_addresses": addresses,
            "port": 0,
            "metrics_port": -1,
            "health_port": 0,
            "peer_backoff_max_s": 0.5,
            **kw,
        }
    )


def sample_once(address: str) -> np.ndarray:
    with SamplerClient(address, timeout_s=10) as client:
        return client.sample(np.array([0, 1, 2]), [2, 2], False, 0, 0, 0).input_nodes


def test_sampler_started_before_its_graph_stores_is_not_serving_until_they_answer(
    arith_root: Path, stores: Stores
) -> None:
    ports = [free_port(), free_port()]
    running, gate = start_sampler(sampler_settings([f"127.0.0.1:{p}" for p in ports]), CollectorRegistry())
    try:
        health_at = f"127.0.0.1:{running.health_port}"
        assert health(running.address) == NOT_SERVING
        assert health(health_at) == NOT_SERVING
        assert health(health_at, LIVENESS_SERVICE) == SERVING  # alive: a liveness probe must not restart it
        with pytest.raises(Unavailable, match=f"waiting for graph-store 127.0.0.1:{ports[0]}"):
            sample_once(running.address)

        stores.start(arith_root, [("127.0.0.1", p) for p in ports])
        wait_until(lambda: health(health_at) == SERVING, what="the sampler to turn SERVING")
        assert health(running.address) == SERVING
        assert len(sample_once(running.address)) >= 3
    finally:
        running.stop(0)
    assert not gate.ready  # stopping the server released the graph-store channels


def test_template_names_every_graph_store_and_partition_zero_gives_the_count(arith_root: Path, stores: Stores) -> None:
    # 127.0.0.1{p} -> 127.0.0.10, 127.0.0.11: every 127/8 address is loopback on Linux.
    port = free_port("127.0.0.10")
    stores.start(arith_root, [("127.0.0.10", port), ("127.0.0.11", port)])
    running, gate = start_sampler(sampler_settings([f"127.0.0.1{{p}}:{port}"]), CollectorRegistry())
    try:
        connected = gate.wait(30)
        assert [c.address for c in connected.remote.clients] == [f"127.0.0.10:{port}", f"127.0.0.11:{port}"]
        assert len(sample_once(running.address)) >= 3
    finally:
        running.stop(0)


def test_the_temporal_client_takes_the_template_too(arith_root: Path, stores: Stores) -> None:
    from graphfeed.graph_store.partitions import RemotePartitionSet
    from graphfeed.graph_store.temporal.client import TemporalClient

    port = free_port("127.0.0.10")
    stores.start(arith_root, [("127.0.0.10", port), ("127.0.0.11", port)])
    partitions = RemotePartitionSet([f"127.0.0.1{{p}}:{port}"])
    client = TemporalClient(partitions)
    try:
        assert [c.address for c in partitions.clients] == [f"127.0.0.10:{port}", f"127.0.0.11:{port}"]
    finally:
        client.close()


def test_a_re_ingested_graph_is_noticed_and_reloaded(
    tmp_path: Path, stores: Stores, caplog: pytest.LogCaptureFixture
) -> None:
    old_root, new_root = write_arithmetic(tmp_path / "old"), write_arithmetic(tmp_path / "new")
    old_v, new_v = GraphManifest.load(old_root).graph_version, GraphManifest.load(new_root).graph_version
    assert old_v and new_v and old_v != new_v, "every ingest run writes its own graph version"
    ports = [free_port(), free_port()]
    stores.start(old_root, [("127.0.0.1", p) for p in ports])
    running, gate = start_sampler(
        sampler_settings([f"127.0.0.1:{p}" for p in ports], peer_check_interval_s=0.1), CollectorRegistry()
    )
    try:
        assert gate.wait(30).remote.info.graph_version == old_v
        caplog.set_level(logging.WARNING, logger="graphfeed.common.readiness")
        stores.stop()  # the graph-stores restart on the re-ingested graph
        stores.start(new_root, [("127.0.0.1", p) for p in ports])
        wait_until(lambda: gate.ready and gate.get().remote.info.graph_version == new_v, what="the sampler to reload")
        assert any(f"now serves graph version {new_v}" in r.getMessage() for r in caplog.records)
        assert health(f"127.0.0.1:{running.health_port}") == SERVING
        assert len(sample_once(running.address)) >= 3
    finally:
        running.stop(0)


def test_loader_waits_for_its_sampler(arith_root: Path, stores: Stores) -> None:
    store_ports, sampler_port = [free_port(), free_port()], free_port()
    stores.start(arith_root, [("127.0.0.1", p) for p in store_ports])
    addresses = [f"127.0.0.1:{p}" for p in store_ports]
    settings = LoaderSettings(
        graph_store_addresses=addresses,
        sampler_address=f"127.0.0.1:{sampler_port}",
        port=0,
        metrics_port=-1,
        health_port=0,
        peer_backoff_max_s=0.5,
        shm_dir="",
    )
    loader, _gate = start_loader(settings, CollectorRegistry())
    sampler = None
    try:
        health_at = f"127.0.0.1:{loader.health_port}"
        wait_until(lambda: "waiting for sampler" in str(_gate_error(_gate)), what="the loader to try the sampler")
        assert health(health_at) == NOT_SERVING
        with pytest.raises(Unavailable, match=f"waiting for sampler 127.0.0.1:{sampler_port}"):
            RemoteDataLoader(loader.address, "train", fanouts=[2], shm_dir="", timeout_s=2, connect_timeout_s=0.5)
        sampler, _ = start_sampler(sampler_settings(addresses, port=sampler_port, health_port=-1), CollectorRegistry())
        wait_until(lambda: health(health_at) == SERVING, what="the loader to turn SERVING")
        with RemoteDataLoader(loader.address, "train", fanouts=[2], batch_size=8, shm_dir="") as dl:
            assert len(dl) > 0 and sum(1 for _ in dl) == len(dl)
    finally:
        loader.stop(0)
        if sampler is not None:
            sampler.stop(0)


def _gate_error(gate: PeerGate[Any]) -> str:
    try:
        gate.get()
    except Unavailable as exc:
        return str(exc)
    return ""


@pytest.mark.slow
def test_sampler_process_started_first_serves_once_its_graph_store_processes_start(
    arith_root: Path, tmp_path: Path
) -> None:
    ports = [free_port(), free_port()]
    stores = [f"127.0.0.1:{p}" for p in ports]
    sampler = start_service(
        "sampler",
        ["sampler", "--graph-store-addresses", *stores, "--peer-backoff-max-s", "0.5"],
        tmp_path,
        serving=False,
    )
    started = [sampler]
    try:
        assert sampler.health_address is not None, "the READY line names the health port"
        assert health(sampler.health_address) == NOT_SERVING
        for p, port in enumerate(ports):
            args = ["graph-store", "--part-dir", str(arith_root / part_dir_name(p)), "--port", str(port)]
            started.append(start_service(f"graph-store-{p}", args, tmp_path))
        wait_serving(sampler.address, "sampler", timeout_s=60)
        assert health(sampler.health_address) == SERVING
        assert len(sample_once(sampler.address)) >= 3
    finally:
        codes = {s.name: s.stop() for s in started}
    assert codes == {s.name: 0 for s in started}, f"every process stops cleanly: {codes}"


def _other_address() -> str | None:
    """An IPv4 address of this machine other than loopback (where a pod's neighbours dial)."""
    import subprocess

    ip = ["ip", "-4", "-o", "addr"]  # iproute2 from PATH, as the rest of the suite's network tests
    out = subprocess.run(ip, capture_output=True, text=True, check=False).stdout
    addrs = [line.split()[3].split("/")[0] for line in out.splitlines() if len(line.split()) > 3]
    return next((a for a in addrs if not a.startswith("127.")), None)


def test_a_loopback_service_keeps_its_health_port_where_probes_reach_it(tmp_path: Path, arith_root: Path) -> None:
    """The loader sidecar's layout (issue 28, item 3): gRPC on 127.0.0.1 (only its trainer dials
    it), health on every interface (the kubelet probes the pod IP). A graph-store process stands
    in, with the same settings any service has."""
    other = _other_address()
    if other is None:
        pytest.skip("this machine has no non-loopback IPv4 address to dial")
    args = ["graph-store", "--part-dir", str(arith_root / "part-00000"), "--shm-dir", ""]
    every = "0.0.0.0"  # noqa: S104 - what the health port must bind in a pod
    proc = start_service("graph-store", [*args, "--host", "127.0.0.1", "--health-host", every], tmp_path)
    try:
        assert proc.health_address is not None
        port, health_port = proc.address.rsplit(":", 1)[1], proc.health_address.rsplit(":", 1)[1]
        assert health(f"{other}:{health_port}") == SERVING
        with socket.socket() as s:
            s.settimeout(5)
            assert s.connect_ex((other, int(port))) != 0  # refused: nothing listens there
        assert health(proc.address) == SERVING
    finally:
        proc.stop()
