"""Edge-list CSV input (``graphfeed ingest --source csv``): what real edge lists look like (SNAP
comments, BOMs, quotes, tab/comma/semicolon/space, integer ids or node names, a timestamp column,
weight-like columns kept as edge features)."""

from __future__ import annotations

from collections.abc import Sequence
from pathlib import Path

import numpy as np

from graphfeed.common.errors import InvalidArgument, NotFound
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
) -> GraphData:
    """An edge list: one edge per line, ``src,dst`` and maybe more columns; node ids integers or
    names.

    Leading ``#``/``%`` comment lines (SNAP) and a UTF-8 BOM are skipped; quotes around fields are
    fine; the delimiter is tab, comma, semicolon or space (the first found). Columns are named by
    ``columns``, else by a header line, else a two-column file is ``src,dst``; a file of more
    columns with neither is refused (its third column could be a time or a weight: never guessed).
    Names: ``src``/``source`` and ``dst``/``target`` (a header naming neither: its first two
    columns), ``ts``/``t``/``time``/``timestamp`` (integer timestamps), ``-`` (skipped), and any
    other name a numeric edge feature (e.g. ``weight``: ``edge_feat`` columns in that order, their
    names in ``extra["edge_feat_columns"]``). The nodes are the distinct ids (ascending); ``orig_ids`` keeps them,
    or, for names, their positions in ``extra["node_names"]`` (``node_names.npy`` next to the
    partitions). There are no labels (num_classes 0); "feat" is seeded N(0, 1) noise when
    ``num_features > 0``.

    Args:
        path: the CSV file.
        num_features: width of the random "feat" table (0: none).
        seed: seed of the random features.
        undirected: add reverse edges (see :func:`symmetrize`).
        split_seed: seed of the random train/val/test split.
        fractions: train/val/test fractions.
        delimiter: field separator (default: tab if the first line has one, else comma).
        name: dataset name (default: the file's stem).
        labels: a CSV of ``node,label`` (node id or name as in the edge list, integer class
            0..C-1), one line per node of the graph: the graph can then be trained on.
        features: a CSV of ``node,x1,x2,...`` (numbers), one line per node: "feat" instead of
            random noise.
        columns: the name of every column, in order (a header line is then skipped, not read).
        add_reverse: typed layout only: also add ``rev_`` edge types (an edge list is refused).

    A directory with ``nodes/`` and ``edges/`` is a typed graph instead
    (:func:`graphfeed.ingest.typed_layouts.load_csv_typed`), which takes only ``name`` and ``add_reverse``.
    """
    f = Path(path)
    if is_typed_layout(f):
        _refuse_edge_list_options(f, undirected, num_features, labels, features, columns)
        return load_csv_typed(f, name=name, add_reverse=add_reverse)
    if add_reverse:
        raise InvalidArgument(f"{f}: --add-reverse is for typed graphs (a directory of nodes/ and edges/)")
    if f.is_dir():
        raise InvalidArgument(
            f"csv source: {f} is a directory; give the edge-list file (a directory of .npy files is --source numpy)"
        )
    if not f.is_file():
        raise NotFound(f"csv source: {f} does not exist")
    cols, feat_names = _read_edge_csv(f, delimiter, columns)
    orig, inverse = np.unique(np.concatenate([cols["src"], cols["dst"]]), return_inverse=True)
    names = None
    if orig.dtype.kind == "U":  # node names: orig_ids are positions in the sorted names (node_names.npy)
        names, orig = orig, np.arange(len(orig), dtype=np.int64)
    e = len(cols["src"])
    src, dst, ts, efeat = (
        inverse[:e].astype(np.int64),
        inverse[e:].astype(np.int64),
        cols.get("ts"),
        cols.get("edge_feat"),
    )
    if undirected:
        src, dst, ts, efeat = symmetrize_edges(src, dst, ts, efeat)
    n = len(orig)
    keys = names if names is not None else orig
    node_data: dict[str, np.ndarray] = {}
    if features is not None:
        node_data["feat"] = node_table(Path(features), keys, "features", np.float32)
    elif num_features > 0:
        node_data["feat"] = np.random.default_rng(seed).standard_normal((n, num_features), dtype=np.float32)
    num_classes = 0
    if labels is not None:
        label = node_table(Path(labels), keys, "labels", np.int64)
        if label.shape[1] != 1:
            raise InvalidArgument(f"{labels}: expected node,label columns, got {label.shape[1] + 1}")
        node_data["label"] = label[:, 0]
        num_classes = check_labels(str(labels), node_data["label"], n)
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
        orig_ids=orig.astype(np.int64),
        extra={
            "undirected": undirected,
            **({"node_names": names} if names is not None else {}),
            **({"edge_feat_columns": feat_names} if feat_names else {}),
        },
    )


