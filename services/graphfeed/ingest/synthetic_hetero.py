"""A seeded typed graph shaped like OGB's MAG (``--source synthetic --preset mag``).

Node types paper, author, institution, field_of_study; edge types ``author -writes-> paper``,
``paper -cites-> paper``, ``author -affiliated_with-> institution`` and
``paper -has_topic-> field_of_study`` (ogbn-mag's, in its proportions). Every node gets a
power-law expected degree per relation it takes part in (as in :mod:`graphfeed.ingest.synthetic`),
and each edge picks both endpoints in proportion to them, so degrees are heavy-tailed.

The task is ogbn-mag's: classify papers (``paper/label``, balanced classes) from ``paper/feat``
(``centroid[label] + noise``, see :func:`graphfeed.ingest.synthetic.centroid_scale`) and the
structure. Citations join papers of one class with probability ``homophily`` (the homogeneous
generator's planted communities); every author and field of study has a home class, and a
fraction ``homophily`` of its papers are of that class, so paper-author-paper and
paper-field-paper paths carry the label too. Authors, institutions and fields have no features.
Each edge type holds distinct pairs; everything is vectorized (the 20M-edge ``mag`` preset takes
well under a minute).
"""

from __future__ import annotations

from dataclasses import asdict, dataclass

import numpy as np
from tqdm import tqdm

from graphfeed.common.errors import InvalidArgument
from graphfeed.common.seeds import rng as seeded_rng
from graphfeed.ingest.graph import DEFAULT_FRACTIONS, GraphData, hetero_graph, random_split

# The homogeneous generator's pieces: its community-planting edge drawer, guided search and merge.
from graphfeed.ingest.synthetic import (
    CHUNK_EDGES,
    SyntheticSpec,
    _draw_edges,
    _expected_degrees,
    _features,
    _GuidedSearch,
    _merge_unique,
)


@dataclass(frozen=True)
class MagSpec:
    """Sizes of :func:`generate_mag` (node counts per type, edge counts per edge type)."""

    papers: int
    authors: int
    institutions: int
    fields: int
    writes: int  # author -> paper
    cites: int  # paper -> paper
    affiliated_with: int  # author -> institution
    has_topic: int  # paper -> field_of_study
    feat_dim: int
    num_classes: int
    homophily: float = 0.8
    power_law_exponent: float = 2.1
    feature_accuracy: float = 0.6


HETERO_PRESETS: dict[str, MagSpec] = {
    # ogbn-mag scaled to 1M papers: 20M edges in all.
    "mag": MagSpec(1_000_000, 1_500_000, 8_700, 60_000, 7_000_000, 5_500_000, 1_500_000, 6_000_000, 128, 349),
    "mag-small": MagSpec(2_000, 3_000, 40, 200, 8_000, 6_000, 3_000, 6_000, 16, 8),
}


def describe(spec: MagSpec) -> str:
    """One line of a preset's sizes (for ``--help``)."""
    edges = spec.writes + spec.cites + spec.affiliated_with + spec.has_topic
    return f"typed: {spec.papers:,} papers, {edges:,} edges, {spec.feat_dim} feat, {spec.num_classes} classes"


def generate_mag(
    preset: str = "mag",
    seed: int = 0,
    split_seed: int | None = None,
    add_reverse: bool = False,
    progress: bool = False,
    fractions: tuple[float, float, float] = DEFAULT_FRACTIONS,
    **overrides: float | None,
) -> GraphData:
    """The MAG-like graph of a preset (module docstring).

    Args:
        preset: a key of :data:`HETERO_PRESETS`.
        seed: seed of every random choice (the same seed gives the same graph).
        split_seed: seed of the random train/val/test split of the papers (default: ``seed``).
        add_reverse: also add ``rev_writes``, ``rev_cites``, ``rev_affiliated_with``, ``rev_has_topic``.
        progress: a progress bar over the edge types on stderr.
        fractions: train/val/test fractions of the papers.
        overrides: ``feat_dim``, ``num_classes`` or ``homophily`` replacing the preset's (None: kept).
    """
    if preset not in HETERO_PRESETS:
        raise InvalidArgument(f"unknown typed synthetic preset {preset!r}; choose from {sorted(HETERO_PRESETS)}")
    allowed = {"feat_dim", "num_classes", "homophily"}
    given = {k: v for k, v in overrides.items() if v is not None}
    if set(given) - allowed:
        raise InvalidArgument(
            f"preset {preset} fixes its node and edge counts per type; only {sorted(allowed)} may be changed, "
            f"got {sorted(set(given) - allowed)}"
        )
    spec = MagSpec(**{**asdict(HETERO_PRESETS[preset]), **given})
    _check(spec)
    c, h = spec.num_classes, spec.homophily
    label = seeded_rng(seed, "mag", "labels").permutation(np.arange(spec.papers, dtype=np.int64) % c)
    home = {
        t: seeded_rng(seed, "mag", "home", t).permutation(np.arange(n, dtype=np.int64) % c)
        for t, n in (("author", spec.authors), ("field_of_study", spec.fields))
    }
    bar = tqdm(total=4, desc="mag edge types", disable=not progress)
    edges = {}
    cites = SyntheticSpec(spec.papers, spec.cites, 0, c, h, spec.power_law_exponent)
    weights = _expected_degrees(cites, seeded_rng(seed, "mag", "cites", "degrees"))
    lo, hi = _draw_edges(cites, weights, label, seed, False)
    flip = seeded_rng(seed, "mag", "cites", "direction").random(len(lo)) < 0.5  # citing paper: either end
    edges[("paper", "cites", "paper")] = (np.where(flip, hi, lo), np.where(flip, lo, hi))
    del lo, hi, flip, weights
    bar.update()
    sizes = {
        "paper": spec.papers,
        "author": spec.authors,
        "institution": spec.institutions,
        "field_of_study": spec.fields,
    }
    for (s, rel, d), m, ca, cb in (
        (("author", "writes", "paper"), spec.writes, home["author"], label),
        (("author", "affiliated_with", "institution"), spec.affiliated_with, None, None),
        (("paper", "has_topic", "field_of_study"), spec.has_topic, label, home["field_of_study"]),
    ):
        edges[(s, rel, d)] = _bipartite(m, sizes[s], sizes[d], ca, cb, spec, seed, rel)
        bar.update()
    bar.close()
    order = [("author", "writes", "paper"), ("paper", "cites", "paper"), ("author", "affiliated_with", "institution")]
    order.append(("paper", "has_topic", "field_of_study"))
    feat_spec = SyntheticSpec(spec.papers, 0, spec.feat_dim, c, h, feature_accuracy=spec.feature_accuracy)
    paper_data = {"label": label}
    if spec.feat_dim > 0:
        paper_data["feat"] = _features(feat_spec, label, seeded_rng(seed, "mag", "features"))
    return hetero_graph(
        f"synthetic-{preset}",
        sizes,
        {e: edges.pop(e) for e in order},
        {"paper": paper_data},
        {"paper": random_split(spec.papers, fractions, seed if split_seed is None else split_seed)},
        num_classes=c,
        add_reverse=add_reverse,
        extra={"generator": "synthetic-mag", "preset": preset, "seed": seed, **asdict(spec)},
    )


