"""``graphfeed ingest``: load a source, partition it, write the partition directories.

Examples::

    graphfeed ingest --source cora --out /data/cora --num-partitions 2
    graphfeed ingest --source synthetic --preset large --out /data/large --method metis
    graphfeed ingest --source csv --path edges.csv --feat-dim 32 --undirected --out /data/csv
    graphfeed ingest --source collegemsg --undirected --out /data/collegemsg --num-partitions 2
    graphfeed ingest --source imdb --add-reverse --out /data/imdb
    graphfeed ingest --source synthetic --preset mag --add-reverse --out /data/mag --num-partitions 4
    graphfeed ingest --source numpy --path typed_dir --add-reverse --out /data/typed   # typed_dir: nodes/, edges/
    graphfeed ingest --source cora --edge-split _E --out /data/cora-links   # link prediction, 85/5/10
    graphfeed ingest --source lastfm-hetero --add-reverse --edge-split listens_to --out /data/lastfm-links
    graphfeed ingest --source csv --path edges.csv --edge-split _E --edge-split-files val=val.csv,test=test.csv --out /d
"""

from __future__ import annotations

import argparse
import sys
import time
from pathlib import Path
from typing import Any

import numpy as np

from graphfeed.common.errors import GraphfeedError, InvalidArgument, NotFound
from graphfeed.common.partition import GraphManifest, PartitionReader, part_dir_name
from graphfeed.ingest.csv_lines import HEADER_CHOICES, NODE_ID_CHOICES
from graphfeed.ingest.edge_split import DEFAULT_FRACTIONS as DEFAULT_EDGE_FRACTIONS
from graphfeed.ingest.edge_split import parse_fractions, split_edges, split_edges_given
from graphfeed.ingest.edge_split_files import parse_split_files, read_given_edges
from graphfeed.ingest.graph import GraphData
from graphfeed.ingest.outdir import check_out, staged_out
from graphfeed.ingest.partition import METHODS, write_partitioned
from graphfeed.ingest.sources import SOURCES, load_source
from graphfeed.ingest.synthetic import PRESETS
from graphfeed.ingest.synthetic_hetero import HETERO_PRESETS, describe
from graphfeed.ingest.typed_layouts import is_typed_layout

TYPED_SOURCES = ("imdb", "lastfm-hetero")
"""Sources that are always typed; numpy and csv are typed for a directory of nodes/ and edges/,
synthetic for a typed preset."""


