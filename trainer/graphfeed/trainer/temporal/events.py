"""The event stream a TGN job trains on: interactions ``(src, dst, t, efeat)`` in time order.

From a bundled temporal dataset (collegemsg, lastfm, pubmed), an ingested graph's root directory
(``graphfeed ingest --source csv --columns src,dst,ts ...``), or an edge-list CSV with a time
column; split chronologically (the dataset's own event split, else 70/15/15, or as given).
"""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path

import numpy as np

from graphfeed.common.errors import InvalidArgument, NotFound
from graphfeed.ingest.graph import GraphData
from graphfeed.ingest.sources import load_source

DATASETS = ("collegemsg", "lastfm", "pubmed")
DEFAULT_SPLIT = (0.70, 0.15, 0.15)


@dataclass(frozen=True)
class TemporalEvents:
    """Directed interaction events sorted by time, split chronologically.

    Events ``[0, val_start)`` train, ``[val_start, test_start)`` validate, the rest test.
    Negatives are drawn from the destination id range ``[dst_lo, dst_hi]`` (for bipartite data
    such as LastFM users -> artists, the artists), as in PyG's TGN example.
    """

    name: str
    num_nodes: int
    src: np.ndarray  # int64 [E]
    dst: np.ndarray  # int64 [E]
    t: np.ndarray  # int64 [E], non-decreasing
    efeat: np.ndarray | None  # float32 [E, D] or None
    val_start: int
    test_start: int

    @property
    def num_events(self) -> int:
        return len(self.src)

    @property
    def edge_feat_dim(self) -> int:
        return 0 if self.efeat is None else int(self.efeat.shape[1])

    @property
    def dst_range(self) -> tuple[int, int]:
        """Smallest and largest destination id (inclusive), the range negatives come from."""
        return int(self.dst.min()), int(self.dst.max())

    def head(self, num_events: int, split: tuple[float, float, float] = DEFAULT_SPLIT) -> TemporalEvents:
        """The first ``num_events`` events, re-split chronologically (small runs and tests)."""
        n = min(num_events, self.num_events)
        efeat = None if self.efeat is None else self.efeat[:n]
        val, test = _boundaries(n, split)
        return TemporalEvents(self.name, self.num_nodes, self.src[:n], self.dst[:n], self.t[:n], efeat, val, test)


def parse_split(text: str) -> tuple[float, float, float]:
    """``"0.7,0.15,0.15"`` -> fractions of the events for train, val, test (summing to 1)."""
    try:
        parts = tuple(float(x) for x in text.split(","))
    except ValueError:
        parts = ()
    if len(parts) != 3 or min(parts) < 0 or abs(sum(parts) - 1) > 1e-6 or parts[0] == 0:
        raise InvalidArgument(f"split {text!r}: give three fractions train,val,test summing to 1, e.g. 0.7,0.15,0.15")
    return parts[0], parts[1], parts[2]


def _boundaries(n: int, split: tuple[float, float, float]) -> tuple[int, int]:
    return round(split[0] * n), round((split[0] + split[1]) * n)


def events_from_edges(
    name: str,
    num_nodes: int,
    src: np.ndarray,
    dst: np.ndarray,
    t: np.ndarray,
    efeat: np.ndarray | None,
    split: tuple[float, float, float] = DEFAULT_SPLIT,
) -> TemporalEvents:
    """Directed edges with timestamps as events: sorted by time (stable), split chronologically."""
    if not len(src):
        raise InvalidArgument(f"{name}: no events")
    order = np.argsort(np.asarray(t, np.int64), kind="stable")
    val, test = _boundaries(len(src), split)
    feat = None if efeat is None else np.asarray(efeat, np.float32)[order]
    src64, dst64, t64 = (np.asarray(a, np.int64)[order] for a in (src, dst, t))
    return TemporalEvents(name, num_nodes, src64, dst64, t64, feat, val, test)


