"""Which partition owns each id, and the ids grouped by owner: the first step of every fan-out.

Partitions own contiguous gid ranges (``node_offsets``, METIS-relabelled at ingest), so the
owner of a gid is a binary search over ``num_partitions + 1`` offsets. Grouping is a counting
sort (stable, O(n + P)) compiled with numba, where ``np.argsort(owner, kind="stable")`` costs
~15 ms for a 222k-id minibatch.
"""

from __future__ import annotations

import numba
import numpy as np


@numba.njit(cache=True, nogil=True, boundscheck=False)
def _group(gids, node_offsets):  # noqa: ANN001, ANN202
    num_parts = len(node_offsets) - 1
    owner = np.empty(len(gids), dtype=np.int32)
    bounds = np.zeros(num_parts + 1, dtype=np.int64)
    for i in range(len(gids)):
        g, p, hi = gids[i], 0, num_parts  # binary search: node_offsets[p] <= g < node_offsets[p + 1]
        while hi - p > 1:
            mid = (p + hi) >> 1
            if g >= node_offsets[mid]:
                p = mid
            else:
                hi = mid
        owner[i] = p
        bounds[p + 1] += 1
    for p in range(num_parts):
        bounds[p + 1] += bounds[p]
    fill = bounds[:-1].copy()
    order = np.empty(len(gids), dtype=np.int64)
    for i in range(len(gids)):
        order[fill[owner[i]]] = i
        fill[owner[i]] += 1
    return order, bounds


def group_by_owner(gids: np.ndarray, node_offsets: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """``(order, bounds)``: ``order[bounds[p]:bounds[p + 1]]`` are the positions (ascending) of
    the gids owned by partition ``p``. Every gid must be in ``[0, node_offsets[-1])``."""
    return _group(np.asarray(gids, dtype=np.int64), np.asarray(node_offsets, dtype=np.int64))