def register(subparsers: argparse._SubParsersAction) -> None:
    """Adds the ``ingest`` subcommand (handler: :func:`run`)."""
    p = subparsers.add_parser(
        "ingest",
        help="load a graph (cora, imdb, collegemsg, lastfm, pubmed, lastfm-hetero, numpy dir, CSV, synthetic) and "
        "write it as partitions",
        description="Load a graph, partition it (METIS or random) and write one directory per partition\n"
        "for the graph-stores. Prints one line per partition and the totals.",
        epilog="examples:\n" + "\n".join(line for line in __doc__.splitlines() if line.startswith("    graphfeed")),
        formatter_class=argparse.RawDescriptionHelpFormatter,
    )
    src = p.add_argument_group("source")
    src.add_argument("--source", required=True, choices=sorted(SOURCES), help="input kind")
    src.add_argument(
        "--path",
        type=Path,
        help="input: a directory of .npy files (numpy) or an edge-list file (csv); for either, a directory with "
        "nodes/ and edges/ is a typed graph (see the README)",
    )
    src.add_argument(
        "--undirected",
        action="store_true",
        help="numpy/csv/collegemsg/lastfm/pubmed: also add the reverse of every edge",
    )
    src.add_argument(
        "--add-reverse",
        action="store_true",
        help="typed graphs (imdb, lastfm-hetero, typed numpy/csv directories, --preset mag): also add the edge type "
        "(dst, rev_REL, src) of every edge type",
    )
    src.add_argument(
        "--labels", type=Path, help="csv: node,label per node (integer classes 0..C-1): a graph to train on"
    )
    src.add_argument("--features", type=Path, help="csv: node,x1,x2,... per node (numbers) instead of random features")
    src.add_argument(
        "--columns",
        type=lambda text: text.split(","),
        help="csv: the name of every column, e.g. src,dst,ts or src,dst,weight (- skips one; other names are numeric "
        "edge features); needed for more than two columns without a header line",
    )
    src.add_argument(
        "--header",
        choices=HEADER_CHOICES,
        help="csv: whether the first line names the columns (default auto: yes when it holds a known word such as "
        "src/from/ts or words above integer ids; node names need yes or no when neither is clear)",
    )
    src.add_argument(
        "--node-ids",
        choices=NODE_ID_CHOICES,
        help="csv: int (007 is node 7), name (007 and 7 are two nodes) or auto (default: int when every id is an "
        "integer, name when none is)",
    )
    src.add_argument("--split-seed", type=int, default=0, help="seed of the 60/20/20 train/val/test split (default 0)")
    links = p.add_argument_group("link prediction")
    links.add_argument(
        "--edge-split",
        metavar="RELATION",
        help="split this edge type's edges into train/val/test edges (src:rel:dst, or a relation only one edge type "
        "has; _E in a graph without types); val and test edges and their reverse twins leave the graph",
    )
    links.add_argument(
        "--edge-fractions",
        default=None,
        help="train,val,test fractions of --edge-split (default 0.85,0.05,0.1; seeded by --split-seed)",
    )
    links.add_argument(
        "--edge-split-files",
        metavar="SPLIT=PATH,...",
        help="the split from files instead of fractions: val=V.csv,test=T.csv[,train=R.csv], one src,dst edge of "
        "--edge-split per line, nodes as the input names them; without train= every other edge trains",
    )
    syn = p.add_argument_group("synthetic graph (a preset, or all four sizes; sizes override a preset)")
    presets = ", ".join([f"{k} ({_describe(v)})" for k, v in PRESETS.items()])
    presets += ", " + ", ".join(f"{k} ({describe(v)})" for k, v in HETERO_PRESETS.items())
    syn.add_argument("--preset", choices=sorted([*PRESETS, *HETERO_PRESETS]), help="named sizes: " + presets)
    syn.add_argument("--num-nodes", type=int, help="number of nodes")
    syn.add_argument("--num-edges", type=int, help="number of distinct undirected edges (twice as many are stored)")
    syn.add_argument("--feat-dim", type=int, help="feature width (csv: width of seeded random features, default 0)")
    syn.add_argument("--num-classes", type=int, help="number of planted communities / labels")
    syn.add_argument("--homophily", type=float, help="fraction of edges inside a community (default 0.8)")
    out = p.add_argument_group("partitioning and output")
    out.add_argument(
        "--out", type=Path, required=True, help="output directory (graph root with part-NNNNN/ subdirectories)"
    )
    out.add_argument(
        "--num-partitions", type=int, default=2, help="number of partitions, one graph-store each (default 2)"
    )
    out.add_argument(
        "--method", choices=METHODS, default="metis", help="metis (few cut edges) or random (default metis)"
    )
    out.add_argument(
        "--seed",
        type=int,
        default=0,
        help="seed of the random method, the synthetic generator and csv features (default 0)",
    )
    out.add_argument("--force", action="store_true", help="replace an earlier ingest in a non-empty --out")
    out.add_argument("--no-progress", action="store_true", help="no progress bars on stderr")
    p.set_defaults(func=run)


def _describe(spec: Any) -> str:
    return f"{spec.num_nodes:,} nodes, {spec.num_edges:,} edges, {spec.feat_dim} feat, {spec.num_classes} classes"


