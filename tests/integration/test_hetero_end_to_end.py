"""A typed graph through every layer: ingest -> graph-stores -> sampler -> loader -> DGL
heterogeneous blocks, in process and over real gRPC servers (inline and shared memory).

The graph is arithmetic, so every answer is known by formula: a user u has features
``[u, u + 0.5, u + 0.25]``, an item i ``[-i] * 5`` and the label ``i % 3``; tags have no
features. Whatever the sampler picks, each minibatch's per-type features and labels must be
those of the type-wise ids its blocks name, and every block edge must connect the node types
of its relation.
"""

from __future__ import annotations

import os
from pathlib import Path

import dgl
import numpy as np
import pytest
import torch

from graphfeed.common import shm
from graphfeed.common.partition import GraphManifest, part_dir_name
from graphfeed.graph_store.partitions import LocalPartitionSet
from graphfeed.graph_store.store import GraphStore
from graphfeed.ingest.graph import GraphData, hetero_graph
from graphfeed.ingest.partition import write_partitioned
from graphfeed.loader.core import Loader
from graphfeed.sampler.core import MultiHopSampler
from graphfeed.trainer.dataloader import EmbeddedDataLoader, RemoteDataLoader
from graphfeed.trainer.job import JobArgs
from tests.integration.inprocess import InProcessCluster

USERS, ITEMS, TAGS = 60, 40, 9


