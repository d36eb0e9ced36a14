"""Edge minibatches over real servers (issue 26): RemoteDataLoader against a loader, sampler and
two graph-stores on loopback yields the same pair graphs, negatives and blocks as the embedded
loader over the same partitions, inline gRPC and through shared memory; no seed edge reaches a
block over the wire either; a graph without an edge split gets NOT_FOUND and the loader serves on."""

from __future__ import annotations

import os
from collections.abc import Iterator
from pathlib import Path

import dgl
import pytest
import torch

from graphfeed.common.errors import NotFound
from graphfeed.common.partition import part_dir_name
from graphfeed.graph_store.partitions import LocalPartitionSet
from graphfeed.graph_store.store import GraphStore
from graphfeed.ingest.edge_split import split_edges
from graphfeed.ingest.partition import write_partitioned
from graphfeed.loader.core import Loader
from graphfeed.sampler.core import MultiHopSampler
from graphfeed.trainer.dataloader import EmbeddedDataLoader, RemoteDataLoader
from tests.graphs import arithmetic_graph
from tests.integration.inprocess import InProcessCluster

pytestmark = pytest.mark.integration

SHM = "/dev/shm"
JOB = {"fanouts": [3, 2], "batch_size": 16, "seed": 7, "seed_edges": True, "num_negatives": 2}


@pytest.fixture(scope="module")
def root(tmp_path_factory: pytest.TempPathFactory) -> Path:
    out = tmp_path_factory.mktemp("edge-wire")
    write_partitioned(split_edges(arithmetic_graph(), "_E", (0.8, 0.1, 0.1), seed=2), out, 2, method="random")
    return out


@pytest.fixture(scope="module")
def cluster(root: Path) -> Iterator[InProcessCluster]:
    c = InProcessCluster.start(root)
    try:
        yield c
    finally:
        c.stop()


def _embedded(root: Path) -> list[tuple]:
    stores = LocalPartitionSet([GraphStore.open(root / part_dir_name(p)) for p in range(2)])
    loader = Loader(stores, MultiHopSampler(stores), cache_policy="none")
    try:
        return list(EmbeddedDataLoader(loader, "train", **JOB))  # type: ignore[arg-type]
    finally:
        loader.close()


def _same_graph(a: dgl.DGLGraph, b: dgl.DGLGraph) -> bool:
    return all(torch.equal(x, y) for x, y in zip(a.edges(), b.edges())) and a.num_nodes() == b.num_nodes()


@pytest.mark.parametrize("shm", ["", SHM])
def test_remote_edge_minibatches_equal_the_embedded_ones(root: Path, cluster: InProcessCluster, shm: str) -> None:
    if shm and not os.access(shm, os.W_OK):
        pytest.skip("needs a writable /dev/shm")
    want = _embedded(root)
    with RemoteDataLoader(cluster.loader.address, "train", shm_dir=shm, **JOB) as dl:  # type: ignore[arg-type]
        got = list(dl)
    assert len(got) == len(want) > 1
    for (gi, gp, gn, gb), (wi, wp, wn, wb) in zip(got, want, strict=True):
        assert torch.equal(gi, wi)
        assert _same_graph(gp, wp) and _same_graph(gn, wn)
        assert torch.equal(gp.edata[dgl.EID], wp.edata[dgl.EID])
        assert torch.equal(gp.ndata[dgl.NID], wp.ndata[dgl.NID])
        for x, y in zip(gb, wb, strict=True):
            assert _same_graph(x, y) and torch.equal(x.edata[dgl.EID], y.edata[dgl.EID])
        assert torch.equal(gb[0].srcdata["feat"], wb[0].srcdata["feat"])
        seeds = set(gp.edata[dgl.EID].tolist())
        assert not any(seeds & set(b.edata[dgl.EID].tolist()) for b in gb)


def test_edge_job_without_edge_split_is_not_found_and_the_loader_serves_on(cluster: InProcessCluster) -> None:
    with pytest.raises(NotFound, match="no-such-split"):
        RemoteDataLoader(cluster.loader.address, "no-such-split", shm_dir="", connect_timeout_s=5, **JOB)  # type: ignore[arg-type]
    with RemoteDataLoader(cluster.loader.address, "train", shm_dir="", **JOB) as dl:  # type: ignore[arg-type]
        assert len(list(dl)) == len(dl)
