"""What every ``graphfeed bench <name>`` shares: one argparse convention, datasets, the report.

A benchmark module calls :func:`register` (or :func:`main` when run as a script) with its own
arguments only; the harness adds the common ones (``--out``, ``--seed`` and, where the benchmark
gives them defaults, ``--steps``, ``--repeats`` and the dataset flags ``--preset``, ``--root``,
``--workdir``, ``--batch-size``, ``--fanouts``), records the machine's load before the run, and
:func:`write` adds it after, with the command line, to the JSON and markdown of
:mod:`graphfeed.bench.report`. Datasets are ingested once into the workdir (:func:`dataset`) and
reused. Processes, clusters and systems are :mod:`graphfeed.bench.systems`; repeats, ratios and
their summary are :mod:`graphfeed.bench.runs`.

Only the standard library is imported at module level: ``bench/gpu.py`` runs this on a bare
GPU image.
"""

from __future__ import annotations

import argparse
import functools
import logging
import sys
from collections.abc import Callable, Sequence
from pathlib import Path
from typing import Any

from graphfeed.bench import report

log = logging.getLogger(__name__)

RESULTS = Path("bench/results")
# the dataset flags of the benchmarks that run graphfeed's job on a synthetic preset
DATASET: dict[str, Any] = {"preset": "small", "workdir": Path("runs/bench"), "batch_size": 1024, "fanouts": (15, 10, 5)}
Run = Callable[[argparse.Namespace], "int | None"]
AddArguments = Callable[[argparse.ArgumentParser], None]


def add_common(
    p: argparse.ArgumentParser,
    *,
    steps: int | None = None,
    repeats: int | None = None,
    preset: str | None = None,
    workdir: Path | None = None,
    batch_size: int | None = None,
    fanouts: Sequence[int] | None = None,
) -> None:
    """The flags every benchmark spells alike. ``--out`` and ``--seed`` always; each other flag
    where the benchmark gives its default (None: the benchmark has no such knob)."""
    p.add_argument("--out", type=Path, default=None, help="JSON path; the markdown goes next to it (.md)")
    p.add_argument("--seed", type=int, default=0, help="seed of the data and the job (default 0)")
    if steps is not None:
        p.add_argument("--steps", type=int, default=steps, help=f"minibatches per run (default {steps})")
    if repeats is not None:
        p.add_argument(
            "--repeats",
            type=int,
            default=repeats,
            help=f"runs per system, alternated; median and mean (default {repeats})",
        )
    if preset is not None:
        p.add_argument(
            "--preset",
            default=preset,
            help=f"synthetic preset: tiny, small, medium, large, mag (typed, MAG-like), mag-small; or cora "
            f"(default {preset})",
        )
        p.add_argument("--root", "--data", type=Path, default=None, help="an ingested dataset instead of the preset's")
    if workdir is not None:
        p.add_argument(
            "--workdir", "--work-dir", type=Path, default=workdir, help=f"datasets and logs (default {workdir})"
        )
    if batch_size is not None:
        p.add_argument("--batch-size", type=int, default=batch_size, help=f"seeds per minibatch (default {batch_size})")
    if fanouts is not None:
        default = " ".join(map(str, fanouts))
        p.add_argument(
            "--fanouts", type=int, nargs="+", default=list(fanouts), help=f"input layer first (default {default})"
        )


def register(
    sub: argparse._SubParsersAction,
    name: str,
    doc: str | None,
    help: str,
    add_arguments: AddArguments,
    run: Run,
    **common: Any,
) -> argparse.ArgumentParser:
    """Adds ``graphfeed bench <name>``: the common flags (:func:`add_common` with ``common``),
    then the benchmark's own (``add_arguments``); running it calls ``run(args)``."""
    p = sub.add_parser(name, help=help, description=doc, formatter_class=argparse.RawDescriptionHelpFormatter)
    add_common(p, **common)
    add_arguments(p)
    p.set_defaults(func=functools.partial(_started, run))
    return p


def main(
    doc: str | None, add_arguments: AddArguments, run: Run, argv: Sequence[str] | None = None, **common: Any
) -> int:
    """Runs one benchmark module as a script (``python bench/gpu.py``, ``python -m
    graphfeed.bench.append``) with the arguments ``graphfeed bench <name>`` gives it."""
    parser = argparse.ArgumentParser(description=doc, formatter_class=argparse.RawDescriptionHelpFormatter)
    add_common(parser, **common)
    add_arguments(parser)
    return _started(run, parser.parse_args(argv))


