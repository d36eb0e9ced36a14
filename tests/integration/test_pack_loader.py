"""``graphfeed pack`` against graph-store servers, then a loader server reading the packs: two
epochs stream exact features to a RemoteDataLoader, from the packs, and the pack tier shows
in the loader's metrics."""

from __future__ import annotations

from pathlib import Path

import numpy as np
import pytest
from prometheus_client import CollectorRegistry, generate_latest
from prometheus_client.parser import text_string_to_metric_families

from graphfeed import cli
from graphfeed.loader.metrics import LoaderMetrics
from graphfeed.trainer import RemoteDataLoader
from tests.graphs import arithmetic_features
from tests.integration.inprocess import InProcessCluster

pytestmark = pytest.mark.integration


def test_packed_epochs_stream_exact_features_from_the_packs(arith_root: Path, orig: np.ndarray, tmp_path: Path) -> None:
    packs = tmp_path / "packs"
    c = InProcessCluster.start(
        arith_root, pack_root=str(packs), cache_policy="lru", cache_bytes=20 * 16, lookahead_steps=3
    )
    try:
        stores = ",".join(s.address for s in c.graph_stores)
        args = [
            "--batch-size",
            "8",
            "--fanouts",
            "3,2",
            "--job-seed",
            "9",
            "--steps-per-pack",
            "4",
            "--resident-bytes",
            "160",
        ]
        assert cli.main(["pack", "--graph-stores", stores, "--out", str(packs), "--epochs", "0:2", *args]) == 0
        assert len(list(packs.iterdir())) == 2  # one directory per epoch
        loader = c._loader[1] if c._loader is not None else None
        assert loader is not None
        registry = CollectorRegistry()
        LoaderMetrics.create(registry).watch(loader)
        with RemoteDataLoader(c.loader.address, "train", fanouts=[3, 2], batch_size=8, seed=9, job_id="packed") as dl:
            for epoch in (0, 1):
                dl.set_epoch(epoch)
                steps = 0
                for input_nodes, _out, blocks in dl:
                    np.testing.assert_array_equal(
                        blocks[0].srcdata["feat"].numpy(), arithmetic_features(orig[input_nodes.numpy()])
                    )
                    steps += 1
                assert steps == len(dl)
        stats = loader.pack_stats
        assert stats.hits > 0 and stats.disk_bytes > 0 and stats.fallbacks == 0 and stats.refused == 0
        text = generate_latest(registry).decode()
        samples = {
            (s.name, tuple(s.labels.items())): s.value for f in text_string_to_metric_families(text) for s in f.samples
        }
        assert samples[("graphfeed_loader_cache_hits_total", (("ntype", "_N"), ("tier", "pack")))] == stats.hits
        assert samples[("graphfeed_loader_pack_read_bytes_total", ())] == stats.disk_bytes
    finally:
        c.stop()


def test_pack_waits_for_graph_stores_that_start_after_it(arith_root: Path, tmp_path: Path) -> None:
    """A pack Job starts beside graph-stores still staging their partitions: with --wait-s it
    waits for every one (a ``{p}`` template, expanded once partition 0 answers) instead of failing."""
    import socket
    import threading
    import time

    from prometheus_client import CollectorRegistry as Registry

    from graphfeed.common.partition import GraphManifest, part_dir_name
    from graphfeed.graph_store.config import GraphStoreSettings
    from graphfeed.graph_store.server import serve

    n = GraphManifest.load(arith_root).num_partitions
    assert n <= 10
    for _ in range(50):  # a free block of ports base*10 + p, one per partition
        with socket.socket() as s:
            s.bind(("127.0.0.1", 0))
            base = s.getsockname()[1] // 10
        if base * 10 >= 1024 and base * 10 + 9 < 65536:
            break
    template = f"127.0.0.1:{base}{{p}}"
    out = tmp_path / "packs"
    args = ["pack", "--graph-stores", template, "--out", str(out), "--batch-size", "8", "--fanouts", "3,2"]
    result: list[int] = []
    packer = threading.Thread(target=lambda: result.append(cli.main([*args, "--wait-s", "120"])))
    packer.start()
    time.sleep(2.0)  # the graph-stores come up after the pack command started
    assert packer.is_alive(), "pack gave up before the graph-stores started"
    servers = []
    try:
        for p in range(n):
            settings = GraphStoreSettings.model_validate(
                {"part_dir": arith_root / part_dir_name(p), "port": base * 10 + p, "metrics_port": -1, "append_dir": ""}
            )
            servers.append(serve(settings, Registry())[0])
        packer.join(timeout=300)
        assert result == [0]
        assert (out / "epoch-0").exists() or any(out.iterdir())
    finally:
        for srv in servers:
            srv.stop(0)
