"""PeerGate without sockets: retries with capped backoff, UNAVAILABLE naming the missing peer,
health flips, rebuild when the peers change; the {p} template and the settings that drive them."""

from __future__ import annotations

import threading
import time
from collections.abc import Callable

import pytest

from graphfeed.common.errors import Unavailable
from graphfeed.common.readiness import GatedServicer, PeerGate, PeerNotReady
from graphfeed.graph_store.partitions import expand_addresses
from graphfeed.sampler.config import SamplerSettings


def wait_until(cond: Callable[[], bool], timeout_s: float = 10.0) -> None:
    deadline = time.monotonic() + timeout_s
    while not cond():
        assert time.monotonic() < deadline, "timed out"
        time.sleep(0.01)  # poll interval; the condition is what is waited on


class Peers:
    """A peer that answers after ``fail`` attempts; records health and released cores."""

    def __init__(self, fail: int) -> None:
        self.fail, self.attempts, self.version = fail, 0, "v1"
        self.serving: list[bool] = []
        self.released: list[str] = []
        self.lock = threading.Lock()

    def connect(self) -> str:
        with self.lock:
            self.attempts += 1
            if self.attempts <= self.fail:
                raise PeerNotReady("graph-store gs-0:50051", "UNAVAILABLE connection refused")
            return self.version

    def check(self, core: str) -> str | None:
        return None if core == self.version else f"graph version {self.version}, not {core}"


def gate_over(peers: Peers, **kw: object) -> PeerGate[str]:
    return PeerGate(
        "sampler",
        peers.connect,
        on_serving=peers.serving.append,
        check=peers.check,
        release=peers.released.append,
        initial_backoff_s=0.01,
        max_backoff_s=0.02,
        **kw,  # type: ignore[arg-type]
    )


def test_calls_before_the_peers_answer_are_unavailable_naming_the_peer() -> None:
    peers = Peers(fail=10**9)
    gate = gate_over(peers).start()
    try:
        wait_until(lambda: peers.attempts >= 3)  # retried, not given up
        with pytest.raises(Unavailable, match="sampler is not ready: waiting for graph-store gs-0:50051: UNAVAILABLE"):
            gate.get()
        assert not gate.ready and True not in peers.serving
    finally:
        gate.close()


def test_serving_once_the_peers_answer_and_released_on_close() -> None:
    peers = Peers(fail=3)
    gate = gate_over(peers).start()
    assert gate.wait(10) == "v1"
    assert peers.attempts == 4 and peers.serving == [True]
    gate.close()
    assert peers.released == ["v1"] and peers.serving[-1] is False


def test_a_changed_peer_takes_the_core_out_of_service_and_rebuilds_it() -> None:
    peers = Peers(fail=0)
    gate = gate_over(peers, check_interval_s=0.01).start()
    try:
        assert gate.wait(10) == "v1"
        peers.version = "v2"  # re-ingested
        wait_until(lambda: gate.ready and gate.get() == "v2")
        assert peers.released == ["v1"]
        assert peers.serving == [True, False, True]  # NOT_SERVING while it reloaded
    finally:
        gate.close()


def test_gated_servicer_builds_one_servicer_per_core() -> None:
    peers = Peers(fail=0)
    gate = gate_over(peers, check_interval_s=0.01)
    built: list[str] = []

    class Servicer:
        def __init__(self, core: str) -> None:
            built.append(core)
            self.core = core

        def Method(self, request: str, context: object) -> str:  # noqa: N802 - a gRPC method name
            return f"{self.core}:{request}"

    gated = GatedServicer(gate, Servicer)
    with pytest.raises(Unavailable):
        gated.Method("x", None)
    gate.start()
    try:
        gate.wait(10)
        assert gated.Method("a", None) == "v1:a" and gated.Method("b", None) == "v1:b"
        assert built == ["v1"]
    finally:
        gate.close()


def test_addresses_without_a_template_are_kept_as_given() -> None:
    assert expand_addresses(["a:1", "b:2"]) == ["a:1", "b:2"]
    assert expand_addresses(["gs-0:1"]) == ["gs-0:1"]


def test_peer_settings_come_from_the_environment(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("GRAPHFEED_SAMPLER_GRAPH_STORE_ADDRESSES", '["graph-store-{p}.graph-store:50051"]')
    monkeypatch.setenv("GRAPHFEED_SAMPLER_HEALTH_PORT", "50052")
    monkeypatch.setenv("GRAPHFEED_SAMPLER_MAX_CONNECTION_AGE_S", "30")
    monkeypatch.setenv("GRAPHFEED_SAMPLER_PEER_CHECK_INTERVAL_S", "5")
    s = SamplerSettings()  # the required field comes from the environment
    assert s.graph_store_addresses == ["graph-store-{p}.graph-store:50051"]
    assert (s.health_port, s.max_connection_age_s, s.max_connection_age_grace_s, s.peer_check_interval_s) == (
        50052,
        30.0,
        0.0,
        5.0,
    )
