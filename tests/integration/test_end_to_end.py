"""Ingest -> graph-store x2 -> sampler -> loader -> RemoteDataLoader on real Cora."""

from __future__ import annotations

from typing import TypedDict

import numpy as np
import pytest

from graphfeed.common import bulk
from graphfeed.common.buffers import BufferPool
from graphfeed.common.rpc import channel_options
from graphfeed.loader.v1 import loader_pb2 as pb
from graphfeed.trainer import RemoteDataLoader

pytestmark = pytest.mark.integration


def _edge_set(cora) -> set[tuple[int, int]]:  # noqa: ANN001
    return set(zip(cora.src.tolist(), cora.dst.tolist()))


def test_full_epoch_streamed_from_two_partitions(cora, cora_root, cora_cluster, cora_input_index) -> None:  # noqa: ANN001
    loader = RemoteDataLoader(cora_cluster.loader.address, "train", fanouts=[5, 5], batch_size=256, seed=3)
    edges = _edge_set(cora)
    train_gids = _split_gids(cora, cora_input_index, "train")
    seen = []
    for input_nodes, output_nodes, blocks in loader:
        idx = cora_input_index[input_nodes.numpy()]
        assert np.array_equal(blocks[0].srcdata["feat"].numpy(), cora.node_data["feat"][idx])
        out_idx = cora_input_index[output_nodes.numpy()]
        assert np.array_equal(blocks[-1].dstdata["label"].numpy(), cora.node_data["label"][out_idx])
        for b in blocks:
            src, dst = b.edges()
            s = cora_input_index[b.srcdata["_ID"][src].numpy()]
            d = cora_input_index[b.dstdata["_ID"][dst].numpy()]
            assert all((int(u), int(v)) in edges for u, v in zip(s, d))
            assert (np.bincount(dst.numpy(), minlength=b.num_dst_nodes()) <= 5).all()
        seen.append(output_nodes.numpy())
    assert len(seen) == len(loader) == -(-len(train_gids) // 256)
    assert np.array_equal(np.sort(np.concatenate(seen)), train_gids), "every training node exactly once per epoch"
    assert loader.stats.cache_hits + loader.stats.cache_misses > 0
    assert loader.stats.remote_feature_bytes > 0
    assert loader.state_dict() == {"epoch": 1, "step": 0}


def _split_gids(cora, cora_input_index, split: str) -> np.ndarray:  # noqa: ANN001
    inv = np.empty_like(cora_input_index)
    inv[cora_input_index] = np.arange(len(cora_input_index))
    return np.sort(inv[cora.splits[split]])


def _stream(address: str, epoch: int, start: int, n: int) -> list[bytes]:
    import grpc

    job = pb.JobSpec(
        job_id="replay", job_seed=11, split="train", batch_size=128, fanouts=[4, 3], shuffle=True, world_size=1
    )
    with grpc.insecure_channel(address, options=channel_options()) as ch:
        call = bulk.unary_stream(
            ch, "graphfeed.loader.v1.LoaderService", "StreamMinibatches", pb.StreamMinibatchesRequest, pb.Minibatch
        )
        out = []
        request = pb.StreamMinibatchesRequest(job=job, epoch=epoch, start_step=start)
        for mb in bulk.assemble(call(request), BufferPool(), "minibatches"):
            mb.message.ClearField("stats")  # timings and cache counters legitimately differ between runs
            out.append(mb.message.SerializeToString(deterministic=True) + bytes(mb.bulk))
            if len(out) == n:
                break
        return out


def test_same_epoch_and_step_is_byte_identical(cora_cluster) -> None:  # noqa: ANN001
    first = _stream(cora_cluster.loader.address, epoch=2, start=3, n=3)
    second = _stream(cora_cluster.loader.address, epoch=2, start=3, n=3)
    assert len(first) == 3 and first == second
    whole = _stream(cora_cluster.loader.address, epoch=2, start=0, n=6)
    assert whole[3:6] == first, "resuming at step 3 replays exactly steps 3.. of the full epoch"
    other_epoch = _stream(cora_cluster.loader.address, epoch=3, start=3, n=1)
    assert other_epoch[0] != first[0], "a new epoch reshuffles"


def _batches(loader, n: int | None = None) -> list[tuple[bytes, ...]]:  # noqa: ANN001
    out = []
    for input_nodes, _output_nodes, blocks in loader:
        edges = [np.stack([t.numpy() for t in b.edges()]).tobytes() + b.edata["_ID"].numpy().tobytes() for b in blocks]
        out.append(
            (
                input_nodes.numpy().tobytes(),
                blocks[0].srcdata["feat"].numpy().tobytes(),
                blocks[-1].dstdata["label"].numpy().tobytes(),
                *edges,
            )
        )
        if n is not None and len(out) == n:
            break
    return out


class _Job(TypedDict):
    """Keyword arguments both loader kinds take, so each sees the same job."""

    fanouts: list[int]
    batch_size: int
    seed: int
    job_id: str


def test_embedded_loader_gives_the_service_s_minibatches_and_resumes(cora_cluster) -> None:  # noqa: ANN001
    """A trainer running the loader in its own process (over the same graph-stores and
    sampler) sees exactly the minibatches the loader service streams, and resumes mid-epoch."""
    from graphfeed.trainer import EmbeddedDataLoader
    from graphfeed.trainer.train import TrainConfig, Trainer

    job = _Job(fanouts=[4, 3], batch_size=128, seed=5, job_id="embedded")
    remote = RemoteDataLoader(cora_cluster.loader.address, "train", **job)
    remote.set_epoch(1)
    want = _batches(remote)
    cfg = TrainConfig(
        graph_stores=[s.address for s in cora_cluster.graph_stores],
        sampler_address=cora_cluster.sampler.address,
        epochs=1,
        batch_size=128,
        fanouts=[4, 3],
        cache_policy="lru",
        cache_bytes=1 << 20,
    )
    trainer = Trainer(cfg)  # builds its loader from the addresses, as `graphfeed train --graph-stores` does
    try:
        assert trainer.embedded is not None, "graph_stores and sampler_address give an embedded loader"
        assert trainer.embedded.gpu_cache_bytes == 0, "the automatic GPU tier is for CUDA devices only"
        embedded = EmbeddedDataLoader(trainer.embedded, "train", **job)
        assert len(embedded) == len(remote) and embedded.num_classes == remote.num_classes
        embedded.set_epoch(1)
        assert _batches(embedded) == want and embedded.state_dict() == {"epoch": 2, "step": 0}
        embedded.set_epoch(1)
        head = _batches(embedded, 2)
        resumed = EmbeddedDataLoader(trainer.embedded, "train", **job)
        resumed.load_state_dict(embedded.state_dict())
        assert embedded.state_dict() == {"epoch": 1, "step": 2} and head + _batches(resumed) == want
        (report,) = trainer.fit()
        assert report.epoch == 0 and np.isfinite(report.loss) and 0 < report.val_acc <= 1
    finally:
        trainer.close()
        remote.close()


@pytest.mark.parametrize("wire", ["float16", "bfloat16"])
def test_embedded_and_remote_loaders_agree_on_reduced_precision_features(cora_cluster, wire: str) -> None:  # noqa: ANN001
    """With a feature wire dtype, both data loaders give the same (rounded, float32) minibatches."""
    from graphfeed.graph_store.partitions import RemotePartitionSet
    from graphfeed.loader.core import Loader
    from graphfeed.sampler.client import SamplerClient
    from graphfeed.trainer import EmbeddedDataLoader

    job = _Job(fanouts=[4, 3], batch_size=128, seed=5, job_id=f"wire-{wire}")
    with RemoteDataLoader(cora_cluster.loader.address, "train", feature_wire_dtype=wire, **job) as remote:
        want = _batches(remote, 3)
    with RemoteDataLoader(cora_cluster.loader.address, "train", **job) as remote:
        full = _batches(remote, 3)
    partitions = RemotePartitionSet([s.address for s in cora_cluster.graph_stores])
    sampler = SamplerClient(cora_cluster.sampler.address)
    loader = Loader(partitions, sampler, cache_policy="lru", cache_bytes=1 << 20)
    try:
        assert _batches(EmbeddedDataLoader(loader, "train", feature_wire_dtype=wire, **job), 3) == want
    finally:
        loader.close()
        sampler.close()
        partitions.close()
    assert want == full, "Cora's 0/1 features are exact in float16 and bfloat16: upcast, the same float32 minibatches"
