"""Typed graphs in files: a directory with ``nodes/`` and ``edges/`` (``--source numpy`` or
``--source csv`` with ``--path DIR``).

A directory that has both a ``nodes/`` and an ``edges/`` subdirectory is read as a typed graph;
anything else is the homogeneous layout of its source. Node types are the entries of ``nodes/``
and edge types those of ``edges/``, each in name order (which fixes the type ids). An edge type
is named ``<src_type>__<relation>__<dst_type>`` (two underscores), its endpoints given as
type-wise ids (numpy) or node names (CSV).

**numpy**::

    DIR/nodes/<ntype>/num_nodes.txt     the node count (optional when the type has a table)
    DIR/nodes/<ntype>/feat.npy          [n, ...] numeric, stored as float32 (optional)
    DIR/nodes/<ntype>/label.npy         integer [n], classes 0..C-1 (optional)
    DIR/nodes/<ntype>/train.npy, val.npy, test.npy   type-wise ids of each split (optional)
    DIR/nodes/<ntype>/<name>.npy        any other table, [n, ...] (floats stored as float32)
    DIR/edges/<src>__<rel>__<dst>/src.npy, dst.npy   integer [E], type-wise ids

A type's node count is ``num_nodes.txt`` or else the row count of its tables (they must agree);
a type with neither is refused rather than sized by the largest id in the edges, which would
silently drop its last, unconnected nodes.

**CSV** (comma- or tab-separated, a header line in every file)::

    DIR/nodes/<ntype>.csv                   name[,label][,split][,<table>_0,<table>_1,...][,<table>]
    DIR/edges/<src>__<rel>__<dst>.csv       source name, destination name

The first column of a node file names the nodes (any text, unique within the type); the
nodes of a type are numbered 0..n-1 in file order. Columns: ``label`` (integer classes 0..C-1),
``split`` (the node's split, e.g. train/val/test; empty: none), ``<table>_<i>`` for i = 0..k-1
(numbers: table ``<table>``, float32 [n, k], e.g. ``feat_0..feat_127``), and any other column
``<table>`` (numbers: float32 [n, 1]). A split column rather than split files keeps each type
in one file and its splits disjoint by construction. An edge file's endpoints are node names
of its source and destination types. ``extra["node_names"]`` holds every name, types in order,
and ``orig_ids`` indexes it (``node_names.npy[orig_ids[gid]]``, as for a CSV of names).

Every problem is refused with InvalidArgument naming the file (and for CSV the line).
"""

from __future__ import annotations

from pathlib import Path

import numpy as np

from graphfeed.common.errors import InvalidArgument, NotFound
from graphfeed.common.schema import CanonicalEtype, check_type_name
from graphfeed.ingest.arrays import float32_features, int_vector, load_npy
from graphfeed.ingest.graph import GraphData, check_ids_in_range, check_labels, hetero_graph

SPLIT_NAMES = ("train", "val", "test")
"""The split files of a numpy node-type directory (``<split>.npy``)."""


def is_typed_layout(path: str | Path | None) -> bool:
    """Whether ``path`` is a directory with ``nodes/`` and ``edges/`` subdirectories."""
    if path is None:
        return False
    d = Path(path)
    return (d / "nodes").is_dir() and (d / "edges").is_dir()


def parse_etype(where: Path, stem: str, ntypes: dict[str, int]) -> CanonicalEtype:
    """The canonical edge type of an edge file or directory named ``<src>__<rel>__<dst>``."""
    parts = stem.split("__")
    if len(parts) != 3 or not all(parts):
        raise InvalidArgument(f"{where}: edge types are named <src_type>__<relation>__<dst_type>, got {stem!r}")
    for t in (parts[0], parts[2]):
        if t not in ntypes:
            raise InvalidArgument(f"{where}: unknown node type {t!r} (the node types are {sorted(ntypes)})")
    try:
        check_type_name("relation", parts[1])
    except InvalidArgument as e:
        raise InvalidArgument(f"{where}: {e}") from e
    return parts[0], parts[1], parts[2]