def run(args: argparse.Namespace) -> int:
    """Handler of ``graphfeed ingest``; returns the exit status (2 on a user error)."""
    try:
        check_options(args)  # before reading the input
        fractions = parse_fractions(args.edge_fractions) if args.edge_fractions else DEFAULT_EDGE_FRACTIONS
        check_out(args.out, args.force)  # nothing is created until the input loaded
        kwargs = source_kwargs(args)
        t0 = time.perf_counter()
        g = load_source(args.source, **kwargs)
        if args.edge_split_files:
            files = parse_split_files(args.edge_split_files)
            g = split_edges_given(g, args.edge_split, read_given_edges(g, args.edge_split, files))
        elif args.edge_split:
            g = split_edges(g, args.edge_split, fractions, args.split_seed)
        t_load = time.perf_counter() - t0
        print(
            f"loaded {g.name}: {g.num_nodes:,} nodes, {g.num_edges:,} edges, "
            f"node data {_node_data(g)}{_types(g)} in {t_load:.1f}s",
            flush=True,
        )
        with staged_out(args.out, args.force) as stage:  # --out is replaced only once all is written
            manifest = write_partitioned(
                g, stage, args.num_partitions, args.method, args.seed, progress=not args.no_progress
            )
            del g
        summarize(args.out, manifest, t_load, time.perf_counter() - t0 - t_load)
    except GraphfeedError as e:
        print(f"graphfeed ingest: error: {e}", file=sys.stderr)
        return 2
    return 0


def check_options(args: argparse.Namespace) -> None:
    """Refuses options no input can make right, before anything is read (a graph can take minutes)."""
    if args.num_partitions < 1:
        raise InvalidArgument(f"--num-partitions must be >= 1, got {args.num_partitions}")
    if args.feat_dim is not None and args.feat_dim < 0:
        raise InvalidArgument(f"--feat-dim must be >= 0, got {args.feat_dim}")
    if (args.edge_fractions or args.edge_split_files) and not args.edge_split:
        raise InvalidArgument("--edge-fractions and --edge-split-files need --edge-split RELATION")
    if args.edge_fractions and args.edge_split_files:
        raise InvalidArgument("give --edge-fractions or --edge-split-files, not both: the files are the split")
    for f in parse_split_files(args.edge_split_files).values() if args.edge_split_files else ():
        if not f.is_file():
            raise NotFound(f"--edge-split-files: {f} does not exist or is not a file")


