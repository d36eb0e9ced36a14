"""Edge-list CSV input (``graphfeed ingest --source csv``): what real edge lists look like (SNAP
comments, BOMs, quotes, tab/comma/semicolon/space, integer ids or node names, a timestamp column,
weight-like columns kept as edge features), read by the rules of :mod:`graphfeed.ingest.csv_lines`."""

from __future__ import annotations

from array import array
from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path

import numpy as np

from graphfeed.common.errors import InvalidArgument, NotFound
from graphfeed.ingest.csv_lines import (
    HEADER_CHOICES,
    NODE_ID_CHOICES,
    all_ints,
    is_int,
    is_number,
    parse_ints,
    read_rows,
)
from graphfeed.ingest.csv_nodes import NodeIds, read_node_table
from graphfeed.ingest.graph import DEFAULT_FRACTIONS, GraphData, check_labels, random_split, symmetrize_edges
from graphfeed.ingest.typed_layouts import is_typed_layout, load_csv_typed


def load_edge_csv(
    path: str | Path,
    *,
    num_features: int = 0,
    seed: int = 0,
    undirected: bool = False,
    split_seed: int = 0,
    fractions: tuple[float, float, float] = DEFAULT_FRACTIONS,
    delimiter: str | None = None,
    name: str | None = None,
    labels: str | Path | None = None,
    features: str | Path | None = None,
    columns: Sequence[str] | None = None,
    add_reverse: bool = False,
    header: str | None = "auto",
    node_ids: str | None = "auto",
) -> GraphData:
    """An edge list: one edge per line, ``src,dst`` and maybe more columns; node ids integers or
    names.

    Lines are read by the rules of :mod:`graphfeed.ingest.csv_lines` (``#``/``%`` comment lines
    anywhere, a BOM, whitespace and matching quotes around fields stripped, empty fields refused,
    tab/comma/semicolon/space). Columns are named by ``columns``, else by a header line, else a
    two-column file is ``src,dst``; a file of more columns with neither is refused (its third
    column could be a time or a weight: never guessed). Names: ``src``/``source``/``from``/``u``
    and ``dst``/``target``/``to``/``v`` (a header naming neither: its first two columns),
    ``ts``/``t``/``time``/``timestamp`` (integer timestamps), ``-`` (skipped), and any other name a
    numeric edge feature (e.g. ``weight``: ``edge_feat`` columns in that order, their names in
    ``extra["edge_feat_columns"]``).

    ``header`` auto: the first line is a header when it names a known column (``src``, ``from``,
    ``ts``...), or holds non-integer ids above integer ids; a first line of names is an edge when
    one of its nodes appears on another line, and refused otherwise (pass yes or no).

    The nodes are the distinct ids (ascending) of the edge list and of the labels/features files
    (a node only named there is an isolated node); ``orig_ids`` keeps them, or, for names, their
    positions in ``extra["node_names"]`` (``node_names.npy`` next to the partitions). There are
    no labels (num_classes 0) unless ``labels``; "feat" is seeded N(0, 1) noise when
    ``num_features > 0``.

    Args:
        path: the CSV file.
        num_features: width of the random "feat" table (0: none).
        seed: seed of the random features.
        undirected: add reverse edges (see :func:`symmetrize`).
        split_seed: seed of the random train/val/test split.
        fractions: train/val/test fractions.
        delimiter: field separator (default: the first of tab, comma, semicolon, space in the first line).
        name: dataset name (default: the file's stem).
        labels: a CSV of ``node,label`` (node id or name as in the edge list, integer class
            0..C-1), one line per node of the graph: the graph can then be trained on.
        features: a CSV of ``node,x1,x2,...`` (numbers), one line per node: "feat" instead of
            random noise.
        columns: the name of every column, in order (a header line is then skipped, not read).
        add_reverse: typed layout only: also add ``rev_`` edge types (an edge list is refused).
        header: "auto", "yes" or "no" (:data:`HEADER_CHOICES`): whether the first line names the columns.
        node_ids: "auto", "int" or "name" (:data:`NODE_ID_CHOICES`): "int" reads ``007`` as
            node 7 and refuses other ids, "name" keeps every id as text (``007`` and ``7`` are two
            nodes), "auto" is int when every id is an integer, name when none is.

    A directory with ``nodes/`` and ``edges/`` is a typed graph instead
    (:func:`graphfeed.ingest.typed_layouts.load_csv_typed`), which takes only ``name`` and ``add_reverse``.
    """
    f = Path(path)
    if is_typed_layout(f):
        _refuse_edge_list_options(f, undirected, num_features, labels, features, columns, header, node_ids)
        return load_csv_typed(f, name=name, add_reverse=add_reverse)
    if add_reverse:
        raise InvalidArgument(f"{f}: --add-reverse is for typed graphs (a directory of nodes/ and edges/)")
    if f.is_dir():
        raise InvalidArgument(
            f"csv source: {f} is a directory; give the edge-list file (a directory of .npy files is --source numpy)"
        )
    if not f.exists():
        raise NotFound(f"csv source: {f} does not exist")
    header, node_ids = header or "auto", node_ids or "auto"
    if header not in HEADER_CHOICES or node_ids not in NODE_ID_CHOICES:
        raise InvalidArgument(f"header must be one of {HEADER_CHOICES}, node_ids one of {NODE_ID_CHOICES}")
    edges = _read_edge_csv(f, delimiter, columns, header)
    tables = [read_node_table(Path(p), what) for what, p in (("labels", labels), ("features", features)) if p]
    nodes = NodeIds.build(f, edges.src, edges.dst, edges.lines, tables, node_ids)
    src, dst, ts, efeat = nodes.src, nodes.dst, edges.ts, edges.edge_feat
    if undirected:
        src, dst, ts, efeat = symmetrize_edges(src, dst, ts, efeat)
    n = nodes.num_nodes
    node_data: dict[str, np.ndarray] = {}
    num_classes = 0
    for t, at in zip(tables, nodes.table_rows):
        if t.what == "labels":
            node_data["label"] = t.labels(at, nodes)
            num_classes = check_labels(str(t.path), node_data["label"], n, t.describe(at, nodes))
        else:
            node_data["feat"] = t.features(at, nodes)
    if "feat" not in node_data and num_features > 0:
        node_data["feat"] = np.random.default_rng(seed).standard_normal((n, num_features), dtype=np.float32)
    names = nodes.names
    return GraphData(
        name=name or f.stem,
        num_nodes=n,
        src=src,
        dst=dst,
        node_data=node_data,
        splits=random_split(n, fractions, split_seed),
        num_classes=num_classes,
        edge_ts=ts,
        edge_feat=efeat,
        orig_ids=nodes.orig_ids,
        extra={
            "undirected": undirected,
            **({"node_names": names} if names is not None else {}),
            **({"edge_feat_columns": edges.feat_names} if edges.feat_names else {}),
        },
    )


