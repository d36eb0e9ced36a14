"""Excluding edges from neighbor sampling (DGL's ``exclude_eids``), layer by layer: the kernel
(byte-identical to sampling the CSR without those edges), the graph-store, and the multi-hop
sampler over in-process partitions."""

from __future__ import annotations

import itertools

import numpy as np
import pytest

from graphfeed.graph_store.sampling import sample_csr, sample_typed


def _random_csr(rng: np.random.Generator, num_rows: int, max_deg: int) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """A CSR with rows of degree 0, multi-edges (repeated neighbors) and shuffled edge ids."""
    deg = rng.integers(0, max_deg + 1, num_rows)
    deg[rng.random(num_rows) < 0.2] = 0
    indptr = np.concatenate([[0], np.cumsum(deg)]).astype(np.int64)
    indices = rng.integers(0, 5, int(indptr[-1]), dtype=np.int64)  # few neighbors: many multi-edges
    edge_ids = rng.permutation(int(indptr[-1])).astype(np.int64) + 1000
    return indptr, indices, edge_ids


def _excluding(
    rng: np.random.Generator, indptr: np.ndarray, edge_ids: np.ndarray, fraction: float
) -> tuple[np.ndarray, np.ndarray]:
    """``(rows, eids)`` of a random ``fraction`` of the edges, as the kernel takes them."""
    drop = rng.random(len(edge_ids)) < fraction
    rows = np.repeat(np.arange(len(indptr) - 1), np.diff(indptr))[drop]
    return np.unique(rows).astype(np.int64), np.unique(edge_ids[drop]).astype(np.int64)


def _without(
    indptr: np.ndarray, indices: np.ndarray, edge_ids: np.ndarray, eids: np.ndarray
) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """The CSR with the edges ``eids`` physically removed (the others keep their ids)."""
    keep = ~np.isin(edge_ids, eids)
    rows = np.repeat(np.arange(len(indptr) - 1), np.diff(indptr))
    new_indptr = np.concatenate([[0], np.cumsum(np.bincount(rows[keep], minlength=len(indptr) - 1))])
    return new_indptr.astype(np.int64), indices[keep], edge_ids[keep]


def _assert_same(a: tuple[np.ndarray, ...], b: tuple[np.ndarray, ...]) -> None:
    for x, y in zip(a, b, strict=True):
        assert x.dtype == y.dtype and x.tobytes() == y.tobytes()


# -- the kernel ------------------------------------------------------------------------------

KERNEL_CASES = [(-1, False), (0, False), (1, False), (3, False), (70, False), (3, True), (70, True)]


@pytest.mark.parametrize(("fanout", "replace"), KERNEL_CASES)
@pytest.mark.parametrize("trial", range(3))
def test_excluding_equals_sampling_the_csr_without_those_edges(fanout: int, replace: bool, trial: int) -> None:
    rng = np.random.default_rng(trial)
    indptr, indices, edge_ids = _random_csr(rng, 300, 150 if fanout > 64 else 12)
    rows = rng.integers(0, 300, 500).astype(np.int64)  # repeats: sampled independently
    excluded = _excluding(rng, indptr, edge_ids, 0.3)
    got = sample_csr(indptr, indices, edge_ids, rows, fanout, replace, 77 + trial, None, 5, exclude=excluded)
    want = sample_csr(*_without(indptr, indices, edge_ids, excluded[1]), rows, fanout, replace, 77 + trial, None, 5)
    _assert_same(got, want)
    assert not np.isin(got[2], excluded[1]).any()


@pytest.mark.parametrize(("fanout", "replace"), KERNEL_CASES)
def test_rows_without_excluded_edges_sample_as_without_exclusion(fanout: int, replace: bool) -> None:
    rng = np.random.default_rng(1)
    indptr, indices, edge_ids = _random_csr(rng, 200, 150 if fanout > 64 else 12)
    rows = rng.permutation(200).astype(np.int64)
    xrows, xeids = _excluding(rng, indptr, edge_ids, 0.02)
    plain = sample_csr(indptr, indices, edge_ids, rows, fanout, replace, 9)
    got = sample_csr(indptr, indices, edge_ids, rows, fanout, replace, 9, exclude=(xrows, xeids))
    untouched = ~np.isin(rows, xrows)
    assert untouched.any() and (~untouched).any()
    for i in np.flatnonzero(untouched):
        for p, g in zip(plain[1:], got[1:]):
            np.testing.assert_array_equal(g[got[0][i] : got[0][i + 1]], p[plain[0][i] : plain[0][i + 1]])


