"""A graph-store server with a memory budget: GetNodeData answers as without one, and /metrics
says how many rows came from memory and from disk."""

from __future__ import annotations

import urllib.request
from pathlib import Path

import grpc
import numpy as np
import pytest
from prometheus_client import CollectorRegistry

from graphfeed.common import codec
from graphfeed.graph_store.config import GraphStoreSettings
from graphfeed.graph_store.server import serve
from graphfeed.graph_store.v1 import graph_store_pb2 as pb
from graphfeed.graph_store.v1 import graph_store_pb2_grpc as pb_grpc
from tests.graphs import arithmetic_features

pytestmark = pytest.mark.integration


def _metric(text: str, name: str) -> float:
    return next(float(line.split()[-1]) for line in text.splitlines() if line.startswith(name))


def test_budgeted_server_serves_exact_rows_and_counts_tiers(arith_root: Path, orig: np.ndarray) -> None:
    settings = GraphStoreSettings(
        part_dir=arith_root / "part-00000", port=0, metrics_port=0, memory_budget="400B", direct_io=True, shm_dir=""
    )
    running, store = serve(settings, registry=CollectorRegistry())
    channel = grpc.insecure_channel(running.address)
    try:
        ids = np.arange(store.start, store.stop)[::-1].copy()
        stub = pb_grpc.GraphStoreServiceStub(channel)
        chunks = stub.GetNodeData(pb.GetNodeDataRequest(name="feat", ids=codec.encode(ids)), timeout=10)
        rows = np.concatenate([codec.decode(c.rows, bulk=c.bulk) for c in chunks])
        assert np.array_equal(rows, arithmetic_features(orig[ids]))
        text = urllib.request.urlopen(f"http://127.0.0.1:{running.metrics_port}/metrics", timeout=10).read().decode()
        memory = _metric(text, 'graphfeed_graph_store_node_data_tier_rows_total{tier="memory"}')
        disk = _metric(text, 'graphfeed_graph_store_node_data_tier_rows_total{tier="disk"}')
        assert memory + disk == len(ids) and disk > 0 and memory > 0
        assert _metric(text, "graphfeed_graph_store_disk_read_bytes_total") >= 512  # whole blocks: 512 B or more
    finally:
        channel.close()
        running.stop(0)
        store.close()
