"""Edge splits at ingest (issue 26): disjoint, reproducible, transductive, twins found, written per partition."""

from __future__ import annotations

from pathlib import Path

import numpy as np
import pytest

from graphfeed.common.errors import InvalidArgument
from graphfeed.common.partition import PartitionReader, part_dir_name
from graphfeed.ingest.edge_split import parse_fractions, split_edges
from graphfeed.ingest.graph import GraphData, hetero_graph, symmetrize
from graphfeed.ingest.partition import write_partitioned


def _ring(n: int = 40) -> GraphData:
    """An undirected graph: a ring plus chords, both directions stored."""
    a = np.arange(n, dtype=np.int64)
    src = np.concatenate([a, a[::3]])
    dst = np.concatenate([(a + 1) % n, (a[::3] + 7) % n])
    s, d, _ = symmetrize(src, dst)
    feat = np.arange(n * 2, dtype=np.float32).reshape(n, 2)
    return GraphData("ring", n, s, d, {"feat": feat}, {})


def _pairs(g: GraphData) -> set[tuple[int, int]]:
    return set(zip(g.src.tolist(), g.dst.tolist()))


def test_symmetric_split_is_disjoint_reproducible_and_transductive() -> None:
    g = _ring()
    out = split_edges(g, "_E", (0.6, 0.2, 0.2), seed=3)
    again = split_edges(g, "_E", (0.6, 0.2, 0.2), seed=3)
    other = split_edges(g, "_E", (0.6, 0.2, 0.2), seed=4)
    for name in ("train", "val", "test"):
        np.testing.assert_array_equal(out.edge_splits[name], again.edge_splits[name])
    assert not np.array_equal(out.edge_splits["train"], other.edge_splits["train"])
    undirected = {frozenset(p) for p in _pairs(g)}
    got = [{frozenset(r[:2].tolist()) for r in out.edge_splits[s]} for s in ("train", "val", "test")]
    assert sum(len(x) for x in got) == len(undirected)  # each unordered pair once, in one split
    assert set.union(*got) == undirected
    kept = _pairs(out)
    for name in ("val", "test"):
        rows = out.edge_splits[name]
        assert (rows[:, 3:] == -1).all()
        for u, v in rows[:, :2].tolist():
            assert (u, v) not in kept and (v, u) not in kept  # held out in both directions
    for u, v, _, eid, rev in out.edge_splits["train"].tolist():
        assert (out.src[eid], out.dst[eid]) == (u, v)
        assert (out.src[rev], out.dst[rev]) == (v, u)
    out.validate()


def test_typed_split_finds_reverse_type_twins() -> None:
    g = hetero_graph(
        "uv",
        {"user": 5, "item": 7},
        {
            ("user", "buys", "item"): (np.array([0, 0, 1, 2, 3, 4, 4, 1]), np.array([1, 2, 3, 4, 5, 6, 0, 3])),
        },
        add_reverse=True,
    )
    out = split_edges(g, "buys", (0.5, 0.25, 0.25), seed=0)
    starts = out.etype_starts()
    buys, rev = out.etypes.index(("user", "buys", "item")), out.etypes.index(("item", "rev_buys", "user"))
    train = out.edge_splits["train"]
    assert len(train) + len(out.edge_splits["val"]) + len(out.edge_splits["test"]) == 7  # (1, 3) twice: one pair
    for u, v, r, eid, reid in train.tolist():
        assert r == buys and starts[buys] <= eid < starts[buys + 1] and starts[rev] <= reid < starts[rev + 1]
        assert (out.src[reid], out.dst[reid]) == (v, u)
    for u, v in np.concatenate([out.edge_splits["val"], out.edge_splits["test"]])[:, :2].tolist():
        assert (u, v) not in _pairs(out) and (v, u) not in _pairs(out)
    assert out.etype_counts[buys] == out.etype_counts[rev] == len(train) + 1  # the parallel (1, 3) stays if trained


@pytest.mark.parametrize(
    ("fractions", "match"),
    [("0.5,0.2,0.2", "sum to 1"), ("0.5,0.5", "three numbers"), ("1.2,-0.1,-0.1", ">= 0"), ("0,0.5,0.5", "train")],
)
def test_bad_fractions_are_refused(fractions: str, match: str) -> None:
    with pytest.raises(InvalidArgument, match=match):
        parse_fractions(fractions)


def test_unknown_relation_is_refused() -> None:
    with pytest.raises(InvalidArgument, match="nope"):
        split_edges(_ring(), "nope")


def test_partitions_hold_each_edge_at_its_dst_owner(tmp_path: Path) -> None:
    out = split_edges(_ring(60), "_E", (0.7, 0.1, 0.2), seed=1)
    manifest = write_partitioned(out, tmp_path, 3, method="random", seed=0)
    assert manifest.edge_splits == ("test", "train", "val")
    total = 0
    for p in range(3):
        r = PartitionReader(tmp_path / part_dir_name(p))
        try:
            rows = r.edge_split("train")
            assert rows is not None
            assert ((rows[:, 1] >= r.start) & (rows[:, 1] < r.stop)).all()
            indptr, eids = np.asarray(r.indptr), np.asarray(r.edge_ids)
            for _, v, _, eid, _ in rows.tolist():  # the eid is an in-edge of its dst, there
                lo, hi = indptr[v - r.start], indptr[v - r.start + 1]
                assert eid in eids[lo:hi].tolist()
            total += len(rows)
        finally:
            r.close()
    assert total == len(out.edge_splits["train"])