def _refuse_edge_list_options(
    d: Path,
    undirected: bool,
    num_features: int,
    labels: str | Path | None,
    features: str | Path | None,
    columns: Sequence[str] | None,
) -> None:
    """A typed CSV directory carries its own labels and features: the edge list's options are refused."""
    given = [
        flag
        for flag, on in (
            ("--undirected (use --add-reverse)", undirected),
            ("--feat-dim", num_features > 0),
            ("--labels", labels is not None),
            ("--features", features is not None),
            ("--columns", columns is not None),
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


def _sniff(f: Path, delimiter: str | None) -> tuple[int, str, list[list[str]]]:
    """(comment lines to skip, delimiter, the first two data lines' fields): leading ``#``/``%``
    comment lines (SNAP, Matrix Market) are skipped, a UTF-8 BOM is dropped, and the delimiter
    is the first of tab, comma, semicolon, space found in the first data line."""
    skip, data = 0, []
    with open(f, encoding="utf-8-sig", errors="replace") as fh:
        for line in fh:
            if line.strip() and not line.lstrip().startswith(("#", "%")):
                data.append(line.strip())
                if len(data) == 2:
                    break
            elif not data:
                skip += 1
    if not data:
        raise InvalidArgument(f"{f}: empty edge list")
    delim = delimiter or next((d for d in ("\t", ",", ";", " ") if d in data[0]), ",")
    return skip, delim, [[x.strip().strip('"').strip("'") for x in line.split(delim)] for line in data]


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
    names = [{"source": "src", "target": "dst"}.get(x, "ts" if x in TS_COLUMN_NAMES else x) for x in names]
    if header and columns is None and not {"src", "dst"} & set(names):
        names = ["src", "dst", *names[2:]]  # a header with its own words for the endpoints (from,to)
    for role in ("src", "dst"):
        if names.count(role) != 1:
            raise InvalidArgument(f"{f}: columns {names!r} need exactly one {role} column")
    repeated = sorted({x for x in names if x != "-" and names.count(x) > 1})
    if repeated:
        raise InvalidArgument(f"{f}: column names {repeated!r} appear more than once in {names!r}")
    return names


def _read_edge_csv(
    f: Path, delimiter: str | None, columns: Sequence[str] | None = None
) -> tuple[dict[str, np.ndarray], list[str]]:
    """Columns "src", "dst" (int64, or strings: node names), maybe "ts" (int64) and maybe
    "edge_feat" (float32 [E, k]) of an edge list, and the names of the k edge features."""
    import pyarrow as pa  # noqa: PLC0415 - pyarrow is slow to import; only file sources need it
    import pyarrow.csv as pacsv  # noqa: PLC0415

    skip, delim, lines = _sniff(f, delimiter)
    fields = lines[0]
    lowered = [x.lower() for x in fields]
    # A header names its columns, or sits above integer ids; a first line of names above more
    # names is data (an edge list of node names).
    ints_below = len(lines) > 1 and all(_is_int(x) for x in lines[1][:2])
    has_header = bool({"src", "dst", "source", "target", *TS_COLUMN_NAMES} & set(lowered)) or (
        ints_below and not all(_is_int(x) for x in fields[:2])
    )
    roles = _roles(f, fields, has_header, columns)
    feat_names = [x for x in roles if x not in ("src", "dst", "ts", "-")]
    kinds = {"src": pa.string(), "dst": pa.string(), "ts": pa.int64()}
    types = {f"f{i}": kinds.get(x, pa.float64()) for i, x in enumerate(roles) if x != "-"}
    read = pacsv.ReadOptions(skip_rows=skip + (1 if has_header else 0), autogenerate_column_names=True)
    try:
        table = pacsv.read_csv(
            f,
            read_options=read,
            parse_options=pacsv.ParseOptions(delimiter=delim),
            convert_options=pacsv.ConvertOptions(column_types=types, include_columns=list(types)),
        )
    except (pa.ArrowInvalid, pa.ArrowTypeError) as e:
        raise InvalidArgument(
            f"{f}: not an edge list with columns {delim.join(roles)} (ts an integer, edge features numbers): {e}"
        ) from e
    out, feats = {}, []
    for i, key in enumerate(roles):
        if key == "-":
            continue
        col = table.column(f"f{i}")
        if col.null_count:
            raise InvalidArgument(f"{f}: column {key!r} has {col.null_count} empty values")
        if key in ("src", "dst"):
            out[key] = col.to_numpy(zero_copy_only=False)
        elif key == "ts":
            out[key] = col.to_numpy().astype(np.int64)
        else:
            feats.append(col.to_numpy().astype(np.float32))
    if feats:
        out["edge_feat"] = np.stack(feats, axis=1)
    ids = np.concatenate([out["src"], out["dst"]]).astype(str)
    is_int = _int_mask(ids)
    if is_int.all():
        out["src"], out["dst"] = (a.astype(str).astype(np.int64) for a in (out["src"], out["dst"]))
    elif is_int.any():  # a typo in an integer edge list, most likely: never guess
        example = ids[~is_int][0] if 2 * is_int.sum() >= len(ids) else ids[is_int][0]  # the odd one out
        raise InvalidArgument(f"{f}: node ids mix integers and names (e.g. {example[:40]!r}); use one or the other")
    else:
        out["src"], out["dst"] = out["src"].astype(str), out["dst"].astype(str)
    return out, feat_names


def _int_mask(ids: np.ndarray) -> np.ndarray:
    """Which ids are integer literals (vectorized: digits with an optional leading minus)."""
    return np.char.isdigit(np.char.lstrip(ids, "-"))


def _is_int(text: str) -> bool:
    try:
        int(text)
    except ValueError:
        return False
    return True


def node_table(f: Path, keys: np.ndarray, what: str, dtype: type) -> np.ndarray:
    """Rows of a ``node,v1,v2,...`` CSV in node order (``keys``: the sorted node ids or names of
    the edge list); every node exactly once, nothing else (InvalidArgument naming the node)."""
    import pyarrow as pa  # noqa: PLC0415 - file sources only
    import pyarrow.csv as pacsv  # noqa: PLC0415

    if not f.is_file():
        raise NotFound(f"csv {what}: {f} does not exist")
    skip, delim, lines = _sniff(f, None)
    has_header = lines[0][0].lower() in ("node", "id", "node_id", "name", "src")  # a header names the node column
    read = pacsv.ReadOptions(skip_rows=skip + (1 if has_header else 0), autogenerate_column_names=True)
    try:
        table = pacsv.read_csv(
            f,
            read_options=read,
            parse_options=pacsv.ParseOptions(delimiter=delim),
            convert_options=pacsv.ConvertOptions(column_types={"f0": pa.string()}),
        )
    except (pa.ArrowInvalid, pa.ArrowTypeError) as e:
        raise InvalidArgument(f"{f}: not a node,{what} table: {e}") from e
    node = table.column(0).to_numpy(zero_copy_only=False).astype(str)
    at = _positions(f, node, keys)
    if len(np.unique(at)) != len(at) or len(at) != len(keys):
        raise InvalidArgument(
            f"{f}: {len(at)} lines for {len(keys)} nodes; give every node of the edge list exactly once"
        )
    try:
        values = np.stack([table.column(i).to_numpy(zero_copy_only=False) for i in range(1, table.num_columns)], axis=1)
        out: np.ndarray = np.empty((len(keys), values.shape[1]), dtype=dtype)
        out[at] = values.astype(dtype)
    except (ValueError, TypeError) as e:
        raise InvalidArgument(f"{f}: {what} must be numbers: {e}") from e
    if out.dtype.kind == "f" and not np.isfinite(out).all():
        raise InvalidArgument(f"{f}: {what} hold NaN or infinity")
    return out


def _positions(f: Path, node: np.ndarray, keys: np.ndarray) -> np.ndarray:
    """Where each node of a node table sits among ``keys`` (unknown nodes: InvalidArgument)."""
    want = node if keys.dtype.kind == "U" else node.astype(np.int64) if _int_mask(node).all() else None
    if want is None:
        raise InvalidArgument(f"{f}: node ids must be the edge list's integers")
    at = np.searchsorted(keys, want).clip(0, len(keys) - 1)
    unknown = keys[at] != want
    if unknown.any():
        raise InvalidArgument(f"{f}: node {str(want[unknown][0])[:40]!r} is not in the edge list")
    return at