def source_kwargs(args: argparse.Namespace) -> dict[str, Any]:
    """Keyword arguments of the chosen source's loader, checked against the flags given."""
    kind = args.source
    sizes = {
        "num_nodes": args.num_nodes,
        "num_edges": args.num_edges,
        "feat_dim": args.feat_dim,
        "num_classes": args.num_classes,
    }
    if kind in ("numpy", "csv") and args.path is None:
        raise InvalidArgument(f"--source {kind} needs --path")
    typed = kind in TYPED_SOURCES or (kind in ("numpy", "csv") and is_typed_layout(args.path))
    typed = typed or (kind == "synthetic" and args.preset in HETERO_PRESETS)
    if args.add_reverse and not typed:
        raise InvalidArgument(
            f"--add-reverse adds reverse edge types to a typed graph (imdb, lastfm-hetero, a numpy or csv directory "
            f"with nodes/ and edges/, synthetic --preset {'/'.join(HETERO_PRESETS)}); --source {kind} "
            "gives a homogeneous graph (--undirected adds reverse edges there)"
        )
    if typed and args.undirected:
        raise InvalidArgument(
            f"--undirected is for homogeneous graphs; --source {kind} here is typed: use --add-reverse"
        )
    if kind != "synthetic":
        used = [
            f"--{k.replace('_', '-')}"
            for k, v in sizes.items()
            if v is not None and not (kind == "csv" and k == "feat_dim")
        ]
        used += ["--preset"] if args.preset else []
        used += ["--homophily"] if args.homophily is not None else []
        if used:
            raise InvalidArgument(f"{', '.join(used)} only apply to --source synthetic")
    csv_only = ("labels", "features", "columns", "header", "node_ids")
    if kind != "csv" and any(getattr(args, k) is not None for k in csv_only):
        raise InvalidArgument(
            "--labels, --features, --columns, --header and --node-ids only apply to --source csv "
            "(a numpy directory has label.npy and feat.npy)"
        )
    if kind == "cora":
        return {"split_seed": args.split_seed}
    if kind in ("collegemsg", "lastfm", "pubmed"):  # chronological 70/15/15 event split, in the manifest's extra
        return {"undirected": args.undirected}
    if kind == "imdb":
        return {"split_seed": args.split_seed, "add_reverse": args.add_reverse}
    if kind == "lastfm-hetero":  # link prediction: no labels, no splits
        return {"add_reverse": args.add_reverse}
    if kind == "numpy" and typed:
        return {"path": args.path, "add_reverse": args.add_reverse}
    if kind == "csv" and typed:  # the edge-list flags are passed on to be refused by name
        return {
            "path": args.path,
            "add_reverse": args.add_reverse,
            "num_features": args.feat_dim or 0,
            "labels": args.labels,
            "features": args.features,
            "columns": args.columns,
            "header": args.header,
            "node_ids": args.node_ids,
        }
    if kind == "numpy":
        return {"path": args.path, "undirected": args.undirected}
    if kind == "csv":
        return {
            "path": args.path,
            "num_features": args.feat_dim or 0,
            "seed": args.seed,
            "undirected": args.undirected,
            "split_seed": args.split_seed,
            "labels": args.labels,
            "features": args.features,
            "columns": args.columns,
            "header": args.header or "auto",
            "node_ids": args.node_ids or "auto",
        }
    extra: dict[str, Any] = {} if args.homophily is None else {"homophily": args.homophily}
    if typed:
        extra["add_reverse"] = args.add_reverse
    return {
        "preset": args.preset,
        **sizes,
        **extra,
        "seed": args.seed,
        "split_seed": args.split_seed,
        "progress": not args.no_progress,
    }


def _node_data(g: GraphData) -> str:
    return ", ".join(f"{k} {t.dtype}{list(t.shape[1:])}" for k, t in g.node_data.items()) or "none"


def _types(g: GraphData) -> str:
    if not g.is_hetero:
        return ""
    nodes = ", ".join(f"{t} {n:,}" for t, n in zip(g.ntypes, g.node_counts()))
    edges = ", ".join(f"{':'.join(e)} {n:,}" for e, n in zip(g.etypes, g.edge_counts()))
    return f"; node types {nodes}; edge types {edges}"


def _count(ids: np.ndarray | None) -> int:
    return 0 if ids is None else len(ids)


def summarize(out: Path, manifest: GraphManifest, t_load: float, t_write: float) -> None:
    """Prints one line per written partition and the totals, read back from ``out``."""
    cut = halo = 0
    for p in range(manifest.num_partitions):
        r = PartitionReader(out / part_dir_name(p))
        try:
            indices = np.asarray(r.indices)
            remote = int(np.count_nonzero((indices < r.start) | (indices >= r.stop)))
            splits = " ".join(f"{s}={_count(r.split(s)):,}" for s in manifest.splits)
            splits += "".join(f" edges/{s}={_count(r.edge_split(s)):,}" for s in manifest.edge_splits)
            print(
                f"partition {p}: {r.num_owned:,} nodes, {len(indices):,} in-edges, {remote:,} from other partitions "
                f"({remote / max(1, len(indices)):.1%}), halo {len(r.halo):,} nodes, {splits}"
            )
            cut, halo = cut + remote, halo + len(r.halo)
        finally:
            r.close()
    print(
        f"total: {manifest.num_nodes:,} nodes, {manifest.num_edges:,} edges, "
        f"{manifest.num_partitions} {manifest.partition_method} partitions, "
        f"cut fraction {cut / max(1, manifest.num_edges):.3f}, halo {halo:,} nodes; "
        f"load {t_load:.1f}s, partition+write {t_write:.1f}s -> {out}",
        flush=True,
    )