def _started(run: Run, args: argparse.Namespace) -> int:
    logging.basicConfig(level=logging.INFO, format="%(asctime)s %(levelname)s %(name)s: %(message)s")
    args.machine_start = report.machine()
    return run(args) or 0


def command() -> str:
    """The command line as a user types it: ``graphfeed bench <name> ...``."""
    argv = sys.argv[sys.argv.index("bench") + 1 :] if "bench" in sys.argv else [Path(sys.argv[0]).name, *sys.argv[1:]]
    return " ".join(["graphfeed bench", *argv])


def write(args: argparse.Namespace, result: dict, table: str, default_name: str) -> Path:
    """Writes ``result`` (plus the command and the machine's load at start and end) to ``--out``
    or ``bench/results/<default_name>.json``, and ``table`` next to it; returns the JSON path."""
    out = args.out or RESULTS / f"{default_name}.json"
    report.write(out, {"command": command(), **result}, table, getattr(args, "machine_start", None))
    return out


# --- datasets --------------------------------------------------------------------------------


def dataset(
    workdir: Path,
    name: str,
    partitions: int = 2,
    method: str = "metis",
    make: Callable[[], Any] | None = None,
) -> Path:
    """``workdir/<name>-<method>-<partitions>``, ingested on first use and reused after.

    Args:
        name: ``synthetic-<preset>`` (a preset of ``graphfeed.ingest.synthetic``), ``cora``, or
            any name when ``make`` is given.
        make: returns the ``GraphData`` to ingest (default: by ``name``).
    """
    from graphfeed.common.partition import MANIFEST

    root = workdir.resolve() / f"{name}-{method}-{partitions}"
    if not (root / MANIFEST).exists():
        from graphfeed.ingest.partition import write_partitioned

        log.info("ingesting %s into %s", name, root)
        write_partitioned((make or functools.partial(_graph, name))(), root, partitions, method, progress=True)
    return root


def _graph(name: str) -> Any:
    from graphfeed.ingest.sources import load_source
    from graphfeed.ingest.synthetic import generate_preset
    from graphfeed.ingest.synthetic_hetero import HETERO_PRESETS, generate_mag

    preset = name.removeprefix("synthetic-")
    if preset in HETERO_PRESETS:  # typed, with DGL's rev_ relations as DGL users add them to ogbn-mag
        return generate_mag(preset, add_reverse=True, progress=True)
    return load_source("cora") if name == "cora" else generate_preset(preset, progress=True)


def dataset_name(args: argparse.Namespace) -> str:
    """What a report calls the dataset: ``--root``'s directory name, else the preset."""
    return Path(args.root).name if getattr(args, "root", None) else args.preset


def ensure_dataset(args: argparse.Namespace) -> Path:
    """The dataset the common flags name: ``--root``, or ``--preset`` in 2 METIS partitions under
    ``--workdir``; with ``args.edges`` (a relation) ingested with that edge split (``graphfeed
    ingest --edge-split``, default fractions and seed) into a directory of its own."""
    if args.root:
        return Path(args.root).resolve()
    name = args.preset if args.preset == "cora" else f"synthetic-{args.preset}"
    relation = getattr(args, "edges", "")
    if not relation:
        return dataset(args.workdir, name)
    from graphfeed.ingest.edge_split import split_edges

    # ":" of a canonical "src:rel:dst" kept out of the directory name
    key = f"{name}+edges-{relation.replace(':', '.')}"
    return dataset(args.workdir, key, make=lambda: split_edges(_graph(name), relation))


def edge_rows(root: Path, name: str = "train") -> Any:
    """Edge split ``name``'s rows ``(src, dst, etype, eid, rev_eid)`` (int64 [n, 5], global ids,
    partition by partition; :mod:`graphfeed.ingest.edge_split`); ValueError if there is none."""
    import numpy as np

    from graphfeed.common.partition import GraphManifest, PartitionReader, part_dir_name

    m = GraphManifest.load(root)
    out = []
    for p in range(m.num_partitions):
        reader = PartitionReader(root / part_dir_name(p))
        rows = reader.edge_split(name)
        reader.close()
        if rows is None:
            raise ValueError(f"{root} has no edge split {name!r}: ingest it with --edge-split RELATION")
        out.append(np.array(rows))
    return np.concatenate(out)


