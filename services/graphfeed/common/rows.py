"""Row gather/scatter for feature tables: the CPU hot loop of every feature fetch.

Random rows of a feature table are latency-bound (each 512-byte row is a fresh cache miss),
so the kernel (numba, GIL released) does two things a ``table[rows]`` does not: it copies a
row as machine words instead of bytes or elements, and it prefetches the rows a few
iterations ahead, so that several misses are in flight at once. Measured on this 2-core
machine, 111k random 512-byte rows out of a 500k-row table: byte loop 84 ms, numpy fancy
indexing 67 ms, torch index_select on one thread 67 ms (two: 40 ms), word copy 38 ms, word
copy + prefetch 28 ms (``python -m graphfeed.common.rows`` reruns this).
"""

from __future__ import annotations

import time
from typing import Any

import numba
import numpy as np

from graphfeed.common.cacheline import prefetch2

_AHEAD = 8  # rows prefetched ahead; 8..32 measure the same, 0 is 35 % slower
_LINE = 64  # bytes per cache line
_SHORT_RUN = 4  # runs this short are placed word by word


@numba.njit(cache=True, nogil=True, boundscheck=False)
def _copy_words(table, rows, out, positions, words_per_line):  # noqa: ANN001, ANN202
    """``out[positions[i]] = table[rows[i]]`` (``out[i]`` when ``positions`` is empty) for
    tables viewed as [rows, words]; prefetches the rows ``_AHEAD`` iterations ahead."""
    n = len(rows)
    width = table.shape[1]
    scatter = len(positions) > 0
    for i in range(n):
        if i + _AHEAD < n:
            ahead = rows[i + _AHEAD]
            for j in range(0, width, words_per_line):
                prefetch2(table, ahead, j)
        out[positions[i] if scatter else i, :] = table[rows[i], :]


_NO_POSITIONS = np.empty(0, dtype=np.int64)


def _word_pair(table: np.ndarray, out: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """Both arrays as [rows, words] of the widest unsigned word that divides a row and both
    base addresses (8 bytes for aligned float32 rows of even width; 1 byte at worst). No copy."""
    row_bytes = table.itemsize * int(np.prod(table.shape[1:], dtype=np.int64))
    dt: type[np.unsignedinteger[Any]]
    size, dt = 1, np.uint8
    for size, dt in ((8, np.uint64), (4, np.uint32), (2, np.uint16), (1, np.uint8)):  # noqa: B007
        if row_bytes % size == 0 and table.ctypes.data % size == 0 and out.ctypes.data % size == 0:
            break

    def words(a: np.ndarray) -> np.ndarray:
        return a.reshape(len(a), -1).view(np.uint8).view(dt).reshape(len(a), row_bytes // size)

    return words(table), words(out)


def _copy(table: np.ndarray, rows: np.ndarray, out: np.ndarray, positions: np.ndarray) -> None:
    if out.dtype != table.dtype or out.shape[1:] != table.shape[1:]:
        raise ValueError(f"out {out.dtype} {list(out.shape)} does not take rows of {table.dtype} {list(table.shape)}")
    if not (table.flags.c_contiguous and out.flags.c_contiguous):
        raise ValueError("table and out must be C-contiguous")
    if len(rows) and out.nbytes:
        t, o = _word_pair(table, out)
        _copy_words(
            t, np.asarray(rows, dtype=np.int64), o, np.asarray(positions, dtype=np.int64), max(1, _LINE // t.itemsize)
        )


def take_rows(table: np.ndarray, rows: np.ndarray, out: np.ndarray | None = None) -> np.ndarray:
    """``table[rows]`` (into ``out`` if given). ``rows`` must be valid int64 row indices: the
    kernel does not check bounds (callers validate ids first)."""
    if out is None:
        out = np.empty((len(rows), *table.shape[1:]), dtype=table.dtype)
    _copy(table, rows, out, _NO_POSITIONS)
    return out


def scatter_rows(table: np.ndarray, rows: np.ndarray, out: np.ndarray, positions: np.ndarray) -> None:
    """``out[positions] = table[rows]``; both index arrays int64, valid and of equal length
    (not checked here)."""
    _copy(table, rows, out, positions)


@numba.njit(cache=True, nogil=True, boundscheck=False)
def run_end(positions, i):  # noqa: ANN001, ANN201
    """The end of the run of consecutive positions that starts at ``positions[i]``: the first
    ``j > i`` with ``positions[j] != positions[j - 1] + 1`` (or ``len(positions)``)."""
    j = i + 1
    while j < len(positions) and positions[j] == positions[j - 1] + 1:
        j += 1
    return j


@numba.njit(cache=True, nogil=True, boundscheck=False)
def _place_runs(out, positions, rows):  # noqa: ANN001, ANN202
    """``out[positions[i]] = rows[i]``, each run of consecutive positions as one block copy;
    runs of up to ``_SHORT_RUN`` rows word by word (a slice copy's set-up costs more than such a
    run: rows of two interleaved owners, 140k of 280k 512-byte rows, 22 -> 15 ms)."""
    n = len(positions)
    width = rows.shape[1]
    i = 0
    while i < n:
        j = run_end(positions, i)
        start = positions[i]
        if j - i <= _SHORT_RUN:
            for q in range(i, j):
                at = start + (q - i)
                for c in range(width):
                    out[at, c] = rows[q, c]
        else:
            out[start : start + (j - i), :] = rows[i:j, :]
        i = j


def place_rows(rows: np.ndarray, out: np.ndarray, positions: np.ndarray) -> None:
    """``out[positions] = rows`` for rows received in position order (a graph-store's answer to
    a loader): runs of consecutive positions are copied as blocks, so rows that arrive already
    in their destination's order cost a ``memcpy``, not a row-by-row scatter (measured on this
    machine, 140k of 280k 512-byte rows in 1 MiB chunks, half the positions consecutive: numpy
    38 ms, this 25 ms). ``positions`` must be valid (not checked here)."""
    if out.dtype != rows.dtype or out.shape[1:] != rows.shape[1:] or len(positions) != len(rows):
        raise ValueError(f"{len(positions)} positions, rows {rows.dtype} {list(rows.shape)}, out {list(out.shape)}")
    if not (rows.flags.c_contiguous and out.flags.c_contiguous):
        out[positions] = rows
    elif len(rows) and out.nbytes:
        r, o = _word_pair(rows, out)
        _place_runs(o, np.asarray(positions, dtype=np.int64), r)


def _main() -> None:  # pragma: no cover - the measurement quoted in the module docstring
    rng = np.random.default_rng(0)
    table = rng.random((500_000, 128), dtype=np.float32)
    rows = rng.integers(0, len(table), 111_000)
    out = np.empty((len(rows), 128), np.float32)
    take_rows(table, rows[:10], out[:10])
    for name, fn in (
        ("numpy", lambda: np.take(table, rows, axis=0, out=out)),
        ("take_rows", lambda: take_rows(table, rows, out)),
    ):
        best = min(_timed(fn, time.perf_counter) for _ in range(7))
        print(f"{name:10s} {best * 1e3:6.1f} ms  {out.nbytes / best / 1e9:.2f} GB/s")


def _timed(fn, clock) -> float:  # noqa: ANN001  # pragma: no cover
    t0 = clock()
    fn()
    return clock() - t0


if __name__ == "__main__":  # pragma: no cover
    _main()