def typed_graph() -> GraphData:
    u = np.arange(USERS)
    buys_src = np.repeat(u, u % 5)  # user u buys u % 5 items (some none)
    buys_dst = (buys_src * 7 + np.concatenate([np.arange(k) for k in u % 5])) % ITEMS
    tag_src = np.arange(TAGS * 2) % TAGS
    tag_dst = (np.arange(TAGS * 2) * 3) % (ITEMS // 2)  # tags only the first half of the items
    items = np.arange(ITEMS)
    return hetero_graph(
        "typed-arith",
        {"user": USERS, "item": ITEMS, "tag": TAGS},
        {("user", "buys", "item"): (buys_src, buys_dst), ("tag", "tags", "item"): (tag_src, tag_dst)},
        {
            "user": {"feat": user_feat(u)},
            "item": {"feat": item_feat(items), "label": items % 3},
        },
        {"item": {"train": items[: ITEMS // 2], "val": items[ITEMS // 2 : 30], "test": items[30:]}},
        add_reverse=True,
    )


def user_feat(u: np.ndarray) -> np.ndarray:
    u = np.asarray(u, dtype=np.float32)
    return np.stack([u, u + 0.5, u + 0.25], axis=1)


def item_feat(i: np.ndarray) -> np.ndarray:
    return -np.repeat(np.asarray(i, dtype=np.float32)[:, None], 5, axis=1)


FORMULA = {"user": user_feat, "item": item_feat}


@pytest.fixture(scope="module")
def typed_root(tmp_path_factory: pytest.TempPathFactory) -> Path:
    root = tmp_path_factory.mktemp("typed") / "g"
    write_partitioned(typed_graph(), root, 2, method="random", seed=3)
    return root


class Ids:
    """Type-wise ids as blocks give them (graphfeed's, numbered partition by partition, as
    DistDGL's) -> the input's own ids (``orig_ids.npy``), which the formulas speak."""

    def __init__(self, root: Path) -> None:
        self.schema = GraphManifest.load(root).schema()
        self.orig = np.load(root / "orig_ids.npy")

    def __call__(self, ntype: str, ids: torch.Tensor) -> np.ndarray:
        return self.orig[self.schema.to_gids(ntype, ids.numpy())]


def check_minibatch(ids: Ids, input_nodes: dict, output_nodes: dict, blocks: list, fanout: int) -> None:
    """Features, labels and edge types of one minibatch against the formulas."""
    first, last = blocks[0], blocks[-1]
    for ntype, rows in FORMULA.items():
        if first.num_src_nodes(ntype):
            nid = first.srcnodes[ntype].data[dgl.NID]
            assert np.array_equal(first.srcnodes[ntype].data["feat"].numpy(), rows(ids(ntype, nid)))
            assert torch.equal(input_nodes[ntype], nid)
    assert "feat" not in first.srcnodes["tag"].data  # featureless
    seeds = last.dstnodes["item"].data[dgl.NID]
    assert torch.equal(output_nodes["item"], seeds)
    assert np.array_equal(last.dstnodes["item"].data["label"].numpy(), ids("item", seeds) % 3)
    for block in blocks:
        for ntype in block.dsttypes:  # DGL's block layout: each type's dst nodes lead its src nodes
            n = block.num_dst_nodes(ntype)
            assert torch.equal(block.srcnodes[ntype].data[dgl.NID][:n], block.dstnodes[ntype].data[dgl.NID])
        for etype in block.canonical_etypes:
            s, d = block.edges(etype=etype)
            if not len(s):
                continue
            src_ids = ids(etype[0], block.srcnodes[etype[0]].data[dgl.NID][s])
            dst_ids = ids(etype[2], block.dstnodes[etype[2]].data[dgl.NID][d])
            per_dst = np.bincount(d.numpy())
            assert per_dst.max() <= fanout
            if etype[1] == "buys":  # user u -> item (7u + j) % ITEMS
                ok = [(dst - 7 * src) % ITEMS < src % 5 for src, dst in zip(src_ids, dst_ids)]
                assert all(ok), etype
            if etype[1] == "rev_buys":  # item -> user
                ok = [(src - 7 * dst) % ITEMS < dst % 5 for src, dst in zip(src_ids, dst_ids)]
                assert all(ok), etype


def test_in_process_typed_minibatches_match_the_formulas(typed_root: Path) -> None:
    m = GraphManifest.load(typed_root)
    schema = m.schema()
    assert schema.ntypes == ("user", "item", "tag")
    assert [e[1] for e in schema.etypes] == ["buys", "tags", "rev_buys", "rev_tags"]
    parts = LocalPartitionSet([GraphStore.open(typed_root / part_dir_name(p)) for p in range(2)])
    loader = Loader(parts, MultiHopSampler(parts), cache_policy="static_degree", cache_bytes=4000)
    try:
        dl = EmbeddedDataLoader(loader, "train", fanouts=[3, 2], batch_size=8, seed=5)
        batches = list(dl)
        assert len(batches) == len(dl) == 3  # 20 items in train, 8 per batch
        ids = Ids(typed_root)
        seen = np.concatenate([ids("item", out["item"]) for _, out, _ in batches])
        assert sorted(seen.tolist()) == list(range(ITEMS // 2))
        for input_nodes, output_nodes, blocks in batches:
            assert set(blocks[0].ntypes) == {"user", "item", "tag"}
            check_minibatch(ids, input_nodes, output_nodes, blocks, 3)
        # per-edge-type fanouts (DGL's dict form): no tags sampled at all in the input layer
        per_type: list[int | dict[str, int]] = [{"buys": 2, "tags": 0, "rev_buys": 2, "rev_tags": 0}, 2]
        dl = EmbeddedDataLoader(loader, "train", fanouts=per_type, batch_size=8, seed=5)
        for input_nodes, output_nodes, blocks in dl:
            check_minibatch(ids, input_nodes, output_nodes, blocks, 2)
            assert blocks[0].num_edges(("tag", "tags", "item")) == 0
        assert {s.ntype for s in loader.cache_stats(by_ntype=True)} == {"user", "item"}
    finally:
        loader.close()
        parts.close()


@pytest.mark.parametrize("shm_dir", ["", str(shm.DEFAULT_DIR)], ids=["inline", "shm"])
def test_typed_minibatches_over_grpc_equal_in_process(typed_root: Path, shm_dir: str) -> None:
    if shm_dir and not os.access(shm_dir, os.W_OK):
        pytest.skip(f"needs a writable {shm_dir}")
    parts = LocalPartitionSet([GraphStore.open(typed_root / part_dir_name(p)) for p in range(2)])
    local = Loader(parts, MultiHopSampler(parts), cache_policy="none", cache_bytes=0)
    cluster = InProcessCluster.start(typed_root)
    try:
        job = JobArgs(fanouts=[3, 2], batch_size=8, seed=11)
        want = list(EmbeddedDataLoader(local, "val", **job))
        remote = RemoteDataLoader(cluster.loader.address, "val", shm_dir=shm_dir, connect_timeout_s=30, **job)
        with remote:
            got = list(remote)
        assert len(got) == len(want) > 0
        ids = Ids(typed_root)
        for (gi, go, gb), (wi, wo, wb) in zip(got, want):
            assert all(torch.equal(go[t], wo[t]) for t in wo)
            check_minibatch(ids, gi, go, gb, 3)
            for t in wi:
                assert torch.equal(gi[t], wi[t])
            for a, b in zip(gb, wb):
                for etype in b.canonical_etypes:
                    assert all(torch.equal(x, y) for x, y in zip(a.edges(etype=etype), b.edges(etype=etype)))
    finally:
        cluster.stop()
        local.close()
        parts.close()


def test_typed_packs_serve_each_types_misses(typed_root: Path, tmp_path: Path) -> None:
    """DiskGNN packs per node type: every featured type's tables are packed apart, and a loader
    given them streams the same minibatches with its misses read from the packs."""
    from graphfeed.pack.writer import PackOptions, pack_tables
    from graphfeed.trainer.job import job_spec

    parts = LocalPartitionSet([GraphStore.open(typed_root / part_dir_name(p)) for p in range(2)])
    job = JobArgs(fanouts=[3, 2], batch_size=8, seed=5)
    try:
        manifests = pack_tables(parts, job_spec("train", **job), 0, tmp_path, PackOptions(steps_per_pack=2))
        assert sorted(m.job.feature_name for m in manifests) == ["item/feat", "user/feat"]
        plain = Loader(parts, MultiHopSampler(parts), cache_policy="none", cache_bytes=0)
        packed = Loader(parts, MultiHopSampler(parts), cache_policy="none", cache_bytes=0, pack_root=tmp_path)
        try:
            want = list(EmbeddedDataLoader(plain, "train", **job))
            got = list(EmbeddedDataLoader(packed, "train", **job))
            assert packed.pack_stats.hits > 0 and packed.pack_stats.fallbacks == 0
            ids = Ids(typed_root)
            for (gi, go, gb), (wi, _wo, wb) in zip(got, want, strict=True):
                assert all(torch.equal(gi[t], wi[t]) for t in wi)
                check_minibatch(ids, gi, go, gb, 3)
                for t in ("user", "item"):
                    assert torch.equal(gb[0].srcnodes[t].data["feat"], wb[0].srcnodes[t].data["feat"])
        finally:
            plain.close()
            packed.close()
    finally:
        parts.close()