def _entries(d: Path, want_dirs: bool, suffix: str = "") -> list[Path]:
    """The visible entries of ``d`` (directories, or files ending ``suffix``), by name; others refused."""
    found = sorted(p for p in d.iterdir() if not p.name.startswith("."))
    for p in found:
        if p.is_dir() != want_dirs or not p.name.endswith(suffix):
            what = "a directory" if want_dirs else f"a {suffix} file"
            raise InvalidArgument(f"{p}: everything in {d} must be {what}")
    return found


def _type_name(where: Path, name: str) -> str:
    try:
        return check_type_name("node type", name)
    except InvalidArgument as e:
        raise InvalidArgument(f"{where}: {e}") from e


# -- numpy -------------------------------------------------------------------------------------


def load_numpy_typed(path: str | Path, name: str | None = None, add_reverse: bool = False) -> GraphData:
    """The typed numpy layout (module docstring) as a homogenized :class:`GraphData`.

    Args:
        path: the directory holding ``nodes/`` and ``edges/``.
        name: dataset name (default: the directory name).
        add_reverse: also add ``(dst, "rev_" + rel, src)`` for every edge type.
    """
    d = Path(path)
    sizes: dict[str, int] = {}
    tables: dict[str, dict[str, np.ndarray]] = {}
    splits: dict[str, dict[str, np.ndarray]] = {}
    for nd in _entries(d / "nodes", want_dirs=True):
        t = _type_name(nd, nd.name)
        sizes[t], tables[t], splits[t] = _numpy_node_type(nd)
    if not sizes:
        raise InvalidArgument(f"{d / 'nodes'}: no node types (a directory per type)")
    edges = {}
    for ed in _entries(d / "edges", want_dirs=True):
        s, rel, t = parse_etype(ed, ed.name, sizes)
        ends = []
        for end, ntype in (("src", s), ("dst", t)):
            f = ed / f"{end}.npy"
            if not f.is_file():
                raise NotFound(f"{f} is missing (an edge type directory holds src.npy and dst.npy)")
            ids = int_vector(f, load_npy(f))
            check_ids_in_range(f"{f} ({ntype} ids; {ntype} has {sizes[ntype]} nodes)", ids, sizes[ntype])
            ends.append(ids)
        if len(ends[0]) != len(ends[1]):
            raise InvalidArgument(f"{ed}: src.npy has {len(ends[0])} entries, dst.npy {len(ends[1])}")
        edges[(s, rel, t)] = (ends[0], ends[1])
    return hetero_graph(
        name or d.name, sizes, edges, tables, splits, add_reverse=add_reverse, extra={"layout": "typed numpy"}
    )


def _numpy_node_type(nd: Path) -> tuple[int, dict[str, np.ndarray], dict[str, np.ndarray]]:
    """(node count, tables, splits) of one node-type directory."""
    arrays = {f.stem: load_npy(f) for f in sorted(nd.glob("*.npy"))}
    split_ids = {s: int_vector(nd / f"{s}.npy", arrays.pop(s)) for s in SPLIT_NAMES if s in arrays}
    n, source = _numpy_count(nd, arrays)
    tables = {}
    for key, a in arrays.items():
        f = nd / f"{key}.npy"
        if a.ndim == 0 or len(a) != n:
            raise InvalidArgument(f"{f}: {a.shape[0] if a.ndim else 'no'} rows, but {source} says {n} {nd.name} nodes")
        if key == "label":
            a = int_vector(f, a)
            check_labels(str(f), a, n)
        elif np.issubdtype(a.dtype, np.floating):
            a = float32_features(f, a)
        elif not (np.issubdtype(a.dtype, np.number) or np.issubdtype(a.dtype, np.bool_)):
            raise InvalidArgument(f"{f}: a node table must be numeric, got dtype {a.dtype}")
        tables[key] = a
    for s, ids in split_ids.items():
        check_ids_in_range(f"{nd / s}.npy ({nd.name} ids)", ids, n)
    return n, tables, split_ids


def _numpy_count(nd: Path, arrays: dict[str, np.ndarray]) -> tuple[int, str]:
    """A node type's node count and what gave it (num_nodes.txt, or its first table)."""
    f = nd / "num_nodes.txt"
    if f.is_file():
        text = f.read_text().strip()
        if not text.isdigit():
            raise InvalidArgument(f"{f}: expected the node count (an integer >= 0), got {text[:40]!r}")
        return int(text), "num_nodes.txt"
    for key, a in arrays.items():
        if a.ndim:
            return len(a), f"{key}.npy"
    raise InvalidArgument(
        f"{nd}: node type {nd.name!r} has no table to count its nodes; give its node count in num_nodes.txt"
    )


