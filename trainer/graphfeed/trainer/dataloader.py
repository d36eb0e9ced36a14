"""DGL's DataLoader interface over graphfeed: :class:`RemoteDataLoader` reads a loader service;
:class:`EmbeddedDataLoader` runs a :class:`~graphfeed.loader.core.Loader` in the trainer's own
process (the path on which features can reach the trainer's GPU without a host round trip)."""

from __future__ import annotations

import contextlib
import dataclasses
import time
from collections.abc import Iterator
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any, Unpack

import grpc
import numpy as np
import torch

from graphfeed.common import bulk, codec
from graphfeed.common.buffers import BufferPool
from graphfeed.common.bulk import Received
from graphfeed.common.errors import GraphfeedError, from_rpc_error
from graphfeed.common.rpc import client_channel, streamed
from graphfeed.common.schema import GraphSchema, types_from_proto
from graphfeed.common.transport import ClientTransport
from graphfeed.loader.edges import EdgePairs
from graphfeed.loader.job import JobSpec
from graphfeed.loader.v1 import loader_pb2 as pb
from graphfeed.loader.v1 import loader_pb2_grpc as pb_grpc
from graphfeed.trainer.blocks import Batch, as_tensor, dgl_blocks, feature_tensor, to_dgl_blocks
from graphfeed.trainer.connect import Resume, wait_for
from graphfeed.trainer.hetero import hetero_dgl_blocks
from graphfeed.trainer.job import JobArgs, job_spec, job_to_proto
from graphfeed.trainer.pairs import pair_graphs, pairs_from_proto

EdgeBatch = tuple[Any, Any, Any, list]
"""An edge job's ``(input_nodes, pair_graph, neg_pair_graph, blocks)``, as DGL's DataLoader yields
with ``as_edge_prediction_sampler`` (:mod:`graphfeed.trainer.pairs`)."""

if TYPE_CHECKING:
    from graphfeed.loader.core import Loader
    from graphfeed.loader.minibatch import ReadyMinibatch


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


class _StepLoader:
    """What both data loaders share: the job, the (epoch, step) position, resume, counters."""

    info: Any  # steps_per_epoch, num_classes, feature_row_shape (DescribeJobResponse or JobInfo)
    schema: GraphSchema | None = None  # node/edge types: a typed graph yields heterogeneous blocks

    def __init__(self, job: JobSpec, device: str | torch.device) -> None:
        # An edge job's minibatches carry pairs, not node labels (DGL's edge DataLoader attaches none).
        self.job = dataclasses.replace(job, label_name="") if job.seed_edges else job
        self.device = torch.device(device)
        # Features that travelled in reduced precision are upcast on the device.
        self.feature_dtype = torch.float32 if job.feature_wire_dtype else None
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

    @property
    def seed_etype(self) -> str:
        """An edge job's predicted edge type, ``"src:rel:dst"`` ("" for a node job)."""
        return str(self.info.seed_etype)

    @property
    def typed_feature_shapes(self) -> dict[str, tuple[int, ...]]:
        """In a graph of several node types: the feature's row shape per node type that has it."""
        shapes = self.info.typed_feature_shapes
        if isinstance(shapes, dict):  # JobInfo
            return dict(shapes)
        return {s.ntype: tuple(s.row_shape) for s in shapes}  # DescribeJobResponse

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

    resume_s: float = 0.0  # how long a broken stream is reopened at the next step (0: never)
    resumes: int = 0  # streams reopened so far

    def __iter__(self) -> Iterator[Any]:  # Batch; an edge job (seed_edges): EdgeBatch
        epoch = self.epoch
        self.stats = EpochStats()
        resume = Resume(self.resume_s, f"{type(self).__name__} epoch {epoch}")
        while True:
            step = self.step
            try:
                yield from self._epoch(epoch)
                break
            except GraphfeedError as exc:
                # The loader replays deterministically: reopening at the next step loses and
                # repeats nothing. Progress since the last failure restarts the deadline.
                if not resume.again(exc, progressed=self.step > step):
                    raise
                self.resumes += 1
        self.epoch, self.step = epoch + 1, 0

    def _epoch(self, epoch: int) -> Iterator[Batch | EdgeBatch]:
        """The minibatches of ``epoch`` from :attr:`step`, advancing it."""
        with self._minibatches(epoch, self.step) as stream:
            while True:
                t0 = time.perf_counter()
                try:
                    mb = next(stream)
                except StopIteration:
                    break
                self.stats.wait_seconds += time.perf_counter() - t0
                got_epoch, got_step = self._position(mb)
                if got_step != self.step or got_epoch != epoch:
                    raise RuntimeError(f"loader sent step {got_epoch}/{got_step}, expected {epoch}/{self.step}")
                batch = self._batch(mb)
                self._count(mb)
                self.step += 1
                yield batch

    def _minibatches(self, epoch: int, start: int) -> contextlib.AbstractContextManager[Iterator[Any]]:
        """The loader's minibatches of ``epoch`` from step ``start``, closed on exit."""
        raise NotImplementedError

    def _position(self, mb: Any) -> tuple[int, int]:
        """``(epoch, step)`` a minibatch says it is."""
        raise NotImplementedError

    def _batch(self, mb: Any) -> Batch | EdgeBatch:
        """``(input_nodes, output_nodes, blocks)`` on :attr:`device` (an edge job: :data:`EdgeBatch`)."""
        raise NotImplementedError

    def _with_pairs(self, batch: Batch, pairs: EdgePairs, output_gids: np.ndarray) -> EdgeBatch:
        """An edge job's ``(input_nodes, pair_graph, neg_pair_graph, blocks)`` from its node batch."""
        input_nodes, output_nodes, blocks = batch
        pos, neg = pair_graphs(pairs, output_gids, output_nodes, self.schema, self.device)
        return input_nodes, pos, neg, blocks

    def _count(self, mb: Any) -> None:
        """Adds a minibatch to :attr:`stats` (message and in-process minibatches name their counters alike)."""
        s, st = self.stats, mb.stats
        s.minibatches += 1
        s.cache_hits += st.cache_hits
        s.cache_misses += st.cache_misses
        s.remote_feature_bytes += st.remote_feature_bytes
        s.sampled_edges += mb.blocks.num_sampled_edges

    def close(self) -> None:
        """Releases the connection (RemoteDataLoader); the embedded loader is its owner's to close."""

    def __enter__(self) -> Any:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()


