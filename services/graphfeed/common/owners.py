"""Which partition owns each id, and the ids grouped by owner: the first step of every fan-out.

The one ownership rule, for static and temporal reads and writes alike: partitions own contiguous
gid ranges of the ingested graph (``node_offsets``, METIS-relabelled at ingest), so the owner of
a gid ``g < num_nodes`` is a binary search over ``num_partitions + 1`` offsets; a node that
arrived later by an edge append (``g >= num_nodes``, ``TEMPORAL_SPEC``) belongs to ``g % P``.
Grouping is a counting sort (stable, O(n + P)) compiled with numba, where
``np.argsort(owner, kind="stable")`` costs ~15 ms for a 222k-id minibatch.
"""

from __future__ import annotations

import numba
import numpy as np


@numba.njit(cache=True, nogil=True, boundscheck=False)
def _group(gids, node_offsets):  # noqa: ANN001, ANN202
    num_parts = len(node_offsets) - 1
    num_nodes = node_offsets[num_parts]
    owner = np.empty(len(gids), dtype=np.int32)
    bounds = np.zeros(num_parts + 1, dtype=np.int64)
    for i in range(len(gids)):
        g, p, hi = gids[i], 0, num_parts  # binary search: node_offsets[p] <= g < node_offsets[p + 1]
        if g >= num_nodes:
            p = g % num_parts  # appended after ingest
        else:
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


def owners(gids: np.ndarray, node_offsets: np.ndarray) -> np.ndarray:
    """int64 [n]: the partition owning each gid (every gid ``>= 0``)."""
    gids = np.asarray(gids, dtype=np.int64)
    num_nodes, parts = int(node_offsets[-1]), len(node_offsets) - 1
    by_range = np.searchsorted(node_offsets, gids, side="right") - 1
    return np.where(gids < num_nodes, by_range, gids % parts).astype(np.int64)


def not_owned(
    gids: np.ndarray, partition: int, start: int, stop: int, num_nodes: int, num_partitions: int
) -> np.ndarray:
    """bool [n]: the gids partition ``partition`` (owning ``[start, stop)``) does not own, by the
    same rule as :func:`owners` (what one partition knows of the offsets is enough)."""
    gids = np.asarray(gids, dtype=np.int64)
    by_range = (gids < start) | (gids >= stop)
    return np.where(gids < num_nodes, by_range, gids % num_partitions != partition)


def group_by_owner(gids: np.ndarray, node_offsets: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """``(order, bounds)``: ``order[bounds[p]:bounds[p + 1]]`` are the positions (ascending) of
    the gids owned by partition ``p`` (see :func:`owners`). Every gid must be ``>= 0``."""
    return _group(np.asarray(gids, dtype=np.int64), np.asarray(node_offsets, dtype=np.int64))
