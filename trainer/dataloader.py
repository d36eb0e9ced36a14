"""RemoteDataLoader: DGL's DataLoader interface over a graphfeed loader service."""

from __future__ import annotations

import time
import warnings
from collections.abc import Iterator, Sequence
from dataclasses import dataclass, field

import dgl
import grpc
import numpy as np
import torch

from graphfeed.common import blocks as blocks_codec
from graphfeed.common import codec
from graphfeed.common.errors import from_rpc_error
from graphfeed.common.rpc import call_with_retry, channel_options
from graphfeed.common.shm import SegmentReader
from graphfeed.common.transport import ClientTransport
from graphfeed.loader.v1 import loader_pb2 as pb
from graphfeed.loader.v1 import loader_pb2_grpc as pb_grpc


@dataclass
class EpochStats:
    """Counters accumulated over the minibatches consumed in the current epoch."""

    minibatches: int = 0
    cache_hits: int = 0
    cache_misses: int = 0
    remote_feature_bytes: int = 0
    sampled_edges: int = 0
    wait_seconds: float = 0.0  # time the trainer spent blocked on the stream
    started: float = field(default_factory=time.perf_counter)

    @property
    def hit_rate(self) -> float:
        total = self.cache_hits + self.cache_misses
        return self.cache_hits / total if total else 0.0

    @property
    def minibatches_per_s(self) -> float:
        elapsed = time.perf_counter() - self.started
        return self.minibatches / elapsed if elapsed > 0 else 0.0


def _torch(arr: np.ndarray) -> torch.Tensor:
    """A tensor over ``arr`` without a copy. Inline arrays are read-only views of the received
    message (torch warns about those; training never writes minibatch inputs in place); shared-
    memory arrays are private writable mappings."""
    with warnings.catch_warnings():
        warnings.simplefilter("ignore", UserWarning)
        return torch.from_numpy(arr)


def to_dgl_blocks(
    mb: pb.Minibatch, feature_name: str, label_name: str, segments: SegmentReader | None = None
) -> tuple[torch.Tensor, torch.Tensor, list]:
    """Builds DGL blocks from a Minibatch message, with features and labels attached (no copies)."""
    sb = blocks_codec.from_proto(mb.blocks, segments)
    input_nodes = _torch(sb.input_nodes.astype(np.int64, copy=False))
    output_nodes = input_nodes[: len(sb.output_nodes)]
    out = []
    for b in sb.blocks:
        block = dgl.create_block(
            (_torch(b.edge_src.astype(np.int64, copy=False)), _torch(b.edge_dst.astype(np.int64, copy=False))),
            num_src_nodes=b.num_src,
            num_dst_nodes=b.num_dst,
        )
        block.srcdata[dgl.NID] = input_nodes[: b.num_src]
        block.dstdata[dgl.NID] = input_nodes[: b.num_dst]
        block.edata[dgl.EID] = _torch(b.edge_ids.astype(np.int64, copy=False))
        out.append(block)
    if out:
        out[0].srcdata[feature_name] = _torch(codec.decode(mb.input_features, "input_features", segments))
        if label_name:
            out[-1].dstdata[label_name] = _torch(codec.decode(mb.labels, "labels", segments))
    return input_nodes, output_nodes, out


