"""Typed graphs shipped inside the graphdatascience wheel (nothing is downloaded).

- **IMDB** (``--source imdb``): the GTN paper's IMDB graph: 4,661 movies, 5,841 actors, 2,270
  directors, each with 1,256 binary plot-keyword features; 2,939 movies have a genre (3 classes).
- **LastFM** (``--source lastfm-hetero``): HetRec 2011's 1,892 users, 18,022 artists and the
  9,749 tags users put on artists: a link-prediction graph (no labels, no splits).

Both come out through :func:`graphfeed.ingest.graph.hetero_graph`, so nodes and edges are
type-major and ``orig_ids`` keeps each node's id in the dataset.
"""

from __future__ import annotations

from pathlib import Path

import numpy as np

from graphfeed.common.errors import InvalidArgument, NotFound
from graphfeed.ingest.graph import DEFAULT_FRACTIONS, GraphData, hetero_graph, random_split, symmetrize
from graphfeed.ingest.temporal_sources import package_dir

_HINT = "run scripts/bootstrap.sh (it installs graphdatascience==2.2 --no-deps)"


def _resources(dataset: str, files: tuple[str, ...]) -> dict[str, Path]:
    """The dataset's parquet files in the installed graphdatascience wheel, by short name."""
    root = package_dir("graphdatascience", _HINT) / "resources" / dataset
    found = {name: root / f"{name}.parquet.gzip" for name in files}
    for f in found.values():
        if not f.exists():
            raise NotFound(f"{f} is missing from the graphdatascience wheel; {_HINT}")
    return found


def load_imdb(
    split_seed: int = 0, fractions: tuple[float, float, float] = DEFAULT_FRACTIONS, add_reverse: bool = False
) -> GraphData:
    """IMDB: node types movie, actor, director; edges ``actor -acted_in-> movie`` and
    ``director -directed_in-> movie`` (the direction of the dataset's relationships).

    Every node has ``<ntype>/feat`` (float32 [n, 1256], binary plot keywords). ``movie/label``
    is the genre (0..2) of the 2,939 movies that have one and 0 for the 1,722 without; only the
    movies with a genre are in the seeded random train/val/test split, so the others are never
    trained or scored on. Type-wise ids follow the dataset's ids in ascending order; ``orig_ids``
    keeps them.

    Args:
        split_seed: seed of the random split of the labelled movies.
        fractions: train/val/test fractions (default 60/20/20).
        add_reverse: also add ``movie -rev_acted_in-> actor`` and ``movie -rev_directed_in-> director``.
    """
    import pyarrow.parquet as pq  # noqa: PLC0415 - pyarrow is slow to import; only file sources need it

    files = _resources("imdb", tuple(f"imdb_{n}" for n in IMDB_FILES))
    ids, feats = {}, {}
    for ntype, names in (("movie", ("movies_with_genre", "movies_without_genre")), ("actor", ("actors",))):
        ids[ntype], feats[ntype] = _typed_nodes(ntype, [files[f"imdb_{n}"] for n in names])
    ids["director"], feats["director"] = _typed_nodes("director", [files["imdb_directors"]])
    genre = pq.read_table(files["imdb_movies_with_genre"], columns=["nodeId", "genre"])
    with_genre = map_ids(files["imdb_movies_with_genre"], genre.column("nodeId").to_numpy(), ids["movie"], "movie")
    label = np.zeros(len(ids["movie"]), np.int64)  # movies without a genre: 0, and in no split
    label[with_genre] = genre.column("genre").to_numpy().astype(np.int64)
    split = random_split(len(with_genre), fractions, split_seed)
    edges = {}
    for (s, rel, d), f in (
        (("actor", "acted_in", "movie"), files["imdb_acted_in"]),
        (("director", "directed_in", "movie"), files["imdb_directed_in"]),
    ):
        rels = pq.read_table(f, columns=["sourceNodeId", "targetNodeId"])
        edges[(s, rel, d)] = (
            map_ids(f, rels.column("sourceNodeId").to_numpy(), ids[s], s),
            map_ids(f, rels.column("targetNodeId").to_numpy(), ids[d], d),
        )
    return hetero_graph(
        "imdb",
        {t: len(ids[t]) for t in ("movie", "actor", "director")},
        edges,
        {"movie": {"feat": feats["movie"], "label": label}, **{t: {"feat": feats[t]} for t in ("actor", "director")}},
        {"movie": {s: np.sort(with_genre[pos]) for s, pos in split.items()}},
        add_reverse=add_reverse,
        orig_ids=ids,
        extra={"split_seed": split_seed, "labelled_movies": len(with_genre)},
    )


IMDB_FILES = (
    "movies_with_genre",
    "movies_without_genre",
    "actors",
    "directors",
    "acted_in",
    "directed_in",
)


def _typed_nodes(ntype: str, files: list[Path]) -> tuple[np.ndarray, np.ndarray]:
    """(dataset ids ascending, their plot-keyword features) of the nodes of ``ntype`` in ``files``."""
    import pyarrow.parquet as pq  # noqa: PLC0415

    tables = [(f, pq.read_table(f, columns=["nodeId", "plot_keywords"])) for f in files]
    raw = np.concatenate([t.column("nodeId").to_numpy().astype(np.int64) for _, t in tables])
    if len(np.unique(raw)) != len(raw):
        raise InvalidArgument(f"imdb: {ntype} node ids repeat in {[str(f) for f in files]}")
    order = np.argsort(raw, kind="stable")
    return raw[order], np.concatenate([list_features(f, t, "plot_keywords") for f, t in tables])[order]


