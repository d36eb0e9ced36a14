"""A temporal graph whose every answer is known by formula, for the temporal store tests.

N nodes, J edges into each node ``v``: edge ``j`` has source ``(v * 7 + j) % N`` and time
``10 * j``. The edge list is shuffled before ingest (so the partition's rows are not in time
order and the store must sort them); the edge id of ``(v, j)`` is its position in that list.
Partitions own contiguous halves, so gids equal input ids.
"""

from __future__ import annotations

from pathlib import Path

import numpy as np

from graphfeed.ingest.graph import GraphData
from graphfeed.ingest.partition import write_partitioned

N, J = 40, 8


def write_temporal(root: Path, num_partitions: int = 1) -> tuple[Path, np.ndarray]:
    """Writes the graph; returns the root and ``eid_of[v, j]``."""
    v = np.repeat(np.arange(N, dtype=np.int64), J)
    j = np.tile(np.arange(J, dtype=np.int64), N)
    perm = np.random.default_rng(7).permutation(len(v))
    g = GraphData(
        name="temporal-arith",
        num_nodes=N,
        src=(v * 7 + j)[perm] % N,
        dst=v[perm],
        node_data={},
        splits={},
        edge_ts=(10 * j)[perm],
    )
    write_partitioned(g, root, num_partitions, assignment=np.arange(N) * num_partitions // N)
    eid_of = np.empty((N, J), dtype=np.int64)
    eid_of[v[perm], j[perm]] = np.arange(len(v))
    return root, eid_of


def expected_count(t: np.ndarray | int) -> np.ndarray:
    """Edges of any row strictly before ``t``."""
    return np.clip((np.asarray(t, dtype=np.int64) + 9) // 10, 0, J)
