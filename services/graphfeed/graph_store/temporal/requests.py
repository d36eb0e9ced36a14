"""What a caller sends to a temporal store, checked before anything is touched: arrays, append
batches, sample requests, and whether this partition owns the nodes named."""

from __future__ import annotations

import numpy as np

from graphfeed.common.errors import InvalidArgument, NotFound, ResourceExhausted, name_ids
from graphfeed.common.owners import not_owned
from graphfeed.graph_store.temporal.index import Layout


def int_array(a: np.ndarray, what: str) -> np.ndarray:
    """``a`` as contiguous int64 after checking it is a 1-D integer array (InvalidArgument)."""
    arr = np.asarray(a)
    if arr.ndim != 1:
        raise InvalidArgument(f"{what} must be 1-D, got shape {arr.shape}")
    if arr.dtype.kind not in "iu" and not (arr.size == 0 and arr.dtype.kind == "f"):
        raise InvalidArgument(f"{what} must be an integer array, got dtype {arr.dtype}")
    if arr.dtype == np.uint64 and arr.size and arr.max() >= 1 << 63:
        raise InvalidArgument(f"{what} must fit int64, got {int(arr.max())}")
    return np.ascontiguousarray(arr, dtype=np.int64)


def feat_array(efeat: np.ndarray | None, n: int, dim: int) -> np.ndarray:
    """Edge features as float32 [n, dim] (an empty [n, 0] when dim is 0), checked (InvalidArgument)."""
    if efeat is None:
        if dim:
            raise InvalidArgument(f"efeat is required: this graph has {dim} edge-feature columns")
        return np.empty((n, 0), dtype=np.float32)
    arr = np.asarray(efeat)
    if arr.shape != (n, dim) or arr.dtype.kind != "f":
        raise InvalidArgument(f"efeat must be float [{n}, {dim}], got {arr.dtype} {list(arr.shape)}")
    return np.ascontiguousarray(arr, dtype=np.float32)


def check_batch(
    lay: Layout,
    dim: int,
    max_edges: int,
    batch_id: str,
    src: np.ndarray,
    dst: np.ndarray,
    t: np.ndarray,
    efeat: np.ndarray | None,
) -> tuple[np.ndarray, np.ndarray, np.ndarray, np.ndarray]:
    """An append's ``(src, dst, t, efeat)`` as int64 / float32 arrays, checked (see ``TemporalStore.append``)."""
    if not isinstance(batch_id, str) or not 0 < len(batch_id) <= 256:
        raise InvalidArgument(f"batch_id must be a non-empty string of at most 256 characters, got {batch_id!r}")
    arrays = [int_array(a, what) for a, what in ((src, "src"), (dst, "dst"), (t, "t"))]
    n = len(arrays[0])
    if any(len(a) != n for a in arrays):
        raise InvalidArgument(f"src, dst and t must have the same length, got {[len(a) for a in arrays]}")
    if n > max_edges:
        raise ResourceExhausted(f"{n} edges in one batch exceed the limit of {max_edges}; split the batch")
    for a, what in zip(arrays[:2], ("src", "dst"), strict=True):
        if n and a.min() < 0:
            raise InvalidArgument(f"{what} must be node ids >= 0, got {int(a.min())}")
    feat = feat_array(efeat, n, dim)
    check_owned(lay, arrays[1], "dst")
    return arrays[0], arrays[1], arrays[2], feat


def check_owned(lay: Layout, gids: np.ndarray, what: str) -> None:
    """Raises NotFound naming (up to 5) ``gids`` this partition does not own (as the static
    store does for ids outside its range: the id is unknown here)."""
    bad = not_owned(gids, lay.partition_id, lay.start, lay.stop, lay.num_nodes, lay.num_partitions)
    if bad.any():
        raise NotFound(
            f"{what} {name_ids(gids[bad])} not owned by partition {lay.partition_id} of {lay.num_partitions}, "
            f"which owns [{lay.start}, {lay.stop}) and the new ids >= {lay.num_nodes} "
            f"with id % {lay.num_partitions} == {lay.partition_id}"
        )


STRATEGIES = ("recent", "uniform")


def as_of(appended: int) -> int:
    """A sample's ``as_of_appended``, once it is a count (>= 0, below 2^40)."""
    if not isinstance(appended, (int, np.integer)) or not 0 <= appended < 1 << 40:
        raise InvalidArgument(f"as_of_appended must be an edge count in [0, 2**40), got {appended!r}")
    return int(appended)


def check_sample(
    nodes: np.ndarray,
    times: np.ndarray,
    fanout: int,
    strategy: str,
    seed: int,
    first_position: int,
    max_fanout: int,
) -> tuple[np.ndarray, np.ndarray]:
    """The roots and times of a sample request as int64 arrays, once every argument is valid.

    Raises:
        InvalidArgument: bad shapes/dtypes, negative ids, bad fanout/strategy/seed.
    """
    if strategy not in STRATEGIES:
        raise InvalidArgument(f"strategy must be one of {STRATEGIES}, got {strategy!r}")
    if not isinstance(fanout, (int, np.integer)) or not -1 <= fanout <= max_fanout:
        raise InvalidArgument(f"fanout must be -1 (all) or in [0, {max_fanout}], got {fanout!r}")
    if not 0 <= int(seed) < 1 << 64 or not 0 <= int(first_position) < 1 << 63:
        raise InvalidArgument(
            f"seed must be in [0, 2**64) and first_position in [0, 2**63), got {seed}, {first_position}"
        )
    gids, times = int_array(nodes, "nodes"), int_array(times, "times")
    if len(gids) != len(times):
        raise InvalidArgument(f"nodes and times must have the same length, got {len(gids)} and {len(times)}")
    if len(gids) and gids.min() < 0:
        raise InvalidArgument(f"nodes must be ids >= 0, got {int(gids.min())}")
    return gids, times


EDGE_BYTES = 24  # a sampled edge in a SampleTemporal answer: neighbour, time and edge id (int64 each)


def max_answer_edges(limit_bytes: int, edge_feat_dim: int | None) -> int:
    """Most sampled edges an answer of ``limit_bytes`` holds (``edge_feat_dim``: with each
    edge's feature row and its position, None without)."""
    per_edge = EDGE_BYTES + (0 if edge_feat_dim is None else 8 + 4 * edge_feat_dim)
    return limit_bytes // per_edge
