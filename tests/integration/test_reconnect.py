"""Recovery after a restart is bounded by the reconnect backoff ceiling (issue 28, item 6): a
graph-store process is killed, stays down while this process's channel keeps reconnecting
(gRPC's default backoff grows 1.6x per attempt toward 120 s), comes back on the same port, and a
fresh channel in this process (which shares the old one's subchannel in gRPC's global pool)
must reach it within about the ceiling, not after whatever backoff the outage built up."""

from __future__ import annotations

import threading
import time
from pathlib import Path

import numpy as np
import pytest

from graphfeed.cluster import start_service
from graphfeed.common.errors import GraphfeedError
from graphfeed.common.rpc import RECONNECT_BACKOFF_MS
from graphfeed.graph_store.client import GraphStoreClient
from tests.graphs import write_arithmetic
from tests.integration.test_startup import free_port

pytestmark = pytest.mark.integration

OUTAGE_S = 12.0  # with gRPC's defaults the backoff reaches ~4-6.5 s per attempt by then
SLACK_S = 2.0  # a connection and one call on a loaded machine


def _reached(client: GraphStoreClient) -> bool:
    """One call that does not wait for the channel to be ready (as every data-path call)."""
    try:
        return len(client.get_degrees_future(np.array([0])).result()) == 1
    except GraphfeedError:
        return False


def test_a_fresh_channel_reaches_a_restarted_graph_store_within_the_backoff_ceiling(tmp_path: Path) -> None:
    root = write_arithmetic(tmp_path / "g")
    address = f"127.0.0.1:{free_port()}"
    args = ["graph-store", "--part-dir", str(root / "part-00000"), "--shm-dir", "", "--port", address.split(":")[1]]
    store = start_service("graph-store", args, tmp_path / "logs")
    old = GraphStoreClient(address, timeout_s=2)
    stop = threading.Event()
    try:
        assert _reached(old)
        store.proc.kill()
        store.proc.wait()

        def keep_calling() -> None:  # through the outage and the restart: the backoff grows
            while not stop.is_set():
                _reached(old)
                time.sleep(0.05)

        caller = threading.Thread(target=keep_calling, daemon=True)
        caller.start()
        time.sleep(OUTAGE_S)
        store = start_service("graph-store-again", args, tmp_path / "logs")  # SERVING, seen by its own channel
        began = time.monotonic()
        fresh = GraphStoreClient(address, timeout_s=2)
        while not _reached(fresh):
            assert time.monotonic() - began < 60, "the restarted graph-store was never reached"
            time.sleep(0.05)
        took = time.monotonic() - began
        ceiling = RECONNECT_BACKOFF_MS[1] / 1000 * 1.2  # gRPC adds up to 20 % jitter
        assert took < ceiling + SLACK_S, f"a fresh channel needed {took:.1f}s to reach the restarted server"
    finally:
        stop.set()
        store.stop()