# -- CSV ---------------------------------------------------------------------------------------


def load_csv_typed(path: str | Path, name: str | None = None, add_reverse: bool = False) -> GraphData:
    """The typed CSV layout (module docstring) as a homogenized :class:`GraphData`.

    Args:
        path: the directory holding ``nodes/`` and ``edges/``.
        name: dataset name (default: the directory name).
        add_reverse: also add ``(dst, "rev_" + rel, src)`` for every edge type.
    """
    d = Path(path)
    names: dict[str, np.ndarray] = {}
    tables: dict[str, dict[str, np.ndarray]] = {}
    splits: dict[str, dict[str, np.ndarray]] = {}
    for f in _entries(d / "nodes", want_dirs=False, suffix=".csv"):
        t = _type_name(f, f.stem)
        names[t], tables[t], splits[t] = _csv_node_type(f)
    if not names:
        raise InvalidArgument(f"{d / 'nodes'}: no node types (a <ntype>.csv per type)")
    sizes = {t: len(v) for t, v in names.items()}
    lookup = {t: (v, np.argsort(v, kind="stable")) for t, v in names.items()}
    edges = {}
    for f in _entries(d / "edges", want_dirs=False, suffix=".csv"):
        s, rel, t = parse_etype(f, f.stem, sizes)
        cols, lines = _read_csv(f, {0: "string", 1: "string"}, exact_columns=2)
        edges[(s, rel, t)] = (_name_ids(f, cols[0], lines, *lookup[s], s), _name_ids(f, cols[1], lines, *lookup[t], t))
    starts = np.cumsum([0, *sizes.values()])
    return hetero_graph(
        name or d.name,
        sizes,
        edges,
        tables,
        splits,
        add_reverse=add_reverse,
        orig_ids={t: starts[i] + np.arange(sizes[t]) for i, t in enumerate(sizes)},
        extra={"layout": "typed csv", "node_names": np.concatenate(list(names.values())).astype(str)},
    )


def _csv_node_type(f: Path) -> tuple[np.ndarray, dict[str, np.ndarray], dict[str, np.ndarray]]:
    """(node names, tables, splits) of one node file."""
    header = _header(f)
    kinds = {
        i: ("string" if i == 0 or c == "split" else "int64" if c == "label" else "float64")
        for i, c in enumerate(header)
    }
    cols, lines = _read_csv(f, kinds, exact_columns=None)
    names = cols[0]
    _check_unique_names(f, names, lines)
    n = len(names)
    tables: dict[str, np.ndarray] = {}
    grouped: dict[str, dict[int, np.ndarray]] = {}
    split_ids: dict[str, np.ndarray] = {}
    for i, column in enumerate(header[1:], start=1):
        values = cols[i]
        if column == "split":
            present = values != ""
            for s in np.unique(values[present]):
                split_ids[str(s)] = np.flatnonzero(values == s).astype(np.int64)
        elif column == "label":
            tables["label"] = values
            check_labels(f"{f}: column 'label'", values, n)
        else:
            table, _, index = column.rpartition("_")
            if table and index.isdigit():
                grouped.setdefault(table, {})[int(index)] = values
            else:
                tables[column] = values.astype(np.float32).reshape(n, 1)
    for table, by_index in grouped.items():
        if sorted(by_index) != list(range(len(by_index))):
            raise InvalidArgument(
                f"{f}: columns {table}_<i> must number 0..k-1 without gaps, got {sorted(by_index)[:10]}"
            )
        if table in tables:
            raise InvalidArgument(f"{f}: table {table!r} is given both as one column and as {table}_<i> columns")
        tables[table] = float32_features(f, np.stack([by_index[i] for i in range(len(by_index))], axis=1))
    return names, tables, split_ids


def _header(f: Path) -> list[str]:
    with open(f, encoding="utf-8-sig") as fh:
        line = fh.readline().rstrip("\r\n")
    fields = [x.strip().strip('"') for x in line.split("\t" if "\t" in line else ",")]
    if len(fields) < 1 or not fields[0]:
        raise InvalidArgument(f"{f}: expected a header line (name[,label][,split][,feature columns...])")
    repeated = sorted({c for c in fields if fields.count(c) > 1})
    if repeated:
        raise InvalidArgument(f"{f}: header names {repeated} more than once")
    return fields