def events_from_graph(g: GraphData) -> TemporalEvents:
    """The events of a temporal ingest source (``extra["event_split"]``; directed edges only)."""
    split = g.extra.get("event_split")
    if split is None or g.edge_ts is None:
        raise InvalidArgument(f"{g.name}: not a temporal event source (no timestamps or no event split)")
    e = int(split["num_events"])  # with undirected=True, edges [e, 2e) are the reverses
    t = np.asarray(g.edge_ts[:e], np.int64)
    if (np.diff(t) < 0).any():
        raise InvalidArgument(f"{g.name}: events are not in time order")
    efeat = None if g.edge_feat is None else np.asarray(g.edge_feat[:e], np.float32)
    return TemporalEvents(
        g.name, g.num_nodes, g.src[:e], g.dst[:e], t, efeat, int(split["val_start"]), int(split["test_start"])
    )


def load_events(
    name: str, split: tuple[float, float, float] | None = None, columns: str | None = None
) -> TemporalEvents:
    """A bundled dataset (:data:`DATASETS`, see graphfeed.ingest.temporal_sources), an ingested
    graph's root directory, or an edge-list CSV with a time column (``columns``, e.g.
    ``src,dst,ts``, as ``graphfeed ingest --columns``). ``split``: train/val/test fractions
    (default: the dataset's own event split, else 70/15/15)."""
    if name in DATASETS:
        ev = events_from_graph(load_source(name))
        return ev if split is None else ev.head(ev.num_events, split)
    path = Path(name)
    if path.is_dir():
        return _events_from_ingested(path, split or DEFAULT_SPLIT)
    if path.is_file():
        g = load_source("csv", path=str(path), columns=columns.split(",") if columns else None)
        if g.edge_ts is None:
            raise InvalidArgument(f"{path}: no time column; name one with --columns, e.g. src,dst,ts")
        return events_from_edges(g.name, g.num_nodes, g.src, g.dst, g.edge_ts, g.edge_feat, split or DEFAULT_SPLIT)
    raise NotFound(f"temporal dataset {name!r}: neither one of {DATASETS}, an ingested graph's directory, nor a CSV")


def _events_from_ingested(root: Path, split: tuple[float, float, float]) -> TemporalEvents:
    """The events of a graph written by ``graphfeed ingest`` (one edge type, timestamps, no
    added reverses), node ids in the order of the input's ids (so a bipartite input whose
    destinations had a contiguous id range keeps it: negatives are drawn from that range)."""
    from graphfeed.common.partition import GraphManifest, PartitionReader, part_dir_name  # noqa: PLC0415

    if not (root / "manifest.json").exists():
        raise NotFound(f"{root}: no manifest.json (not a graph written by graphfeed ingest)")
    m = GraphManifest.from_json((root / "manifest.json").read_text())
    if not m.has_edge_timestamps:
        raise InvalidArgument(f"{root}: the graph has no edge timestamps (ingest a CSV with --columns src,dst,ts)")
    parts = [PartitionReader(root / part_dir_name(p)) for p in range(m.num_partitions)]
    rows = np.concatenate([np.arange(r.start, r.stop).repeat(np.diff(r.indptr)) for r in parts])
    cols = {k: np.concatenate([np.asarray(getattr(r, k)) for r in parts]) for k in ("indices", "edge_ids", "edge_ts")}
    feats = [r.edge_feat for r in parts]
    efeat = None if any(f is None for f in feats) else np.concatenate([np.asarray(f) for f in feats])
    orig = np.concatenate([np.asarray(r.orig_ids) for r in parts])  # gid order
    rank = np.empty(len(orig), np.int64)
    rank[np.argsort(orig, kind="stable")] = np.arange(len(orig))
    split_info = m.extra.get("event_split")
    if split_info is not None:  # a bundled temporal source: events are edge ids [0, num_events)
        keep = cols["edge_ids"] < int(split_info["num_events"])
    elif m.extra.get("undirected"):
        raise InvalidArgument(f"{root}: ingested with --undirected; ingest without it (the TGN reads both directions)")
    else:
        keep = np.ones(len(rows), bool)
    by_eid = np.argsort(cols["edge_ids"][keep], kind="stable")  # input order, ties by time stay stable
    pick = np.flatnonzero(keep)[by_eid]
    src, dst = rank[cols["indices"][pick].astype(np.int64)], rank[rows[pick]]
    return events_from_edges(
        m.dataset, m.num_nodes, src, dst, cols["edge_ts"][pick], None if efeat is None else efeat[pick], split
    )
