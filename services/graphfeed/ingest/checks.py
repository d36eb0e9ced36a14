"""Checks of ingested arrays that name what they check (a file, or "graph: node data 'feat'"),
so that sources can run them on their files and :meth:`GraphData.validate` on any source's arrays."""

from __future__ import annotations

import logging
from collections.abc import Callable

import numpy as np

from graphfeed.common.errors import InvalidArgument

log = logging.getLogger(__name__)

_FINITE_CHUNK_ELEMENTS = 1 << 24  # ~64 MiB of bools per step: features can be tens of GiB


def check_ids_in_range(where: str, ids: np.ndarray, n: int) -> None:
    """Raises InvalidArgument unless every node id is in ``[0, n)``, naming the first bad entry."""
    if not len(ids):
        return
    lo, hi = ids.min(), ids.max()
    if lo >= 0 and hi < n:
        return
    first = int(np.flatnonzero((ids < 0) | (ids >= n))[0])
    raise InvalidArgument(
        f"{where}: node ids must be in [0, {n}), got [{lo}, {hi}] (e.g. entry {first} is {ids[first]})"
    )


def check_finite(where: str, table: np.ndarray) -> None:
    """Raises InvalidArgument if a float ``table`` holds NaN or ±inf, naming the first such entry."""
    found = find_nonfinite(table)
    if found is not None:
        count, row, col = found
        raise InvalidArgument(
            f"{where}: values must be finite, found {count} NaN/inf value(s), e.g. {table[row].reshape(-1)[col]} "
            f"at row {row}, column {col}"
        )


def find_nonfinite(table: np.ndarray) -> tuple[int, int, int] | None:
    """(count, row, flat column of the first) of the NaN/±inf entries of a float table, or None."""
    if not np.issubdtype(table.dtype, np.floating) or table.size == 0:
        return None
    rows = table.reshape(len(table), -1)
    step = max(1, _FINITE_CHUNK_ELEMENTS // max(1, rows.shape[1]))
    count, first = 0, (0, 0)
    for start in range(0, len(rows), step):  # chunks: no bool copy of a table that may be huge
        bad = ~np.isfinite(rows[start : start + step])
        if count == 0 and bad.any():
            row, col = (int(x) for x in np.argwhere(bad)[0])
            first = (start + row, col)
        count += int(np.count_nonzero(bad))
    return (count, *first) if count else None


def check_labels(where: str, labels: np.ndarray, n: int, describe: Callable[[int], str] | None = None) -> int:
    """Checks class ids ``0..C-1`` (there is no "unlabeled" value) and returns C = max + 1.

    ``describe(i)`` names node ``i`` in a refusal as the user knows it (default ``node i``; a CSV
    names the node's id and line).
    """
    name = describe or (lambda i: f"node {i}")
    if not len(labels):
        return 0
    if labels.min() < 0:
        first = int(np.flatnonzero(labels < 0)[0])
        raise InvalidArgument(
            f"{where}: labels must be class ids >= 0 (there is no 'unlabeled' value: give such nodes any "
            "class and leave them out of the splits), "
            f"got {int((labels < 0).sum())} negative (e.g. {name(first)} has label {labels[first]})"
        )
    num_classes = int(labels.max()) + 1
    if num_classes > n:
        first = int(np.argmax(labels))
        raise InvalidArgument(
            f"{where}: labels are not class ids: max label {labels[first]} ({name(first)}) "
            f"would mean {num_classes} classes for {n} nodes"
        )
    unused = np.flatnonzero(np.bincount(labels.astype(np.int64), minlength=num_classes) == 0)
    used = num_classes - len(unused)
    if len(unused) > used:  # e.g. a stray 1000 among labels 0 and 1: 1001 model outputs, 998 never seen
        raise InvalidArgument(
            f"{where}: labels are not class ids 0..C-1: {used} distinct values up to {num_classes - 1}, so "
            f"{len(unused)} of the ids 0..{num_classes - 1} have no node (e.g. {unused[0]}); remap them to "
            f"0..{used - 1} (np.unique(labels, return_inverse=True)[1])"
        )
    if len(unused):
        log.warning(
            "%s: %d of the class ids 0..%d have no node (e.g. %s); the model still gets %d outputs",
            where,
            len(unused),
            num_classes - 1,
            unused[:5].tolist(),
            num_classes,
        )
    return num_classes


def check_splits(splits: dict[str, np.ndarray], n: int, train: str | None) -> None:
    """Checks the splits (keyed by ``where``): ids in ``[0, n)``, no duplicate ids, no id in two
    splits, and the one keyed ``train`` (if given) not empty."""
    owner = np.full(n, -1, dtype=np.int8 if len(splits) < 127 else np.int64)
    names = list(splits)
    for i, (where, ids) in enumerate(splits.items()):
        if not len(ids) and where == train:
            raise InvalidArgument(f"{where}: the train split is empty; training needs at least one node")
        check_ids_in_range(where, ids, n)
        ids = np.asarray(ids, dtype=np.int64)
        dup = _first_duplicate(ids)
        if dup is not None:
            raise InvalidArgument(
                f"{where}: node ids must be distinct, node {dup} is listed {int((ids == dup).sum())} times"
            )
        taken = owner[ids] >= 0
        if taken.any():
            v = int(ids[np.flatnonzero(taken)[0]])
            raise InvalidArgument(
                f"{where}: splits must be disjoint, {int(taken.sum())} node(s) are also in {names[owner[v]]} "
                f"(e.g. node {v})"
            )
        owner[ids] = i


def _first_duplicate(ids: np.ndarray) -> int | None:
    s = np.sort(ids)
    same = np.flatnonzero(s[1:] == s[:-1])
    return int(s[same[0]]) if len(same) else None
