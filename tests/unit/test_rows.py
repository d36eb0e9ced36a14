"""The row gather/scatter kernels equal numpy indexing for every dtype, width and alignment; ids group by owner."""

from __future__ import annotations

import numpy as np
import pytest

from graphfeed.common.rows import place_rows, scatter_rows, take_rows


@pytest.mark.parametrize(
    ("dtype", "row_shape"),
    [
        (np.float32, (128,)),
        (np.float32, (3,)),
        (np.float16, (7,)),
        (np.int64, ()),
        (np.uint8, (5,)),
        (np.float64, (2, 3)),
    ],
)
def test_take_and_scatter_equal_numpy(dtype: type, row_shape: tuple[int, ...]) -> None:
    rng = np.random.default_rng(0)
    table: np.ndarray = (rng.random((1000, *row_shape)) * 100).astype(dtype)
    rows = rng.integers(0, len(table), 300)
    assert take_rows(table, rows).tobytes() == table[rows].tobytes()
    out: np.ndarray = np.zeros((500, *row_shape), dtype=dtype)
    positions = rng.permutation(500)[:300]
    scatter_rows(table, rows, out, positions)
    expected = np.zeros_like(out)
    expected[positions] = table[rows]
    assert out.tobytes() == expected.tobytes()


@pytest.mark.parametrize(
    ("dtype", "row_shape"), [(np.float32, (128,)), (np.float16, (7,)), (np.int64, ()), (np.float64, (2, 3))]
)
@pytest.mark.parametrize("layout", ["runs", "sorted", "random", "one run"])
def test_place_rows_equals_numpy(dtype: type, row_shape: tuple[int, ...], layout: str) -> None:
    rng = np.random.default_rng(1)
    n = 400
    positions = {
        "runs": np.flatnonzero(np.repeat(rng.integers(0, 2, 40), 10)),  # runs of 10 and gaps
        "sorted": np.sort(rng.permutation(n)[:250]),
        "random": rng.permutation(n)[:250],
        "one run": np.arange(37, 37 + 250),
    }[layout]
    rows: np.ndarray = (rng.random((len(positions), *row_shape)) * 100).astype(dtype)
    rows.flags.writeable = False  # as received: a view of a gRPC message's bytes
    out: np.ndarray = np.zeros((n + 40, *row_shape), dtype=dtype)
    place_rows(rows, out, positions)
    expected = np.zeros_like(out)
    expected[positions] = rows
    assert out.tobytes() == expected.tobytes()


def test_misaligned_output_falls_back_to_narrower_words() -> None:
    table = np.arange(40, dtype=np.float32).reshape(20, 2)
    buf = np.zeros(8 * 5 + 4, dtype=np.uint8)
    out = buf[4:].view(np.float32).reshape(5, 2)  # 4-byte aligned, not 8
    take_rows(table, np.array([3, 0, 19, 7, 7]), out)
    assert out.tolist() == table[[3, 0, 19, 7, 7]].tolist()


def test_empty_and_zero_width() -> None:
    table = np.ones((4, 3), np.float32)
    assert take_rows(table, np.empty(0, np.int64)).shape == (0, 3)
    assert take_rows(np.ones((4, 0), np.float32), np.array([1, 2])).shape == (2, 0)
    scatter_rows(table, np.empty(0, np.int64), np.zeros((2, 3), np.float32), np.empty(0, np.int64))


def test_mismatched_out_is_rejected() -> None:
    table = np.ones((4, 3), np.float32)
    with pytest.raises(ValueError, match="does not take rows"):
        take_rows(table, np.array([0]), np.zeros((1, 4), np.float32))
    with pytest.raises(ValueError, match="does not take rows"):
        take_rows(table, np.array([0]), np.zeros((1, 3), np.float64))
    with pytest.raises(ValueError, match="C-contiguous"):
        take_rows(table, np.array([0, 1]), np.zeros((3, 2), np.float32).T)


def test_group_by_owner_is_a_stable_counting_sort() -> None:
    from graphfeed.common.owners import group_by_owner

    offsets = np.array([0, 10, 10, 25, 40])  # partition 1 owns nothing
    gids = np.random.default_rng(1).integers(0, 40, 1000)
    order, bounds = group_by_owner(gids, offsets)
    owner = np.searchsorted(offsets[1:], gids, side="right")
    assert order.tolist() == np.argsort(owner, kind="stable").tolist()
    assert bounds.tolist() == np.searchsorted(owner[order], np.arange(5)).tolist()
    order, bounds = group_by_owner(np.empty(0, np.int64), offsets)
    assert len(order) == 0 and bounds.tolist() == [0] * 5