def _refuse_edge_list_options(
    d: Path,
    undirected: bool,
    num_features: int,
    labels: str | Path | None,
    features: str | Path | None,
    columns: Sequence[str] | None,
    header: str | None = None,
    node_ids: str | None = None,
) -> None:
    """A typed CSV directory carries its own labels and features: the edge list's options are refused
    (``header``/``node_ids`` other than None or "auto")."""
    given = [
        flag
        for flag, on in (
            ("--undirected (use --add-reverse)", undirected),
            ("--feat-dim", num_features > 0),
            ("--labels", labels is not None),
            ("--features", features is not None),
            ("--columns", columns is not None),
            ("--header", header not in (None, "auto")),
            ("--node-ids", node_ids not in (None, "auto")),
        )
        if on
    ]
    if given:
        raise InvalidArgument(
            f"{d}: a typed CSV directory (nodes/ and edges/) has its labels and features in nodes/<type>.csv; "
            f"{', '.join(given)} only apply to an edge-list file"
        )


TS_COLUMN_NAMES = ("ts", "t", "time", "timestamp")
"""Header names an edge CSV may give its (integer) timestamp column."""
ENDPOINT_WORDS = {"source": "src", "target": "dst", "from": "src", "to": "dst"}
"""Header words for the endpoints besides ``src`` and ``dst`` (``u,v`` too, as a pair: see :func:`_has_header`)."""
HEADER_WORDS = frozenset({"src", "dst", *ENDPOINT_WORDS, *TS_COLUMN_NAMES})
"""A first line holding one of these words is a header (``--header auto``)."""


def _roles(f: Path, fields: list[str], header: bool, columns: Sequence[str] | None) -> list[str]:
    """Each column's role: "src", "dst", "ts", "-" (skipped) or an edge feature's name."""
    if columns is not None:
        names = [c.strip().lower() for c in columns]
        if len(names) != len(fields):
            raise InvalidArgument(f"{f}: --columns names {len(names)} columns, the file has {len(fields)}: {fields!r}")
    elif header:
        names = [x.lower() for x in fields]
    elif len(fields) == 2:
        names = ["src", "dst"]
    else:
        raise InvalidArgument(
            f"{f}: {len(fields)} columns and no header line: name them with --columns (e.g. src,dst,ts for "
            f"timestamps, src,dst,weight for an edge feature, - to skip a column) or add a header: {fields!r}"
        )
    names = [ENDPOINT_WORDS.get(x, "ts" if x in TS_COLUMN_NAMES else x) for x in names]
    if header and columns is None and not {"src", "dst"} & set(names):
        names = ["src", "dst", *names[2:]]  # a header with its own words for the endpoints (from,to)
    for role in ("src", "dst"):
        if names.count(role) != 1:
            raise InvalidArgument(f"{f}: columns {names!r} need exactly one {role} column")
    repeated = sorted({x for x in names if x != "-" and names.count(x) > 1})
    if repeated:
        raise InvalidArgument(f"{f}: column names {repeated!r} appear more than once in {names!r}")
    return names


