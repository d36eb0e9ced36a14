"""A user's own link-prediction split (``graphfeed ingest --edge-split R --edge-split-files
val=V.csv,test=T.csv``): one file of edges per split, read by the rules of
:mod:`graphfeed.ingest.csv_lines` (comments, quotes, tab/comma/semicolon/space).

Each data line is ``src,dst``: the two endpoints of one edge of relation ``R``, written as the
input names its nodes: node names where the graph was read from names (a CSV of names, a typed
CSV layout), else the dataset's integer ids (``orig_ids``: Cora's paper ids, a numpy layout's
type-wise row numbers). A first line naming the columns (``src,dst``, ``source,target``,
``from,to``, ``u,v``) is a header. Every node must be one of the relation's source (first
column) or destination (second column) type; a line naming any other node is refused with its
file and line. What the split then means (held-out edges leave the graph, train is the rest
unless given) is :func:`graphfeed.ingest.edge_split.split_edges_given`'s.
"""

from __future__ import annotations

from pathlib import Path

import numpy as np

from graphfeed.common.errors import InvalidArgument
from graphfeed.common.schema import etype_name
from graphfeed.ingest.csv_lines import parse_ints, read_rows
from graphfeed.ingest.edge_split import GivenEdges, etype_of
from graphfeed.ingest.graph import GraphData

__all__ = ["parse_split_files", "read_given_edges"]

_HEADER_WORDS = ({"src", "source", "from", "u"}, {"dst", "target", "to", "v"})


def parse_split_files(text: str) -> dict[str, Path]:
    """``"val=v.csv,test=t.csv"`` as ``{"val": Path("v.csv"), ...}``.

    Raises:
        InvalidArgument: an item without ``=``, a name other than train/val/test, or a name twice.
    """
    files: dict[str, Path] = {}
    for item in (x.strip() for x in text.split(",") if x.strip()):
        name, sep, path = item.partition("=")
        name = name.strip()
        if not sep or not path.strip():
            raise InvalidArgument(
                f"--edge-split-files takes SPLIT=PATH items (e.g. val=val.csv,test=test.csv), got {item!r}"
            )
        if name not in ("train", "val", "test"):
            raise InvalidArgument(f"--edge-split-files: split {name!r} is not one of train, val, test")
        if name in files:
            raise InvalidArgument(f"--edge-split-files names {name!r} twice")
        files[name] = Path(path.strip())
    if not files:
        raise InvalidArgument("--edge-split-files names no file")
    return files


def read_given_edges(g: GraphData, relation: str, files: dict[str, Path]) -> dict[str, GivenEdges]:
    """Each file's edges of ``relation`` in ``g``'s ids.

    Raises:
        NotFound: a file does not exist.
        InvalidArgument: a line without two fields, an id that is no node of the right type,
            or an unknown relation.
    """
    r = etype_of(g, relation)
    s_type, _, d_type = g.etypes[r]
    index = {t: _NodeIndex(g, t) for t in {s_type, d_type}}  # built once, for every file
    what = etype_name(g.etypes[r])
    return {name: _read(f, index[s_type], index[d_type], what) for name, f in files.items()}


def _read(f: Path, src_index: _NodeIndex, dst_index: _NodeIndex, relation: str) -> GivenEdges:
    lines: list[int] = []
    us: list[str] = []
    vs: list[str] = []
    for no, fields in read_rows(f):
        if len(fields) != 2:
            raise InvalidArgument(f"{f}: line {no}: {len(fields)} fields; an edge split file has two (src,dst)")
        if not lines and all(x.lower() in words for x, words in zip(fields, _HEADER_WORDS)):
            continue  # a header line
        lines.append(no)
        us.append(fields[0])
        vs.append(fields[1])
    at = np.asarray(lines, dtype=np.int64)
    return GivenEdges(
        str(f),
        src_index.gids(f, us, at, f"source of {relation}"),
        dst_index.gids(f, vs, at, f"destination of {relation}"),
        at,
        us,
        vs,
    )


class _NodeIndex:
    """The nodes of one type by the id the input gave them (name or integer)."""

    def __init__(self, g: GraphData, ntype: str) -> None:
        t = g.ntypes.index(ntype)
        lo, hi = (int(x) for x in g.ntype_starts()[t : t + 2])
        self.ntype, self.lo = ntype, lo
        # the input's ids: orig_ids, by default each type's own row numbers (a one-type graph's gids)
        orig = np.arange(hi - lo, dtype=np.int64) if g.orig_ids is None else np.asarray(g.orig_ids[lo:hi], np.int64)
        names = g.extra.get("node_names")
        self.by_name = None if names is None else {str(names[o]): lo + i for i, o in enumerate(orig.tolist())}
        self.order = np.argsort(orig, kind="stable")
        self.sorted_ids = orig[self.order]

    def gids(self, f: Path, texts: list[str], lines: np.ndarray, what: str) -> np.ndarray:
        if self.by_name is not None:
            out = np.fromiter((self.by_name.get(x, -1) for x in texts), dtype=np.int64, count=len(texts))
        else:
            ids = parse_ints(f, texts, lines, what, " (this graph's nodes have integer ids)")
            at = np.minimum(np.searchsorted(self.sorted_ids, ids), max(0, len(self.sorted_ids) - 1))
            found = (self.sorted_ids[at] == ids) if len(self.sorted_ids) else np.zeros(len(ids), bool)
            out = np.where(found, self.lo + self.order[at], -1)
        if (out < 0).any():
            i = int(np.flatnonzero(out < 0)[0])
            raise InvalidArgument(
                f"{f}: line {lines[i]}: {what} {texts[i][:40]!r} is not a {self.ntype!r} node of the graph"
            )
        return out