def _check(spec: MagSpec) -> None:
    c = spec.num_classes
    if c < 1 or min(spec.papers, spec.authors, spec.fields) < c:
        raise InvalidArgument(f"need papers, authors and fields >= num_classes >= 1, got {c} classes for {spec}")
    if not 0.0 <= spec.homophily <= 1.0:
        raise InvalidArgument(f"homophily must be in [0, 1], got {spec.homophily}")
    if spec.feat_dim < 0:
        raise InvalidArgument(f"feat_dim must be >= 0, got {spec.feat_dim}")
    if c > 1 and not 1.0 / c < spec.feature_accuracy < 1.0:
        raise InvalidArgument(f"feature_accuracy must be in (1/{c}, 1), got {spec.feature_accuracy}")


def _weights(n: int, exponent: float, seed: int, rel: str) -> np.ndarray:
    """Power-law weights (rank-size form of P(d) ~ d^-exponent), in random node order, capped at
    sqrt(n) times the mean so that the top node cannot want more distinct neighbors than exist."""
    d = np.arange(1, n + 1, dtype=np.float64) ** (-1.0 / (exponent - 1.0))
    d /= d.mean()
    np.minimum(d, max(1.0, np.sqrt(n)), out=d)
    return d[seeded_rng(seed, "mag", "weights", rel).permutation(n)]


def _bipartite(
    m: int,
    ns: int,
    nd: int,
    cs: np.ndarray | None,
    cd: np.ndarray | None,
    spec: MagSpec,
    seed: int,
    rel: str,
) -> tuple[np.ndarray, np.ndarray]:
    """``m`` distinct edges ``src -> dst`` between two node sets, endpoints by power-law weight;
    with home classes ``cs``/``cd``, a fraction ``homophily`` of them stay inside one class."""
    if m > 0.25 * ns * nd:
        raise InvalidArgument(f"{rel}: {m} edges between {ns} and {nd} nodes is too dense (at most a quarter)")
    src_search = _GuidedSearch(np.cumsum(_weights(ns, spec.power_law_exponent, seed, f"{rel}/src")))
    wd = _weights(nd, spec.power_law_exponent, seed, f"{rel}/dst")
    classes = np.zeros(nd, np.int64) if cd is None else cd
    order = np.argsort(classes, kind="stable")  # dst nodes grouped by class
    dst_search = _GuidedSearch(np.cumsum(wd[order]))
    bounds = np.concatenate([[0.0], dst_search.cum])[np.searchsorted(classes[order], np.arange(classes.max() + 2))]
    lo, mass = bounds[:-1], np.diff(bounds)
    keys = np.empty(0, np.int64)
    for attempt in range(64):
        need = m - len(keys)
        if need == 0:
            break
        gen = seeded_rng(seed, "mag", "edges", rel, attempt)
        for start in range(0, need, CHUNK_EDGES):
            k = min(CHUNK_EDGES, need - start)
            a = src_search(gen.random(k) * src_search.total)
            x = gen.random(k) * dst_search.total
            if cs is not None:
                same = gen.random(k) < spec.homophily
                home = cs[a[same]]
                x[same] = lo[home] + gen.random(int(same.sum())) * mass[home]
            b = order[dst_search(x)]
            keys = _merge_unique(keys, a * nd + b)  # a handful of merges: chunks are 4M draws
    if len(keys) != m:
        raise InvalidArgument(f"{rel}: could not draw {m} distinct edges between {ns} and {nd} nodes")
    return keys // nd, keys % nd