class RemoteDataLoader:
    """Iterates ``(input_nodes, output_nodes, blocks)`` like ``dgl.dataloading.DataLoader``.

    Node ids are graphfeed global ids. ``blocks[0].srcdata[feature_name]`` holds the input
    features and ``blocks[-1].dstdata[label_name]`` the labels of the output nodes. Each full
    pass advances the epoch (the loader reshuffles per epoch from ``seed``). The position of
    the next minibatch is ``state_dict()``; restoring it with ``load_state_dict`` resumes
    exactly there after a crash (the loader service replays deterministically).

    Args:
        address: ``host:port`` of a graphfeed loader service.
        split: seed nodes: "train", "val" or "test".
        fanouts: neighbors per layer, DGL order (first = input layer); -1 for all.
        batch_size: seeds per minibatch.
        shuffle: reshuffle each epoch.
        drop_last: drop the last partial minibatch.
        replace: sample neighbors with replacement.
        seed: job seed; every random choice derives from (seed, epoch, step).
        rank: this trainer's rank (DDP); world_size: number of trainers.
        job_id: name of the job (logs, shared cache state).
        feature_name / label_name: node-data names to attach ("" label_name for none).
        device: where blocks and tensors are moved (e.g. "cuda:0").
        timeout_s: deadline for DescribeJob and for the first message of a stream.
        shm_dir: shared-memory directory offered to the loader: when the loader is on this host
            and sees the same directory, minibatch tensors arrive through it instead of inside
            the gRPC messages (identical contents). "" or None: always inline.
    """

    def __init__(
        self,
        address: str,
        split: str = "train",
        *,
        fanouts: Sequence[int],
        batch_size: int = 1024,
        shuffle: bool = True,
        drop_last: bool = False,
        replace: bool = False,
        seed: int = 0,
        rank: int = 0,
        world_size: int = 1,
        job_id: str = "graphfeed-job",
        feature_name: str = "feat",
        label_name: str = "label",
        device: str | torch.device = "cpu",
        timeout_s: float = 60.0,
        shm_dir: str | None = "/dev/shm",
    ) -> None:
        self.address = address
        self._transport = ClientTransport(shm_dir)
        self.job = pb.JobSpec(
            job_id=job_id,
            job_seed=seed,
            split=split,
            batch_size=batch_size,
            fanouts=list(fanouts),
            replace=replace,
            shuffle=shuffle,
            drop_last=drop_last,
            rank=rank,
            world_size=world_size,
            feature_name=feature_name,
            label_name=label_name,
        )
        self.device = torch.device(device)
        self.timeout_s = timeout_s
        self._channel = grpc.insecure_channel(address, options=channel_options())
        self._stub = pb_grpc.LoaderServiceStub(self._channel)
        self.info = call_with_retry(
            lambda: self._stub.DescribeJob(pb.DescribeJobRequest(job=self.job), timeout=timeout_s, wait_for_ready=True),
            what=f"loader {address}",
        )
        self.epoch = 0
        self.step = 0
        self.stats = EpochStats()

    def __len__(self) -> int:
        return int(self.info.steps_per_epoch)

    @property
    def num_classes(self) -> int:
        return int(self.info.num_classes)

    @property
    def feature_shape(self) -> tuple[int, ...]:
        return tuple(self.info.feature_row_shape)

    def set_epoch(self, epoch: int) -> None:
        """Starts the next iteration at the beginning of ``epoch``."""
        self.epoch, self.step = int(epoch), 0

    def state_dict(self) -> dict[str, int]:
        """Position of the next minibatch: checkpoint it with the model."""
        return {"epoch": self.epoch, "step": self.step}

    def load_state_dict(self, state: dict[str, int]) -> None:
        """Resumes at a position from :meth:`state_dict`."""
        self.epoch, self.step = int(state["epoch"]), int(state["step"])
        if self.step >= len(self):  # saved right after the last step of an epoch
            self.epoch, self.step = self.epoch + 1, 0

    def __iter__(self) -> Iterator[tuple[torch.Tensor, torch.Tensor, list]]:
        epoch, start = self.epoch, self.step
        self.stats = EpochStats()
        request = pb.StreamMinibatchesRequest(job=self.job, epoch=epoch, start_step=start)
        stream = self._stub.StreamMinibatches(request, metadata=self._transport.metadata)
        try:
            while True:
                t0 = time.perf_counter()
                try:
                    mb = next(stream)
                except StopIteration:
                    break
                except grpc.RpcError as err:
                    raise from_rpc_error(err, f"loader {self.address}") from None
                self.stats.wait_seconds += time.perf_counter() - t0
                if mb.step_key.step != self.step or mb.step_key.epoch != epoch:
                    raise RuntimeError(f"loader sent step {mb.step_key.epoch}/{mb.step_key.step}, expected {epoch}/{self.step}")
                batch = to_dgl_blocks(mb, self.job.feature_name, self.job.label_name, self._transport.reader())
                self._count(mb)
                self.step += 1
                yield self._to_device(batch)
        finally:
            stream.cancel()
        self.epoch, self.step = epoch + 1, 0

    def _count(self, mb: pb.Minibatch) -> None:
        s = self.stats
        s.minibatches += 1
        s.cache_hits += mb.stats.cache_hits
        s.cache_misses += mb.stats.cache_misses
        s.remote_feature_bytes += mb.stats.remote_feature_bytes
        s.sampled_edges += mb.blocks.num_sampled_edges

    def _to_device(self, batch: tuple) -> tuple:
        if self.device.type == "cpu":
            return batch
        input_nodes, output_nodes, blocks = batch
        return input_nodes.to(self.device), output_nodes.to(self.device), [b.to(self.device) for b in blocks]

    def close(self) -> None:
        self._channel.close()

    def __enter__(self) -> "RemoteDataLoader":
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()
