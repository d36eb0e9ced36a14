"""The synthetic generator: deterministic, power-law degrees, planted communities, learnable labels."""

from __future__ import annotations

import numpy as np
import pytest

from graphfeed.common.errors import InvalidArgument
from graphfeed.ingest.graph import GraphData
from graphfeed.ingest.synthetic import PRESETS, _GuidedSearch, generate, generate_preset


@pytest.fixture(scope="module")
def g() -> GraphData:
    return generate(20_000, 200_000, feat_dim=32, num_classes=8, seed=3, homophily=0.7)


def test_deterministic_for_a_seed() -> None:
    a, b = generate_preset("tiny", seed=5), generate_preset("tiny", seed=5)
    c = generate_preset("tiny", seed=6)
    assert np.array_equal(a.src, b.src) and np.array_equal(a.dst, b.dst)
    assert all(np.array_equal(a.node_data[k], b.node_data[k]) for k in a.node_data)
    assert all(np.array_equal(a.splits[k], b.splits[k]) for k in a.splits)
    assert not np.array_equal(a.src, c.src)


def test_tiny_preset_sizes() -> None:
    t = generate_preset("tiny")
    spec = PRESETS["tiny"]
    assert t.num_nodes == spec.num_nodes == 2000
    assert t.num_edges == 2 * spec.num_edges == 40_000
    assert t.node_data["feat"].shape == (2000, 16) and t.node_data["feat"].dtype == np.float32
    assert t.num_classes == 4 and t.node_data["label"].dtype == np.int64
    assert {k: len(v) for k, v in t.splits.items()} == {"train": 1200, "val": 400, "test": 400}
    t.validate()


def test_simple_undirected(g: GraphData) -> None:
    assert g.num_edges == 400_000
    assert not (g.src == g.dst).any()
    n = g.num_nodes
    fwd = np.unique(g.src * n + g.dst)
    assert len(fwd) == g.num_edges  # no duplicate edges
    assert np.array_equal(fwd, np.unique(g.dst * n + g.src))  # every (u, v) has (v, u)


def test_degrees_are_skewed(g: GraphData) -> None:
    deg = np.bincount(g.dst, minlength=g.num_nodes)
    assert deg.max() > 20 * deg.mean()
    top = np.sort(deg)[::-1][: g.num_nodes // 100]
    assert top.sum() / deg.sum() > 0.15  # the top 1% of nodes hold > 15x their "fair" share
    assert np.median(deg) < deg.mean()


def test_homophily_as_requested(g: GraphData) -> None:
    lab = g.node_data["label"]
    assert abs(np.mean(lab[g.src] == lab[g.dst]) - 0.7) < 0.01
    assert np.bincount(lab).min() == np.bincount(lab).max()  # balanced communities
    low = generate(20_000, 200_000, feat_dim=0, num_classes=8, seed=3, homophily=0.2)
    assert abs(np.mean(low.node_data["label"][low.src] == low.node_data["label"][low.dst]) - 0.2) < 0.01


def nearest_centroid_accuracy(x: np.ndarray, y: np.ndarray, train: np.ndarray, test: np.ndarray, c: int) -> float:
    cent = np.stack([x[train][y[train] == k].mean(0) for k in range(c)])
    d = (x[test] ** 2).sum(1)[:, None] - 2 * x[test] @ cent.T + (cent**2).sum(1)[None, :]
    return float(np.mean(d.argmin(1) == y[test]))


def test_features_alone_are_weak_but_neighbors_help(g: GraphData) -> None:
    x, y, c = g.node_data["feat"].astype(np.float64), g.node_data["label"], g.num_classes
    tr, te = g.splits["train"], g.splits["test"]
    alone = nearest_centroid_accuracy(x, y, tr, te, c)
    assert 2.0 / c < alone < 0.75  # well above chance (1/8), well below perfect
    deg = np.bincount(g.dst, minlength=g.num_nodes)
    agg = np.zeros_like(x)
    np.add.at(agg, g.dst, x[g.src])
    agg /= np.maximum(deg, 1)[:, None]
    both = nearest_centroid_accuracy(np.concatenate([x, agg], 1), y, tr, te, c)
    assert both > alone + 0.15  # one round of neighbor averaging already helps a lot


def test_guided_search_equals_searchsorted() -> None:
    rng = np.random.default_rng(0)
    cum = np.cumsum(rng.pareto(1.2, 10_000) + 1e-3)
    q = np.concatenate([rng.random(100_000) * cum[-1], cum[:50], [0.0]])
    assert np.array_equal(_GuidedSearch(cum)(q), np.minimum(np.searchsorted(cum, q, side="right"), len(cum) - 1))


def test_bad_parameters() -> None:
    with pytest.raises(InvalidArgument, match="homophily"):
        generate(100, 200, 4, 2, homophily=1.5)
    with pytest.raises(InvalidArgument, match="num_edges"):
        generate(10, 100, 4, 2)
    with pytest.raises(InvalidArgument, match="preset"):
        generate_preset("huge")