def test_an_excluded_row_still_gets_its_fanout_from_the_other_edges() -> None:
    # Row 0 has 4 edges (ids 10..13); excluding two leaves exactly the other two for fanout 2.
    indptr, indices, edge_ids = np.array([0, 4]), np.array([5, 6, 7, 8]), np.array([10, 11, 12, 13])
    rows = np.zeros(1, dtype=np.int64)
    exclude = (np.array([0]), np.array([10, 12]))
    offsets, src, eids = sample_csr(indptr, indices, edge_ids, rows, 2, False, 3, exclude=exclude)
    assert offsets.tolist() == [0, 2] and src.tolist() == [6, 8] and eids.tolist() == [11, 13]


def test_empty_or_absent_exclusion_is_no_exclusion() -> None:
    rng = np.random.default_rng(2)
    indptr, indices, edge_ids = _random_csr(rng, 50, 9)
    rows = np.arange(50, dtype=np.int64)
    plain = sample_csr(indptr, indices, edge_ids, rows, 4, False, 1)
    empty = np.empty(0, dtype=np.int64)
    _assert_same(sample_csr(indptr, indices, edge_ids, rows, 4, False, 1, exclude=(empty, empty)), plain)
    unknown = (np.array([3], dtype=np.int64), np.array([-5], dtype=np.int64))  # an id the CSR lacks
    _assert_same(sample_csr(indptr, indices, edge_ids, rows, 4, False, 1, exclude=unknown), plain)


@pytest.mark.parametrize(
    "exclude",
    [
        (np.array([2, 1]), np.array([1])),  # rows not ascending
        (np.array([1]), np.array([4, 4])),  # eids not unique
        (np.array([1], dtype=np.int32), np.array([4])),  # not int64
        (np.array([[1]]), np.array([4])),  # not 1-D
    ],
)
def test_a_malformed_exclusion_is_refused(exclude: tuple[np.ndarray, np.ndarray]) -> None:
    with pytest.raises(ValueError, match="excluded"):
        sample_csr(
            np.array([0, 1, 2]), np.array([0, 1]), np.array([4, 5]), np.array([0, 1]), 1, False, 0, None, 0, exclude
        )


@pytest.mark.parametrize("replace", [False, True])
def test_typed_sampling_excludes_in_every_edge_type(replace: bool) -> None:
    rng = np.random.default_rng(3)
    num_rows = 120
    typed = [_random_csr(rng, num_rows, 10) for _ in range(2)]
    # Both edge types over one shared indices/edge_ids array (type 1's positions after type 0's).
    shift = int(typed[0][0][-1])
    etype_indptr = np.stack([typed[0][0], typed[1][0] + shift])
    indices = np.concatenate([typed[0][1], typed[1][1]])
    edge_ids = np.concatenate([typed[0][2], typed[1][2] + 10_000])
    rows = rng.integers(0, num_rows, 200).astype(np.int64)
    drop = rng.random(len(edge_ids)) < 0.3
    owner_row = np.concatenate([np.repeat(np.arange(num_rows), np.diff(p)) for p in etype_indptr])
    exclude = (np.unique(owner_row[drop]), np.unique(edge_ids[drop]))
    got = sample_typed(etype_indptr, indices, edge_ids, rows, [3, 2], replace, 11, exclude=exclude)
    keep, bounds = ~drop, (0, shift, len(edge_ids))
    kept_indptr = np.stack(
        [
            np.concatenate([[0], np.cumsum(np.bincount(owner_row[lo:hi][keep[lo:hi]], minlength=num_rows))])
            + int(keep[:lo].sum())
            for lo, hi in itertools.pairwise(bounds)
        ]
    ).astype(np.int64)
    want = sample_typed(kept_indptr, indices[keep], edge_ids[keep], rows, [3, 2], replace, 11)
    _assert_same(got, want)
    assert not np.isin(got[2], exclude[1]).any()