def load_lastfm_hetero(add_reverse: bool = False) -> GraphData:
    """LastFM as a typed graph for link prediction: node types user, artist, tag.

    Edge types (counts for the shipped data):

    - ``user -listens_to-> artist`` (92,834): the file's LISTEN_TO rows. Their play count
      (``weight``) is dropped: edge features are not per edge type yet.
    - ``user -is_friend-> user`` (25,434): friendship is symmetric and the file lists each pair
      once, so both directions are stored (a sampler of in-neighbors sees every friend).
    - ``user -tagged-> artist``, ``artist -has_tag-> tag`` and ``user -used_tag-> tag``: the
      186,479 "user tagged artist with tag" events are triples, which a graph of pairs holds as
      their three projections, each pair once (71,064, 109,750 and 35,816 edges). A tag is a
      node (its id a category, not a quantity), so a model learns an embedding per tag and can
      score user-artist links through the tags both touch. Timestamps are left out: the
      temporal ``--source lastfm`` keeps the events in time order.

    No node features, labels or splits. ``orig_ids``: the dataset's user ids, artist ids (offset
    by 10,000 in the dataset) and tag ids.

    Args:
        add_reverse: also add ``rev_`` edge types for every asymmetric relation (all but is_friend,
            whose reverse is itself).
    """
    import pyarrow.parquet as pq  # noqa: PLC0415 - pyarrow is slow to import; only file sources need it

    files = _resources(
        "lastfm",
        ("user_nodes", "artist_nodes", "user_listen_artist_rels", "user_friend_df_directed", "user_tag_artist_rels"),
    )
    col = lambda name, c: pq.read_table(files[name], columns=[c]).column(c).to_numpy().astype(np.int64)  # noqa: E731
    users, artists = np.sort(col("user_nodes", "nodeId")), np.sort(col("artist_nodes", "nodeId"))
    f_listen, f_friend, f_tag = (
        files[k] for k in ("user_listen_artist_rels", "user_friend_df_directed", "user_tag_artist_rels")
    )
    listen = (
        map_ids(f_listen, col("user_listen_artist_rels", "sourceNodeId"), users, "user"),
        map_ids(f_listen, col("user_listen_artist_rels", "targetNodeId"), artists, "artist"),
    )
    friend_src = map_ids(f_friend, col("user_friend_df_directed", "sourceNodeId"), users, "user")
    friend_dst = map_ids(f_friend, col("user_friend_df_directed", "targetNodeId"), users, "user")
    friend = symmetrize(friend_src, friend_dst, drop_self_loops=True)[:2]
    t_user = map_ids(f_tag, col("user_tag_artist_rels", "sourceNodeId"), users, "user")
    t_artist = map_ids(f_tag, col("user_tag_artist_rels", "targetNodeId"), artists, "artist")
    tags, t_tag = np.unique(col("user_tag_artist_rels", "tagID"), return_inverse=True)
    edges = {
        ("user", "listens_to", "artist"): listen,
        ("user", "is_friend", "user"): friend,
        ("user", "tagged", "artist"): distinct_pairs(t_user, t_artist, len(artists)),
        ("artist", "has_tag", "tag"): distinct_pairs(t_artist, t_tag, len(tags)),
        ("user", "used_tag", "tag"): distinct_pairs(t_user, t_tag, len(tags)),
    }
    if add_reverse:  # hetero_graph's add_reverse would also add is_friend's reverse, which is itself
        edges |= {(d, f"rev_{r}", s): (dst, src) for (s, r, d), (src, dst) in edges.items() if r != "is_friend"}
    return hetero_graph(
        "lastfm-hetero",
        {"user": len(users), "artist": len(artists), "tag": len(tags)},
        edges,
        orig_ids={"user": users, "artist": artists, "tag": tags},
        extra={"dropped": "listens_to play counts (weight) and tagging timestamps"},
    )


def list_features(f: Path, table: object, column: str) -> np.ndarray:
    """A parquet list column of equal-length numeric lists as float32 [rows, width]."""
    values = table.column(column).combine_chunks()  # type: ignore[attr-defined]
    if values.null_count:
        raise InvalidArgument(f"{f}: column {column!r} has {values.null_count} empty rows")
    widths = np.diff(values.offsets.to_numpy())
    if len(widths) and (widths != widths[0]).any():
        raise InvalidArgument(f"{f}: {column!r} lists have different lengths {sorted(set(widths.tolist()))[:5]}")
    return values.flatten().to_numpy().astype(np.float32).reshape(len(widths), -1)


def map_ids(f: Path, ids: np.ndarray, known: np.ndarray, ntype: str) -> np.ndarray:
    """Positions in the sorted ``known`` ids of ``ntype`` of each id (InvalidArgument naming an unknown one)."""
    ids = np.asarray(ids, dtype=np.int64)
    pos = np.minimum(np.searchsorted(known, ids), max(0, len(known) - 1))
    bad = known[pos] != ids if len(known) else np.ones(len(ids), bool)
    if bad.any():
        raise InvalidArgument(
            f"{f}: {int(bad.sum())} endpoints are not {ntype} ids, e.g. row {int(np.flatnonzero(bad)[0])} "
            f"has {int(ids[bad][0])}"
        )
    return pos.astype(np.int64)


def distinct_pairs(src: np.ndarray, dst: np.ndarray, num_dst: int) -> tuple[np.ndarray, np.ndarray]:
    """The distinct ``(src, dst)`` pairs, ascending by src then dst."""
    keys = np.unique(src.astype(np.int64) * num_dst + dst)
    return keys // num_dst, keys % num_dst