class RemoteDataLoader(_StepLoader):
    """Iterates ``(input_nodes, output_nodes, blocks)`` like ``dgl.dataloading.DataLoader``.

    Node ids are graphfeed global ids. ``blocks[0].srcdata[feature_name]`` holds the input
    features and ``blocks[-1].dstdata[label_name]`` the labels of the output nodes. Each full
    pass advances the epoch (the loader reshuffles per epoch from ``seed``). The position of
    the next minibatch is ``state_dict()``; restoring it with ``load_state_dict`` resumes
    exactly there after a crash (the loader service replays deterministically).

    Args:
        address: ``host:port`` of a graphfeed loader service.
        split: seed nodes: "train", "val" or "test".
        device: where blocks and tensors are moved (e.g. "cuda:0").
        timeout_s: deadline of each DescribeJob try.
        connect_timeout_s: how long to keep trying DescribeJob while the loader is not up or
            not ready (UNAVAILABLE, DEADLINE_EXCEEDED), with capped backoff and one log line
            per try; then :class:`~graphfeed.trainer.connect.PeerTimeout`.
        resume_s: when a minibatch stream breaks (the loader restarted: UNAVAILABLE or
            CANCELLED; a minibatch lost on the way: DATA_LOSS), how long to keep reopening it
            at the next step, with capped backoff, before the error reaches the caller; the
            iteration goes on with no step lost or repeated (default 300; 0: never).
        shm_dir: shared-memory directory offered to the loader: when the loader is on this host
            and sees the same directory, minibatch tensors arrive through it instead of inside
            the gRPC messages (identical contents). "" or None: always inline.
        **job: the job (:class:`~graphfeed.trainer.job.JobArgs`): ``fanouts`` (required) and
            any other field of :class:`~graphfeed.loader.job.JobSpec` (``seed`` for ``job_seed``),
            with its defaults: ``batch_size`` 1024, ``shuffle`` True, ``job_id`` "graphfeed-job",
            ``feature_name`` "feat", ``label_name`` "label" ("" for none), ``feature_wire_dtype``
            "" (stored type; "float16" or "bfloat16": half the bytes, upcast to float32 on
            ``device``); see :func:`graphfeed.trainer.job.job_spec`.
    """

    def __init__(
        self,
        address: str,
        split: str = "train",
        *,
        device: str | torch.device = "cpu",
        timeout_s: float = 60.0,
        connect_timeout_s: float = 60.0,
        resume_s: float = 300.0,
        shm_dir: str | None = "/dev/shm",
        **job: Unpack[JobArgs],
    ) -> None:
        super().__init__(job_spec(split, **job), device)
        self.address = address
        self._transport = ClientTransport(shm_dir, address)
        self._job_proto = job_to_proto(self.job)
        self.timeout_s = timeout_s
        self.resume_s = resume_s
        self._channel = client_channel(address, pb.DESCRIPTOR.services_by_name["LoaderService"], ["DescribeJob"])
        self._stub = pb_grpc.LoaderServiceStub(self._channel)
        service = pb.DESCRIPTOR.services_by_name["LoaderService"].full_name
        self._stream = bulk.unary_stream(
            self._channel,
            service,
            "StreamMinibatches",
            pb.StreamMinibatchesRequest,
            pb.Minibatch,
            self._transport.fetch,
        )
        self._buffers = BufferPool()  # each minibatch's bulk bytes land here (pages reused)
        self.info = wait_for(f"loader at {address}", self._describe, connect_timeout_s, attempt_timeout_s=timeout_s)
        self.schema = types_from_proto(self.info.types, [0, int(self.info.num_nodes)], 0)

    def _describe(self, timeout_s: float) -> pb.DescribeJobResponse:
        try:
            return self._stub.DescribeJob(pb.DescribeJobRequest(job=self._job_proto), timeout=timeout_s)
        except grpc.RpcError as err:
            raise from_rpc_error(err, f"loader {self.address}") from None

    @contextlib.contextmanager
    def _minibatches(self, epoch: int, start: int) -> Iterator[Iterator[Received[pb.Minibatch]]]:
        request = pb.StreamMinibatchesRequest(job=self._job_proto, epoch=epoch, start_step=start)
        stream = self._stream(request, metadata=self._transport.metadata)

        try:
            yield bulk.assemble(
                streamed(stream, f"loader {self.address}"),
                self._buffers,
                f"minibatch stream from loader {self.address}",
            )
        finally:
            stream.cancel()

    def _position(self, mb: Received[pb.Minibatch]) -> tuple[int, int]:
        return mb.message.step_key.epoch, mb.message.step_key.step

    def _batch(self, mb: Received[pb.Minibatch]) -> Batch | EdgeBatch:
        job, segments = self.job, self._transport.reader()
        batch = to_dgl_blocks(
            mb.message,
            job.feature_name,
            job.label_name,
            segments,
            self.device,
            mb.bulk,
            self.feature_dtype,
            self.schema,
        )
        if not job.seed_edges:
            return batch
        output_gids = codec.decode(mb.message.blocks.output_nodes, "output_nodes", segments, mb.bulk)
        return self._with_pairs(batch, pairs_from_proto(mb.message.pairs, segments, mb.bulk), output_gids)

    def _count(self, mb: Received[pb.Minibatch]) -> None:
        super()._count(mb.message)

    def close(self) -> None:
        self._channel.close()
        self._transport.close()


