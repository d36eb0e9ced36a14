"""Reading and checking ``.npy`` input files, naming the file in every error."""

from __future__ import annotations

from pathlib import Path

import numpy as np

from graphfeed.common.errors import InvalidArgument
from graphfeed.ingest.graph import check_finite, find_nonfinite


def load_npy(f: Path) -> np.ndarray:
    """The array in ``f`` (no pickles); InvalidArgument naming the file if it is not one."""
    try:
        return np.load(f, allow_pickle=False)
    except (ValueError, OSError) as e:
        raise InvalidArgument(f"{f}: not a readable .npy array ({e})") from e


def int_vector(f: Path, a: np.ndarray) -> np.ndarray:
    """``a`` (read from ``f``) as int64 ids: 1-D integers, uint64 only below 2**63."""
    if a.ndim != 1 or not (np.issubdtype(a.dtype, np.integer) or a.size == 0):
        raise InvalidArgument(f"{f}: expected a 1-D integer array, got dtype {a.dtype} shape {a.shape}")
    if a.dtype == np.uint64 and a.size and a.max() > np.iinfo(np.int64).max:
        first = int(np.flatnonzero(a > np.iinfo(np.int64).max)[0])
        raise InvalidArgument(
            f"{f}: uint64 values >= 2**63 do not fit int64 ids (they would wrap to negative), "
            f"e.g. entry {first} is {a[first]}"
        )
    return a.astype(np.int64, copy=False)


def float32_features(f: Path, feat: np.ndarray) -> np.ndarray:
    """``feat`` as float32, refusing NaN/inf in the file and values too large for float32."""
    check_finite(str(f), feat)
    with np.errstate(over="ignore"):  # reported just below, naming the file
        feat32 = feat.astype(np.float32, copy=False)
    found = None if feat32 is feat else find_nonfinite(feat32)
    if found is not None:
        count, row, col = found
        raise InvalidArgument(
            f"{f}: {count} feature value(s) beyond the float32 range (features are stored as float32), "
            f"e.g. {feat[row].reshape(-1)[col]} at row {row}, column {col}"
        )
    return feat32


def check_len(f: Path, a: np.ndarray, want: int, what: str) -> None:
    """InvalidArgument naming ``f`` unless ``a`` has ``want`` entries (``what`` says which)."""
    if len(a) != want:
        raise InvalidArgument(f"{f}: has {len(a)} entries, expected as many {what} ({want})")
