"""One-hop neighbor sampling on a CSR, vectorized over all seeds (no Python loop per seed).

These functions are pure (arrays and a ``numpy.random.Generator`` in, arrays out) and are the
NumPy reference for the GPU kernels: given the same generator state they always return the
same bytes.

Output is "CSR order per seed": seed ``i``'s sampled edges are ``[offsets[i], offsets[i+1])``
and, within a seed, edge positions are ascending (the order they have in the CSR). Sampling
without replacement picks a uniformly random subset of distinct edge positions; sampling with
replacement draws exactly ``fanout`` positions uniformly (sorted afterwards, which does not
change the multiset).
"""

from __future__ import annotations

import numpy as np

# Floyd's algorithm costs O(n * k^2) element operations; beyond this fanout the random-key
# sort (O(sum of degrees * log)) is cheaper.
FLOYD_MAX_FANOUT = 64


def _segment_arange(counts: np.ndarray) -> np.ndarray:
    """``concat([arange(c) for c in counts])`` without a Python loop."""
    total = int(counts.sum())
    starts = np.cumsum(counts) - counts
    return np.arange(total, dtype=np.int64) - np.repeat(starts, counts)


def _floor_uniform(u: np.ndarray, n: np.ndarray) -> np.ndarray:
    """``floor(u * n)`` for u in [0, 1), clipped to ``n - 1`` (float rounding can reach ``n``)."""
    return np.minimum((u * n).astype(np.int64), n - 1)


def floyd_sample(deg: np.ndarray, k: int, rng: np.random.Generator) -> np.ndarray:
    """Uniform ``k``-subsets of ``range(deg[i])`` for every row, by Floyd's algorithm.

    Floyd's algorithm: for ``j`` in ``deg-k .. deg-1`` draw ``t`` uniform in ``[0, j]``; take
    ``t`` unless it was already taken, in which case take ``j`` (which cannot have been).
    Every ``k``-subset is equally likely. Vectorized across rows: step ``s`` handles
    ``j = deg - k + s`` of every row at once.

    Args:
        deg: int64 [n], every entry ``>= k``.
        k: subset size, ``>= 1``.
        rng: source of the ``n * k`` uniforms (drawn at once, row-major).

    Returns:
        int64 [n, k]: each row sorted ascending, distinct, in ``[0, deg[i])``.
    """
    n = len(deg)
    u = rng.random((n, k))
    chosen = np.empty((n, k), dtype=np.int64)
    for s in range(k):
        j = deg - k + s
        t = _floor_uniform(u[:, s], j + 1)
        taken = (chosen[:, :s] == t[:, None]).any(axis=1)
        chosen[:, s] = np.where(taken, j, t)
    chosen.sort(axis=1)
    return chosen


def random_key_sample(deg: np.ndarray, k: int, rng: np.random.Generator) -> np.ndarray:
    """Same contract as :func:`floyd_sample`, by giving every edge a random key.

    The ``k`` edges with the smallest keys of each row form a uniform ``k``-subset. Costs one
    random integer per edge of the rows and one sort, so it suits large ``k``. The sort key
    is ``row << bits | random`` (one int64 argsort is ~5x faster than a two-key lexsort);
    with ``bits >= 40`` for any realistic ``n``, ties between random parts (broken by the
    sort, deterministically) are negligible.
    """
    n = len(deg)
    local = _segment_arange(deg)
    bits = 63 - max(1, int(n).bit_length())
    key = np.repeat(np.arange(n, dtype=np.int64), deg) << bits
    key |= rng.integers(0, 1 << bits, size=len(local), dtype=np.int64)
    order = np.argsort(key)  # by row, then by random part
    rank = _segment_arange(deg)  # rank of order[i] within its row (rows stay contiguous)
    picked = order[rank < k]
    chosen = local[picked].reshape(n, k)
    chosen.sort(axis=1)
    return chosen


def _without_replacement(deg: np.ndarray, fanout: int, rng: np.random.Generator) -> tuple[np.ndarray, np.ndarray]:
    """Per-seed counts and local positions (into each seed's neighbor list), flattened."""
    counts = np.minimum(deg, fanout)
    local = _segment_arange(counts)  # "take all" seeds keep 0..deg-1
    big = np.flatnonzero(deg > fanout)
    if len(big):
        sampler = floyd_sample if fanout <= FLOYD_MAX_FANOUT else random_key_sample
        chosen = sampler(deg[big], fanout, rng)
        starts = np.cumsum(counts) - counts
        slots = starts[big][:, None] + np.arange(fanout, dtype=np.int64)[None, :]
        local[slots.ravel()] = chosen.ravel()
    return counts, local


def _with_replacement(deg: np.ndarray, fanout: int, rng: np.random.Generator) -> tuple[np.ndarray, np.ndarray]:
    counts = np.where(deg > 0, fanout, 0).astype(np.int64)
    has = np.flatnonzero(deg > 0)
    u = rng.random((len(has), fanout))
    draws = _floor_uniform(u, deg[has][:, None])
    draws.sort(axis=1)
    return counts, draws.ravel()


def sample_csr(
    indptr: np.ndarray,
    indices: np.ndarray,
    edge_ids: np.ndarray,
    rows: np.ndarray,
    fanout: int,
    replace: bool,
    rng: np.random.Generator,
) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """Samples up to ``fanout`` neighbors of each row of a CSR.

    Args:
        indptr: int64 [R+1] CSR row pointers.
        indices: [E] neighbor of each CSR position (returned as ``src``).
        edge_ids: [E] id of each CSR position (returned as ``eids``).
        rows: int64 [N] rows to sample (repeats allowed; each is sampled independently).
        fanout: ``-1`` takes every neighbor; ``0`` takes none; otherwise up to ``fanout``
            (without replacement: ``min(deg, fanout)``; with replacement: exactly ``fanout``
            for rows of degree > 0 and 0 otherwise).
        replace: sample with replacement.
        rng: the only source of randomness; the same state gives the same output.

    Returns:
        ``(offsets, src, eids)``: int64 [N+1] offsets and the sampled ``indices`` /
        ``edge_ids`` in CSR order per row (ascending CSR position within a row).

    Raises:
        ValueError: ``fanout < -1``.
    """
    if fanout < -1:
        raise ValueError(f"fanout must be -1 or >= 0, got {fanout}")
    rows = np.asarray(rows, dtype=np.int64)
    begin = np.asarray(indptr[rows], dtype=np.int64)
    deg = np.asarray(indptr[rows + 1], dtype=np.int64) - begin
    if fanout == -1:
        counts, local = deg, _segment_arange(deg)
    elif fanout == 0:
        counts, local = np.zeros(len(rows), dtype=np.int64), np.empty(0, dtype=np.int64)
    elif replace:
        counts, local = _with_replacement(deg, fanout, rng)
    else:
        counts, local = _without_replacement(deg, fanout, rng)
    offsets = np.zeros(len(rows) + 1, dtype=np.int64)
    np.cumsum(counts, out=offsets[1:])
    pos = np.repeat(begin, counts) + local
    return offsets, np.asarray(indices[pos], dtype=np.int64), np.asarray(edge_ids[pos], dtype=np.int64)
