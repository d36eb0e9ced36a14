"""Fixtures for integration tests: real Cora partitions and in-process clusters."""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path
from typing import TYPE_CHECKING

import numpy as np
import pytest

from graphfeed.ingest.graph import GraphData
from tests.integration.inprocess import InProcessCluster

if TYPE_CHECKING:
    from graphfeed.cluster import LocalCluster


@pytest.fixture(scope="session")
def cora() -> GraphData:
    from graphfeed.ingest.sources import load_cora

    return load_cora(split_seed=0)


@pytest.fixture(scope="session")
def cora_root(cora: GraphData, tmp_path_factory: pytest.TempPathFactory) -> Path:
    """Cora in 2 METIS partitions."""
    from graphfeed.ingest.partition import write_partitioned

    root = tmp_path_factory.mktemp("cora")
    write_partitioned(cora, root, 2, method="metis")
    return root


@pytest.fixture(scope="session")
def cora_input_index(cora: GraphData, cora_root: Path) -> np.ndarray:
    """gid -> row of the GraphData tables (via the paper ids kept in orig_ids.npy)."""
    assert cora.orig_ids is not None, "load_cora keeps Cora's paper ids"
    paper_of_gid = np.load(cora_root / "orig_ids.npy")
    order = np.argsort(cora.orig_ids)
    return order[np.searchsorted(cora.orig_ids, paper_of_gid, sorter=order)]


@pytest.fixture(scope="module")
def cora_cluster(cora_root: Path) -> Iterator[InProcessCluster]:
    c = InProcessCluster.start(cora_root, cache_policy="lru", cache_bytes=2 << 20)
    yield c
    c.stop()


@pytest.fixture(scope="session")
def process_cluster(cora_root: Path, tmp_path_factory: pytest.TempPathFactory) -> Iterator[LocalCluster]:
    """graph-store x2, sampler and loader as real `graphfeed serve` processes over Cora."""
    from graphfeed.cluster import LocalCluster

    c = LocalCluster.start(cora_root, tmp_path_factory.mktemp("logs"))
    yield c
    codes = c.stop()
    assert all(code == 0 for code in codes.values()), f"services must shut down cleanly: {codes}"