class EmbeddedDataLoader(_StepLoader):
    """:class:`RemoteDataLoader`'s interface over a :class:`~graphfeed.loader.core.Loader` in
    this process (over remote graph-stores and sampler, or in-process partitions): the same
    minibatches, no loader service.

    With a CUDA ``device`` and a loader whose cache has a GPU tier (``gpu_cache_bytes`` > 0),
    features are gathered on the GPU (GPU-tier hits from device memory, host-tier hits zero-copy
    from pinned memory, misses fetched and copied up) and handed to PyTorch through DLPack:
    they never make a host round trip, and stay at the stored precision whatever
    ``feature_wire_dtype`` says (they cross no wire). Otherwise features are NumPy arrays, in
    the job's wire dtype, moved like RemoteDataLoader's.

    Args:
        loader: the loader; its owner closes it (this object never does).
        device_features: ask for device arrays even when ``device`` is not CUDA (tests, with the
            kernel emulator); default: when ``device`` is CUDA.
        The rest (``split``, ``device`` and the job keywords): as :class:`RemoteDataLoader`
        (``job_id`` names the loader's shared cache state).
    """

    def __init__(
        self,
        loader: Loader,
        split: str = "train",
        *,
        device: str | torch.device = "cpu",
        device_features: bool | None = None,
        **job: Unpack[JobArgs],
    ) -> None:
        super().__init__(job_spec(split, **job), device)
        self.loader = loader
        self.info = loader.describe(self.job)
        self.schema = self.info.types
        wanted = self.device.type == "cuda" if device_features is None else device_features
        self.device_features = (
            bool(wanted) and not self.job.skip_features and loader.gpu_features(self.job.feature_name)
        )

    def _minibatches(self, epoch: int, start: int) -> contextlib.AbstractContextManager[Iterator[ReadyMinibatch]]:
        return self.loader.stream(self.job, epoch, start, on_device=self.device_features)

    def _position(self, mb: ReadyMinibatch) -> tuple[int, int]:
        return mb.epoch, mb.step

    def _batch(self, mb: ReadyMinibatch) -> Batch | EdgeBatch:
        batch = self._node_batch(mb)
        if mb.pairs is None:
            return batch
        return self._with_pairs(batch, mb.pairs, mb.blocks.output_nodes)

    def _node_batch(self, mb: ReadyMinibatch) -> Batch:
        if self.schema is not None and self.schema.is_hetero:
            return hetero_dgl_blocks(
                mb.blocks,
                self.schema,
                {t: feature_tensor(f) for t, f in mb.typed_features.items()},
                {t: as_tensor(y) for t, y in mb.typed_labels.items()},
                self.job.feature_name,
                self.job.label_name,
                self.device,
                self.feature_dtype,
            )
        if self.device_features:
            from graphfeed.gpu_kernels.memory import to_torch  # noqa: PLC0415 - GPU path only

            features = to_torch(mb.features)  # DLPack: the device array itself
        else:
            features = feature_tensor(mb.features)
        labels = as_tensor(mb.labels) if self.job.label_name else None
        return dgl_blocks(
            mb.blocks, features, labels, self.job.feature_name, self.job.label_name, self.device, self.feature_dtype
        )
