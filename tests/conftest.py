"""Shared fixtures. Graph builders live in tests/graphs.py."""

from __future__ import annotations

from pathlib import Path

import numpy as np
import pytest

from graphfeed.common.partition import part_dir_name
from graphfeed.graph_store.partitions import LocalPartitionSet
from graphfeed.graph_store.store import GraphStore
from tests.graphs import write_arithmetic


@pytest.fixture(scope="session")
def arith_root(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """A 100-node arithmetic graph (max_deg 7, feat_dim 4) in 2 partitions split by v % 2."""
    return write_arithmetic(tmp_path_factory.mktemp("arith"))


@pytest.fixture(scope="session")
def orig(arith_root: Path) -> np.ndarray:
    """gid -> input id of the arithmetic graph."""
    return np.load(arith_root / "orig_ids.npy")


@pytest.fixture(scope="session")
def parts(arith_root: Path) -> LocalPartitionSet:
    """Both partitions of the arithmetic graph, in process (read-only: tests must not close them)."""
    return LocalPartitionSet([GraphStore.open(arith_root / part_dir_name(p)) for p in range(2)])
