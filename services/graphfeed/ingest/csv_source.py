"""Edge-list CSV input (``graphfeed ingest --source csv``): what real edge lists look like (SNAP
comments, BOMs, quotes, tab/comma/semicolon/space, integer ids or node names, a timestamp column)."""

from __future__ import annotations

from pathlib import Path

import numpy as np

from graphfeed.common.errors import InvalidArgument, NotFound
from graphfeed.ingest.graph import DEFAULT_FRACTIONS, GraphData, random_split, symmetrize


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
) -> GraphData:
    """An edge list: one edge per line, ``src,dst[,ts]``; node ids integers or names, integer timestamps.

    Leading ``#``/``%`` comment lines (SNAP) and a UTF-8 BOM are skipped; quotes around fields are
    fine; the delimiter is tab, comma, semicolon or space (the first found). A header names
    ``src``/``source`` and ``dst``/``target`` (and ``ts``, ``t``, ``time`` or ``timestamp``) and
    selects those columns. The nodes are the distinct ids (ascending); ``orig_ids`` keeps them,
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
    """
    f = Path(path)
    if f.is_dir():
        raise InvalidArgument(f"csv source: {f} is a directory; give the edge-list file (a directory of .npy files is --source numpy)")
    if not f.is_file():
        raise NotFound(f"csv source: {f} does not exist")
    cols = _read_edge_csv(f, delimiter)
    orig, inverse = np.unique(np.concatenate([cols["src"], cols["dst"]]), return_inverse=True)
    names = None
    if orig.dtype.kind == "U":  # node names: orig_ids are positions in the sorted names (node_names.npy)
        names, orig = orig, np.arange(len(orig), dtype=np.int64)
    e = len(cols["src"])
    src, dst, ts = inverse[:e].astype(np.int64), inverse[e:].astype(np.int64), cols.get("ts")
    if undirected:
        src, dst, ts = symmetrize(src, dst, ts)
    n = len(orig)
    node_data = {}
    if num_features > 0:
        node_data["feat"] = np.random.default_rng(seed).standard_normal((n, num_features), dtype=np.float32)
    return GraphData(
        name=name or f.stem,
        num_nodes=n,
        src=src,
        dst=dst,
        node_data=node_data,
        splits=random_split(n, fractions, split_seed),
        num_classes=0,
        edge_ts=ts,
        orig_ids=orig.astype(np.int64),
        extra={"undirected": undirected, **({"node_names": names} if names is not None else {})},
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


def _read_edge_csv(f: Path, delimiter: str | None) -> dict[str, np.ndarray]:
    """Columns "src", "dst" (int64, or strings: node names) and maybe "ts" (int64) of an edge list."""
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
    names = [{"source": "src", "target": "dst"}.get(x, x) for x in lowered] if has_header else []
    if len(fields) not in (2, 3):
        raise InvalidArgument(f"{f}: expected 2 or 3 columns (src, dst[, ts]) separated by {delim!r}, got {len(fields)}: {fields!r}")
    wanted = ["src", "dst", "ts"][: len(fields)]
    names = ["ts" if x in TS_COLUMN_NAMES else x for x in names]
    if has_header and {"src", "dst"} <= set(names):
        if len(fields) == 3 and "ts" not in names:
            raise InvalidArgument(
                f"{f}: the header names src and dst but not the timestamp column (one of {', '.join(TS_COLUMN_NAMES)}): {fields!r}"
            )
        order = [names.index(c) for c in wanted]
    else:
        order = list(range(len(fields)))
    read = pacsv.ReadOptions(skip_rows=skip + (1 if has_header else 0), autogenerate_column_names=True)
    types = {f"f{order[2]}": pa.int64()} if len(fields) == 3 else {}
    types.update({f"f{i}": pa.string() for i in order[:2]})
    try:
        table = pacsv.read_csv(f, read_options=read, parse_options=pacsv.ParseOptions(delimiter=delim),
                               convert_options=pacsv.ConvertOptions(column_types=types))  # fmt: skip
    except (pa.ArrowInvalid, pa.ArrowTypeError) as e:
        raise InvalidArgument(f"{f}: not an edge list src{delim}dst[{delim}ts] (ts an integer): {e}") from e
    out = {}
    for key, i in zip(wanted, order):
        col = table.column(i)
        if col.null_count:
            raise InvalidArgument(f"{f}: column {key!r} has {col.null_count} empty values")
        out[key] = col.to_numpy(zero_copy_only=False) if key != "ts" else col.to_numpy().astype(np.int64)
    ids = np.concatenate([out["src"], out["dst"]]).astype(str)
    is_int = _int_mask(ids)
    if is_int.all():
        out["src"], out["dst"] = (a.astype(str).astype(np.int64) for a in (out["src"], out["dst"]))
    elif is_int.any():  # a typo in an integer edge list, most likely: never guess
        example = ids[~is_int][0] if 2 * is_int.sum() >= len(ids) else ids[is_int][0]  # the odd one out
        raise InvalidArgument(f"{f}: node ids mix integers and names (e.g. {example[:40]!r}); use one or the other")
    else:
        out["src"], out["dst"] = out["src"].astype(str), out["dst"].astype(str)
    return out


def _int_mask(ids: np.ndarray) -> np.ndarray:
    """Which ids are integer literals (vectorized: digits with an optional leading minus)."""
    return np.char.isdigit(np.char.lstrip(ids, "-"))


def _is_int(text: str) -> bool:
    try:
        int(text)
    except ValueError:
        return False
    return True
