"""The nodes of an edge-list CSV: its ids (integers or names, ``--node-ids``) together with the
nodes of its labels and features files, and those files' rows in node order.

A node named only in a labels or features file is an isolated node (real graphs have them:
polblogs, WordNet). Every refusal names the file, the line and the node as the user wrote it.
"""

from __future__ import annotations

import itertools
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path

import numpy as np

from graphfeed.common.errors import InvalidArgument
from graphfeed.ingest.csv_lines import id_kind, is_int, is_number, parse_ints, read_rows

NODE_COLUMN_WORDS = ("node", "id", "node_id", "name", "src")
"""A labels/features file whose first line starts with one of these has a header line."""


@dataclass
class NodeTable:
    """A ``node,v1,v2,...`` file as read: node text, value columns (text), the line of each row."""

    path: Path
    what: str
    nodes: list[str]
    values: list[list[str]]
    lines: np.ndarray

    def labels(self, at: np.ndarray, ids: NodeIds) -> np.ndarray:
        """The label of every node (int64 [N]); a non-integer label is refused, naming node and line."""
        if len(self.values) != 1:
            raise InvalidArgument(f"{self.path}: expected node,label columns, got {len(self.values) + 1}")
        texts = self.values[0]
        bad = next((i for i, x in enumerate(texts) if not is_int(x)), None)
        if bad is not None:
            raise InvalidArgument(
                f"{self.path}: line {self.lines[bad]}: node {ids.show(int(at[bad]))} has label {texts[bad][:40]!r}; "
                "labels are integer class ids 0..C-1"
            )
        out = np.empty(ids.num_nodes, dtype=np.int64)
        out[at] = parse_ints(self.path, texts, self.lines, "label")
        return out

    def features(self, at: np.ndarray, ids: NodeIds) -> np.ndarray:
        """Every node's row (float32 [N, F]); a non-number or NaN/inf is refused, naming node and line."""
        out = np.empty((ids.num_nodes, len(self.values)), dtype=np.float32)
        for c, texts in enumerate(self.values):
            try:
                with np.errstate(over="ignore"):  # 1e300 is inf as float32: refused below, by node
                    col = np.array(texts, dtype=np.float64).astype(np.float32)
                bad = int(np.argmin(np.isfinite(col)))
                ok = bool(np.isfinite(col[bad]))
            except ValueError:
                bad, ok = next(i for i, x in enumerate(texts) if not is_number(x)), False
            if not ok:
                raise InvalidArgument(
                    f"{self.path}: line {self.lines[bad]}: node {ids.show(int(at[bad]))} has feature {c + 1} "
                    f"= {texts[bad][:40]!r}; features must be finite float32 numbers (no NaN or infinity)"
                )
            out[at, c] = col
        return out

    def describe(self, at: np.ndarray, ids: NodeIds) -> Callable[[int], str]:
        """Names node ``i`` for a refusal: its id as written and its line in this file."""
        line_of = np.zeros(ids.num_nodes, dtype=np.int64)
        line_of[at] = self.lines
        return lambda i: f"node {ids.show(i)} (line {line_of[i]})"


def read_node_table(f: Path, what: str) -> NodeTable:
    """A labels or features file: ``node,v1,...`` per line, maybe below a header line (one
    starting with a word of :data:`NODE_COLUMN_WORDS`, or whose values are not all numbers)."""
    rows = read_rows(f)
    first_no, first = next(rows, (0, []))
    if not first:
        raise InvalidArgument(f"{f}: empty {what} file")
    if len(first) < 2:
        raise InvalidArgument(f"{f}: line {first_no}: expected a node and its {what}, got {first!r}")
    has_header = first[0].lower() in NODE_COLUMN_WORDS or not all(is_number(x) for x in first[1:])
    nodes, lines = [first[0]], [first_no]
    values: list[list[str]] = [[x] for x in first[1:]]
    for no, fields in rows:
        if len(fields) != len(first):
            raise InvalidArgument(
                f"{f}: line {no} has {len(fields)} fields, line {first_no} has {len(first)}: {fields[:4]!r}"
            )
        nodes.append(fields[0])
        for col, x in zip(values, fields[1:]):
            col.append(x)
        lines.append(no)
    if has_header:
        nodes, lines, values = nodes[1:], lines[1:], [col[1:] for col in values]
    if not nodes:
        raise InvalidArgument(f"{f}: no {what} below the header line {first!r}")
    return NodeTable(f, what, nodes, values, np.asarray(lines, dtype=np.int64))


@dataclass
class NodeIds:
    """The graph's nodes: ``keys`` (sorted int64 ids, or sorted names), edges and table rows as
    positions among them."""

    keys: np.ndarray
    is_names: bool
    src: np.ndarray
    dst: np.ndarray
    table_rows: list[np.ndarray]

    @property
    def num_nodes(self) -> int:
        return len(self.keys)

    @property
    def orig_ids(self) -> np.ndarray:
        """The input id of each node, or for names its position in :attr:`names`."""
        return np.arange(len(self.keys), dtype=np.int64) if self.is_names else self.keys

    @property
    def names(self) -> np.ndarray | None:
        return self.keys if self.is_names else None

    def show(self, i: int) -> str:
        """Node ``i`` as the user wrote it."""
        return repr(str(self.keys[i])[:60]) if self.is_names else str(int(self.keys[i]))

    @classmethod
    def build(
        cls, f: Path, src: list[str], dst: list[str], lines: np.ndarray, tables: list[NodeTable], mode: str
    ) -> NodeIds:
        """The nodes of the edge list ``f`` (ids ``src``/``dst`` from ``lines``) and of ``tables``,
        read as integers or names by ``mode`` (``--node-ids``); each table must list every node once."""
        both, ids = np.concatenate([lines, lines]), src + dst
        if id_kind(f, ids, both, mode) == "int":
            hint = "; the edge list's node ids are read as integers (--node-ids name reads them as names)"
            parts = [parse_ints(f, ids, both, "node", hint)]
            parts += [parse_ints(t.path, t.nodes, t.lines, "node", hint) for t in tables]
        else:
            parts = [np.array(ids, dtype=str), *(np.array(t.nodes, dtype=str) for t in tables)]
        keys, inverse = np.unique(np.concatenate(parts), return_inverse=True)
        inverse = inverse.reshape(-1).astype(np.int64)
        e = len(src)
        bounds = np.cumsum([2 * e, *(len(t.nodes) for t in tables)])
        rows = [inverse[lo:hi] for lo, hi in itertools.pairwise(bounds)]
        out = cls(keys, keys.dtype.kind == "U", inverse[:e], inverse[e : 2 * e], rows)
        for t, at in zip(tables, rows):
            out._check_once(t, at)
        return out

    def _check_once(self, t: NodeTable, at: np.ndarray) -> None:
        order = np.argsort(at, kind="stable")
        ranked = at[order]
        dup = np.flatnonzero(ranked[1:] == ranked[:-1])
        if len(dup):
            i, j = order[dup[0]], order[dup[0] + 1]
            raise InvalidArgument(
                f"{t.path}: line {t.lines[j]}: node {self.show(int(at[j]))} is listed again (first on line "
                f"{t.lines[i]}); give each node once"
            )
        if len(at) != self.num_nodes:
            missing = np.ones(self.num_nodes, dtype=bool)
            missing[at] = False
            raise InvalidArgument(
                f"{t.path}: {len(at)} lines for {self.num_nodes} nodes: node "
                f"{self.show(int(np.flatnonzero(missing)[0]))} has none; give every node of the graph "
                f"(edge list, labels and features files) exactly once"
            )
