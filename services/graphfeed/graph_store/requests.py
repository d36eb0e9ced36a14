"""Checks of a sampling request against the graph and the store's limits, before any work."""

from __future__ import annotations

from collections.abc import Sequence

import numpy as np

from graphfeed.common.errors import InvalidArgument, ResourceExhausted
from graphfeed.graph_store.exclusion import LocalExclusion
from graphfeed.graph_store.types import Exclusion

ANSWER_EDGE_BYTES = 16  # a sampled edge in a SampleNeighbors answer: its source and its edge id (int64 each)


def check_fanouts(fanout: int | Sequence[int], num_etypes: int, max_fanout: int) -> list[int]:
    """One fanout per edge type from ``fanout`` (an int for all, or one per edge type)."""
    values = [fanout] * num_etypes if isinstance(fanout, (int, np.integer)) else list(fanout)
    if len(values) != num_etypes:
        raise InvalidArgument(
            f"{len(values)} fanouts for the graph's {num_etypes} edge types; give one per edge type or one for all"
        )
    for f in values:
        if not isinstance(f, (int, np.integer)) or f < -1 or f > max_fanout:
            raise InvalidArgument(f"fanout must be -1 (all neighbors) or in [0, {max_fanout}], got {f}")
    return [int(f) for f in values]


def check_draw_position(rng_seed: int, first_position: int) -> None:
    """A sampling call's draws: a uint64 seed and a batch position below 2**63 (InvalidArgument otherwise)."""
    if not 0 <= int(rng_seed) < 1 << 64:
        raise InvalidArgument(f"rng_seed must be in [0, 2**64), got {rng_seed}")
    if not 0 <= int(first_position) < 1 << 63:
        raise InvalidArgument(f"first_position must be in [0, 2**63), got {first_position}")


def check_answer_size(
    etype_indptr: np.ndarray, rows: np.ndarray, fanouts: list[int], replace: bool, limit: int
) -> None:
    """ResourceExhausted when sampling ``rows`` would answer with more than ``limit`` bytes
    (:data:`ANSWER_EDGE_BYTES` per edge): ids per request do not bound an answer (fanout -1 on a
    hub). Counted exactly only when the fanouts' bound (every row taking its full fanout) does
    not already fit."""
    k = np.asarray(fanouts, dtype=np.int64)
    if (k >= 0).all() and len(rows) * int(k.sum()) * ANSWER_EDGE_BYTES <= limit:
        return
    deg = etype_indptr[:, rows + 1] - etype_indptr[:, rows]  # [R, N]
    taken = np.where(deg > 0, k[:, None], 0) if replace else np.minimum(deg, k[:, None])
    edges = int(np.where(k[:, None] == -1, deg, taken).sum())
    if edges * ANSWER_EDGE_BYTES > limit:
        raise ResourceExhausted(
            f"{len(rows)} seeds would sample {edges} edges ({edges * ANSWER_EDGE_BYTES} bytes), over the "
            f"answer limit of {limit} bytes; send fewer seeds per request or a smaller fanout"
        )


def check_exclusion(exclude: Exclusion | None) -> Exclusion | None:
    """``exclude`` (the graph-store's and the sampler's :data:`~graphfeed.graph_store.types.Exclusion`
    pairs) checked; None when absent or empty.

    Raises:
        InvalidArgument: not two 1-D int64 arrays of equal length (named as the wire fields
            ``exclude_dst``/``exclude_eids``).
    """
    if exclude is None:
        return None
    if not isinstance(exclude, (tuple, list)) or len(exclude) != 2:
        raise InvalidArgument("exclude must be a pair (exclude_dst, exclude_eids) of int64 arrays")
    dst, eids = np.asarray(exclude[0]), np.asarray(exclude[1])
    for name, a in (("exclude_dst", dst), ("exclude_eids", eids)):
        if a.ndim != 1 or a.dtype != np.int64:
            raise InvalidArgument(f"{name} must be a 1-D int64 array, got {a.dtype} of shape {list(a.shape)}")
    if len(dst) != len(eids):
        raise InvalidArgument(
            f"exclude_dst and exclude_eids must have equal lengths (edge exclude_eids[i] is an in-edge of "
            f"node exclude_dst[i]), got {len(dst)} and {len(eids)}"
        )
    return (dst, eids) if len(dst) else None


def local_exclusion(exclude: Exclusion | None, start: int, stop: int, max_pairs: int) -> LocalExclusion | None:
    """The sampling kernel's exclusion (:data:`~graphfeed.graph_store.exclusion.LocalExclusion`:
    local rows and edge ids, ascending, unique) from the pairs of ``exclude`` whose dst lies in the
    partition's ``[start, stop)`` (the others belong to other partitions: ignored); None if none.

    Raises:
        InvalidArgument: as :func:`check_exclusion`.
        ResourceExhausted: more than ``max_pairs`` pairs.
    """
    pairs = check_exclusion(exclude)
    if pairs is None:
        return None
    dst, eids = pairs
    if len(dst) > max_pairs:
        raise ResourceExhausted(f"exclude: {len(dst)} edges in one request exceed the limit of {max_pairs}")
    own = (dst >= start) & (dst < stop)
    if not own.any():
        return None
    return np.unique(dst[own] - start), np.unique(eids[own])