@dataclass
class _Edges:
    """An edge list as read: the id text of each endpoint, the line of each edge, typed columns."""

    src: list[str]
    dst: list[str]
    lines: np.ndarray
    ts: np.ndarray | None
    edge_feat: np.ndarray | None
    feat_names: list[str]


def _read_edge_csv(f: Path, delimiter: str | None, columns: Sequence[str] | None, header: str) -> _Edges:
    """The edge list's columns by role (see :func:`load_edge_csv`); a line of another width, a
    non-integer ``ts`` or a non-numeric edge feature is refused, naming its line."""
    rows = read_rows(f, delimiter)
    first_no, first = next(rows, (0, []))
    if not first:
        raise InvalidArgument(f"{f}: empty edge list")
    cols: list[list[str]] = [[] for _ in first]
    body: list[list[str]] = []
    lines = array("q", [first_no])  # 8 bytes a line, not a Python int each
    for no, fields in rows:
        if len(fields) != len(first):
            raise InvalidArgument(
                f"{f}: line {no} has {len(fields)} fields, line {first_no} has {len(first)}: {fields[:4]!r}"
            )
        body.append(fields)
        lines.append(no)
        if len(body) == _ROWS_PER_BLOCK:  # rows to columns in blocks: fast, and never two copies of the file
            _extend(cols, body)
    _extend(cols, body)
    has_header = _has_header(f, first_no, first, cols, header)
    if has_header:
        lines = lines[1:]
    else:
        cols = [[x, *col] for x, col in zip(first, cols)]
    if not lines:
        raise InvalidArgument(f"{f}: no edges below the header line {first!r}")
    roles = _roles(f, first, has_header, columns)
    at = np.frombuffer(lines, dtype=np.int64)
    by_role = dict(zip(roles, cols))
    feat_names = [x for x in roles if x not in ("src", "dst", "ts", "-")]
    feats = [_numbers(f, by_role[x], at, x) for x in feat_names]
    return _Edges(
        src=by_role["src"],
        dst=by_role["dst"],
        lines=at,
        ts=parse_ints(f, by_role["ts"], at, "timestamp") if "ts" in by_role else None,
        edge_feat=np.stack(feats, axis=1) if feats else None,
        feat_names=feat_names,
    )


_ROWS_PER_BLOCK = 1 << 16


def _extend(cols: list[list[str]], body: list[list[str]]) -> None:
    """Appends ``body``'s rows to the columns ``cols`` and empties it."""
    for col, values in zip(cols, zip(*body)):
        col.extend(values)
    body.clear()


def _has_header(f: Path, no: int, first: list[str], cols: list[list[str]], header: str) -> bool:
    """Whether the first data line names the columns (``--header``; auto: see :func:`load_edge_csv`)."""
    if header != "auto":
        return header == "yes"
    words = [x.lower() for x in first]
    if HEADER_WORDS & set(words) or words[:2] == ["u", "v"]:
        return True
    ids, below = first[:2], cols[:2]
    if all(is_int(x) for x in ids) or not below[0]:
        return False
    if all(all_ints(col) for col in below):
        return True  # words above integer ids
    if any(x in col for col in below for x in ids):
        return False  # names: the first line's nodes are on other lines too, so it is an edge
    raise InvalidArgument(
        f"{f}: line {no} {first!r} may be a header or an edge (node names, none of them on another line); "
        "pass --header yes or --header no"
    )


def _numbers(f: Path, texts: list[str], lines: np.ndarray, column: str) -> np.ndarray:
    """An edge feature column as float32; a non-number or NaN/inf is refused, naming its line."""
    try:
        with np.errstate(over="ignore"):  # 1e300 is inf as float32: refused below, by line
            values = np.array(texts, dtype=np.float64).astype(np.float32)
    except ValueError:
        bad = next(i for i, x in enumerate(texts) if not is_number(x))
        raise InvalidArgument(
            f"{f}: line {lines[bad]}: column {column!r} holds {texts[bad][:40]!r}; edge features must be numbers "
            "(--columns names a column - to skip it)"
        ) from None
    finite = np.isfinite(values)
    if not finite.all():
        bad = int(np.flatnonzero(~finite)[0])
        raise InvalidArgument(
            f"{f}: line {lines[bad]}: column {column!r} holds {texts[bad]!r}; edge features must be finite"
        )
    return values
