"""Shared fixtures. Graph builders live in tests/graphs.py."""

from __future__ import annotations

from pathlib import Path

import pytest

from tests.graphs import write_arithmetic


@pytest.fixture(scope="session")
def arith_root(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """A 100-node arithmetic graph (max_deg 7, feat_dim 4) in 2 partitions split by v % 2."""
    return write_arithmetic(tmp_path_factory.mktemp("arith"))