def _read_csv(f: Path, kinds: dict[int, str], exact_columns: int | None) -> tuple[list[np.ndarray], np.ndarray]:
    """The columns of a CSV with a header line (pyarrow types by position: "string", "int64",
    "float64") and each row's line number. Blank lines are skipped but counted, so line numbers
    are the file's (the header is line 1). An empty value is refused, except in a split column."""
    import pyarrow as pa  # noqa: PLC0415 - pyarrow is slow to import; only file sources need it
    import pyarrow.csv as pacsv  # noqa: PLC0415

    header = _header(f)
    if exact_columns is not None and len(header) != exact_columns:
        raise InvalidArgument(f"{f}: expected {exact_columns} columns (source,destination), the header has {header}")
    types = {f"c{i}": getattr(pa, kinds[i])() for i in range(len(header))}
    with open(f, encoding="utf-8-sig") as fh:
        delimiter = "\t" if "\t" in fh.readline() else ","
    try:
        table = pacsv.read_csv(
            f,
            read_options=pacsv.ReadOptions(skip_rows=1, column_names=list(types)),
            parse_options=pacsv.ParseOptions(delimiter=delimiter, ignore_empty_lines=False),
            convert_options=pacsv.ConvertOptions(column_types=types, strings_can_be_null=False),
        )
    except (pa.ArrowInvalid, pa.ArrowTypeError) as e:
        raise InvalidArgument(f"{f}: not a CSV of columns {header} ({e})") from e
    missing = [_missing(table.column(c)) for c in types]
    keep = ~np.logical_and.reduce(missing)  # a blank line: every field empty
    lines = np.arange(2, table.num_rows + 2)[keep]
    for i, miss in enumerate(missing):
        if kinds[i] == "string" and i > 0:
            continue  # an empty split: the node is in none
        if miss[keep].any():
            raise InvalidArgument(f"{f}: line {int(lines[np.flatnonzero(miss[keep])[0]])}: no {header[i]!r} value")
    cols = [table.column(c).to_numpy(zero_copy_only=False)[keep] for c in types]  # ints with blanks: floats
    as_type = {"string": str, "int64": np.int64, "float64": np.float64}
    return [c.astype(as_type[kinds[i]]) for i, c in enumerate(cols)], lines


def _missing(col: object) -> np.ndarray:
    """Which entries of a pyarrow column are empty (null, or "" for strings)."""
    import pyarrow as pa  # noqa: PLC0415
    import pyarrow.compute as pc  # noqa: PLC0415

    empty = pc.equal(col, "") if col.type == pa.string() else col.is_null()  # type: ignore[attr-defined]
    return pc.fill_null(empty, True).to_numpy(zero_copy_only=False).astype(bool)


def _check_unique_names(f: Path, names: np.ndarray, lines: np.ndarray) -> None:
    order = np.argsort(names, kind="stable")
    same = np.flatnonzero(names[order][1:] == names[order][:-1])
    if len(same):
        first, second = order[same[0]], order[same[0] + 1]
        raise InvalidArgument(
            f"{f}: line {int(lines[second])}: node name {str(names[first])[:40]!r} "
            f"is already on line {int(lines[first])}"
        )


def _name_ids(
    f: Path, given: np.ndarray, lines: np.ndarray, names: np.ndarray, order: np.ndarray, ntype: str
) -> np.ndarray:
    """Type-wise ids of the node names in ``given`` (a column of edge file ``f``)."""
    if not len(names):
        bad = np.ones(len(given), dtype=bool)
        pos = np.zeros(len(given), dtype=np.int64)
    else:
        pos = np.minimum(np.searchsorted(names, given, sorter=order), len(names) - 1)
        pos = order[pos]
        bad = names[pos] != given
    if bad.any():
        i = int(np.flatnonzero(bad)[0])
        raise InvalidArgument(
            f"{f}: line {int(lines[i])}: unknown {ntype} node {str(given[i])[:40]!r} "
            f"(not in nodes/{ntype}.csv; {int(bad.sum())} such endpoint(s))"
        )
    return pos.astype(np.int64)