def local_partitions(root: Path) -> Any:
    """Every partition of ``root`` opened in this process (a ``LocalPartitionSet``; close it)."""
    from graphfeed.common.partition import GraphManifest, part_dir_name
    from graphfeed.graph_store.partitions import LocalPartitionSet
    from graphfeed.graph_store.store import GraphStore

    m = GraphManifest.load(root)
    return LocalPartitionSet([GraphStore.open(root / part_dir_name(p)) for p in range(m.num_partitions)])


def split_gids(root: Path, name: str = "train") -> Any:
    """The global ids of split ``name`` (every type's), ascending: the sampler service's seeds."""
    import numpy as np

    from graphfeed.common.partition import GraphManifest, PartitionReader, part_dir_name

    m = GraphManifest.load(root)
    out = []
    for p in range(m.num_partitions):
        reader = PartitionReader(root / part_dir_name(p))
        out.append(np.array(reader.split(name)))
        reader.close()
    return np.concatenate(out)


def load_global(root: Path) -> tuple[Any, Any, Any]:
    """The whole graph as one DGLGraph (a heterograph when typed, in DGL's type-wise ids), its
    feature table(s) and training ids (the in-process DGL reference of every benchmark): for a
    typed graph the features and training ids are ``{ntype: ...}`` dicts over the types that
    have them."""
    import dgl
    import numpy as np
    import torch

    from graphfeed.common.partition import GraphManifest, PartitionReader, part_dir_name

    m = GraphManifest.load(root)
    readers = [PartitionReader(root / part_dir_name(p)) for p in range(m.num_partitions)]
    schema = m.schema()
    train = np.concatenate([r.split("train") for r in readers])
    if schema.is_hetero:
        return _load_hetero(readers, schema, train)
    # Partitions own consecutive gid ranges, so their in-CSRs concatenate into the global one.
    edge_base = np.cumsum([0] + [len(r.indices) for r in readers])
    indptr = np.concatenate([readers[0].indptr[:1]] + [r.indptr[1:] + b for r, b in zip(readers, edge_base)])
    # int64 ids: DGL's default idtype (partitions may store int32), as a DGL user's graph has.
    indices = np.concatenate([r.indices for r in readers]).astype(np.int64, copy=False)
    eids = np.concatenate([r.edge_ids for r in readers]).astype(np.int64, copy=False)
    csc = (torch.from_numpy(indptr), torch.from_numpy(indices), torch.from_numpy(eids))
    g = dgl.graph(("csc", csc), num_nodes=m.num_nodes)
    feat = torch.from_numpy(np.concatenate([r.node_data("feat") for r in readers]))
    for r in readers:
        r.close()
    return g, feat, torch.from_numpy(train)


def _load_hetero(readers: list, schema: Any, train: Any) -> tuple[Any, Any, Any]:
    """:func:`load_global` of a typed graph: a DGL heterograph with the graphfeed edge ids of
    each type as its type-wise edge ids (DGL's order of the edges)."""
    import dgl
    import numpy as np
    import torch

    edges = {}
    for r, etype in enumerate(schema.etypes):
        src, dst, eid = [], [], []
        for reader in readers:
            ptr = np.asarray(reader.etype_indptr[r])
            lo, hi = int(ptr[0]), int(ptr[-1])
            src.append(np.asarray(reader.indices[lo:hi], np.int64))
            dst.append(reader.start + np.repeat(np.arange(reader.num_owned, dtype=np.int64), np.diff(ptr)))
            eid.append(np.asarray(reader.edge_ids[lo:hi], np.int64))
        order = np.argsort(np.concatenate(eid), kind="stable")  # DGL's edge ids = graphfeed's type-wise ones
        s_tw = schema.to_typed(np.concatenate(src)[order])[1]
        d_tw = schema.to_typed(np.concatenate(dst)[order])[1]
        edges[etype] = (torch.from_numpy(s_tw), torch.from_numpy(d_tw))
    g = dgl.heterograph(edges, num_nodes_dict={t: schema.num_nodes(t) for t in schema.ntypes})
    feat = {}
    for t in schema.ntypes:
        key = schema.data_key(t, "feat")
        if key in readers[0].manifest.node_data:  # partition by partition = type-wise id order
            feat[t] = torch.from_numpy(np.concatenate([reader.node_data(key) for reader in readers]))
    types, ids = schema.to_typed(train)
    seeds = {t: torch.from_numpy(ids[types == i]) for i, t in enumerate(schema.ntypes) if (types == i).any()}
    for reader in readers:
        reader.close()
    return g, feat, seeds
