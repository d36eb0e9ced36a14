"""Example training job: GraphSAGE node classification through RemoteDataLoader (a loader
service) or EmbeddedDataLoader (the loader in this process, over remote graph-stores and sampler).

Stateless by design: everything needed to continue lives in the checkpoint (model,
optimizer, torch RNG state, the loader position and the list of applied steps), written
atomically after every ``checkpoint_every`` steps. A restarted trainer resumes at the next
step: no minibatch is lost or applied twice. With ``--embeddings server`` the featureless
types' tables live in the graph-stores (:mod:`graphfeed.trainer.remote_embedding`): every
checkpoint first snapshots them at its step and records that step, and a resumed job restores
them to it (a fresh one to their seeded rows), so replayed steps compute the same rows.
"""

from __future__ import annotations

import hashlib
import logging
import time
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING, Any

import torch
import torch.nn.functional as F
from torch.nn.parallel import DistributedDataParallel

from graphfeed.graph_store.embeddings.types import StepKey
from graphfeed.trainer.build import example_model, predict
from graphfeed.trainer.checkpoint import save_checkpoint
from graphfeed.trainer.config import TrainConfig
from graphfeed.trainer.connect import wait_for
from graphfeed.trainer.dataloader import EmbeddedDataLoader, RemoteDataLoader
from graphfeed.trainer.hetero_models import rgcn_optimizers
from graphfeed.trainer.job import JobArgs
from graphfeed.trainer.linkpred.config import LinkPredConfig
from graphfeed.trainer.linkpred.models import LinkPredictor
from graphfeed.trainer.linkpred.task import edge_job, evaluate_link_split, link_loss, service_embeddings
from graphfeed.trainer.metrics import TrainerMetrics
from graphfeed.trainer.progress import Progress
from graphfeed.trainer.remote_embedding import RemoteSparseOptimizer, server_embeddings

if TYPE_CHECKING:  # imported at run time only in embedded mode (see _embedded_loader)
    from graphfeed.graph_store.partitions import RemotePartitionSet
    from graphfeed.loader.core import Loader
    from graphfeed.sampler.client import SamplerClient

__all__ = ["EpochReport", "TrainConfig", "Trainer", "format_report", "init_distributed"]

log = logging.getLogger(__name__)


@dataclass
class EpochReport:
    epoch: int
    loss: float
    val_acc: float  # accuracy; with --task link the val split's MRR (see metric)
    minibatches_per_s: float
    hit_rate: float
    remote_feature_bytes: int
    metric: str = "val_acc"


def batch_digest(input_nodes: torch.Tensor | dict[str, torch.Tensor], blocks: list) -> str:
    """Short digest of a minibatch (ids + features), used to prove replays are identical."""
    h = hashlib.blake2b(digest_size=8)
    for ids in _by_type(input_nodes):
        h.update(ids.cpu().numpy().tobytes())
    for feat in _by_type(blocks[0].srcdata.get("feat", {})):
        h.update(feat.cpu().numpy().tobytes())
    for b in blocks:
        for etype in b.canonical_etypes:
            src, dst = b.edges(etype=etype)
            h.update(src.cpu().numpy().tobytes())
            h.update(dst.cpu().numpy().tobytes())
    return h.hexdigest()


def _by_type(x: torch.Tensor | dict[str, torch.Tensor]) -> list[torch.Tensor]:
    """A tensor, or a typed graph's tensors in node-type order."""
    return [x[k] for k in sorted(x)] if isinstance(x, dict) else [x]


def init_distributed(cfg: TrainConfig) -> None:
    """Joins the process group of ``cfg.world_size`` trainers (nothing for one): backend
    ``cfg.backend`` (nccl on CUDA, else gloo), rendezvous at $MASTER_ADDR:$MASTER_PORT as
    torchrun and PyTorchJob set them; a CUDA trainer first selects its GPU."""
    if cfg.world_size <= 1:
        return
    import torch.distributed as dist  # noqa: PLC0415 - multi-rank training only

    device = torch.device(cfg.torch_device)
    if device.type == "cuda":
        torch.cuda.set_device(device)
    log.info("rank %d of %d joining the process group (%s)", cfg.rank, cfg.world_size, cfg.backend)
    dist.init_process_group(cfg.backend, rank=cfg.rank, world_size=cfg.world_size)


class Trainer:
    """Owns the model, optimizer, loaders, checkpoint and metrics of one rank.

    ``metrics``: where steps are recorded (``graphfeed train`` serves them); default: new
    ones for ``cfg``, not served.

    Raises:
        PeerTimeout: the loader (or, embedded, the graph-stores or sampler) did not answer
            within ``cfg.connect_timeout_s``.
    """

    def __init__(self, cfg: TrainConfig, metrics: TrainerMetrics | None = None) -> None:
        self.cfg = cfg
        self.device = torch.device(cfg.torch_device)
        self.metrics = metrics or TrainerMetrics.create(cfg.job_id, cfg.rank)
        torch.manual_seed(cfg.seed)
        self.embedded: Loader | None = None
        self._sampler: SamplerClient | None = None  # the embedded loader's, closed with it
        if not cfg.loader_address:
            self.embedded, self._sampler = _embedded_loader(cfg)
        edges = edge_job(cfg.num_negatives, cfg.negative_sampler, cfg.exclude) if cfg.task == "link" else {}
        self.train_loader = self._data_loader(
            "train", cfg.fanouts, cfg.batch_size, shuffle=True, job_id=cfg.job_id, **edges
        )
        self.remote_opt: RemoteSparseOptimizer | None = None  # --embeddings server
        self._emb_parts: RemotePartitionSet | None = None
        remote = None
        if cfg.embeddings == "server":
            remote, self.remote_opt, self._emb_parts = server_embeddings(cfg, self.train_loader)
        self.model = example_model(cfg, self.train_loader, remote)
        self.model.to(self.device)
        self.ddp = None
        if cfg.world_size > 1:
            ids = [self.device] if self.device.type == "cuda" else None
            # An RGCN leaves the relations and types a minibatch lacks without gradient.
            self.ddp = DistributedDataParallel(self.model, device_ids=ids, find_unused_parameters=cfg.model == "rgcn")
        self.opts = rgcn_optimizers(self.model, cfg.lr, cfg.weight_decay)  # SparseAdam for local embeddings
        self.applied: list[tuple[int, int, str]] = []  # (epoch, step, digest) of every applied step
        state = None
        if cfg.checkpoint is not None and cfg.checkpoint.exists():
            state = torch.load(cfg.checkpoint, map_location=self.device)
            self._restore(state)
        if self.remote_opt is not None:
            self._restore_embeddings(self.remote_opt, state)

    def _restore_embeddings(self, remote: RemoteSparseOptimizer, state: dict | None) -> None:
        """Rank 0 returns the server-side tables to the checkpoint's step (a fresh start: to
        their seeded rows); every rank waits for it before any pushes again."""
        step = None if state is None else state.get("embeddings_step")
        remote.restore(None if step is None else StepKey(*step), apply=self.cfg.rank == 0)
        if self.cfg.world_size > 1:
            import torch.distributed as dist  # noqa: PLC0415 - multi-rank training only

            dist.barrier()

    def _data_loader(
        self, split: str, fanouts: list[int], batch_size: int, *, shuffle: bool, job_id: str, **edges: Any
    ) -> RemoteDataLoader | EmbeddedDataLoader:
        cfg = self.cfg
        job = JobArgs(
            **edges,  # type: ignore[typeddict-item]
            fanouts=fanouts,
            batch_size=batch_size,
            shuffle=shuffle,
            seed=cfg.seed,
            rank=cfg.rank,
            world_size=cfg.world_size,
            job_id=job_id,
            feature_wire_dtype=cfg.feature_wire_dtype,
        )
        if self.embedded is not None:
            return EmbeddedDataLoader(self.embedded, split, device=self.device, **job)
        return RemoteDataLoader(
            cfg.loader_address,
            split,
            shm_dir=cfg.shm_dir,
            device=self.device,
            connect_timeout_s=cfg.connect_timeout_s,
            **job,
        )

    def _restore(self, state: dict) -> None:
        self.model.load_state_dict(state["model"])
        for opt, opt_state in zip(self.opts, state["optimizers"], strict=True):
            opt.load_state_dict(opt_state)
        torch.set_rng_state(state["torch_rng"].cpu())
        if "cuda_rng" in state and self.device.type == "cuda":  # dropout on a GPU draws from its RNG
            torch.cuda.set_rng_state(state["cuda_rng"].cpu(), self.device)
        self.train_loader.load_state_dict(state["loader"])
        self.applied = list(state["applied"])
        log.info("resumed from %s at epoch %d step %d", self.cfg.checkpoint, *state["loader"].values())

    def _state(self) -> dict:
        return {
            "model": self.model.state_dict(),
            "optimizers": [opt.state_dict() for opt in self.opts],
            "torch_rng": torch.get_rng_state(),
            **({"cuda_rng": torch.cuda.get_rng_state(self.device)} if self.device.type == "cuda" else {}),
            "loader": self.train_loader.state_dict(),
            "applied": list(self.applied),
            **({"embeddings_step": _step_tuple(self.remote_opt.last)} if self.remote_opt is not None else {}),
        }

    def _save(self) -> None:
        """Writes the checkpoint (if any); server-side embeddings are snapshotted at its step first."""
        if self.cfg.checkpoint is None:
            return
        if self.remote_opt is not None:
            self.remote_opt.snapshot()
        save_checkpoint(self.cfg.checkpoint, self._state())

    def train_epoch(self) -> tuple[float, bool]:
        """One (possibly resumed) epoch; returns (mean loss, stopped early)."""
        model = self.ddp or self.model
        model.train()
        epoch = self.train_loader.state_dict()["epoch"]
        losses = []
        batches = iter(self.train_loader)
        progress = Progress(epoch, len(self.train_loader), enabled=self.cfg.progress)
        while True:
            t0 = time.perf_counter()
            batch = next(batches, None)
            if batch is None:
                break
            t1 = time.perf_counter()
            step = self.train_loader.step - 1
            loss = self._loss(model, batch)
            for opt in self.opts:
                opt.zero_grad()
            loss.backward()
            for opt in self.opts:
                opt.step()
            if self.remote_opt is not None:
                self.remote_opt.step(StepKey(epoch, step))  # the graph-stores apply it with the other ranks'
            losses.append(float(loss))  # float() waits for the device: the step time is complete
            self.metrics.record(wait_s=t1 - t0, step_s=time.perf_counter() - t1)
            progress.update(t1 - t0, losses[-1])
            self.applied.append((epoch, step, batch_digest(batch[0], batch[-1])))
            if self.cfg.checkpoint is not None and len(self.applied) % self.cfg.checkpoint_every == 0:
                self._save()
            if self.cfg.stop_after_steps is not None and len(self.applied) >= self.cfg.stop_after_steps:
                progress.close()
                return (sum(losses) / max(1, len(losses))), True
        progress.close()
        return (sum(losses) / max(1, len(losses))), False

    def _loss(self, model: torch.nn.Module, batch: tuple) -> torch.Tensor:
        if self.cfg.task == "link":
            return link_loss(model, batch, self.cfg.loss)
        _, output_nodes, blocks = batch
        logits, y = predict(model, output_nodes, blocks)
        return F.cross_entropy(logits, y)

    @torch.no_grad()
    def evaluate(self, split: str) -> float:
        """Accuracy on a split, sampled with ``eval_fanouts`` (all neighbors by default); with
        ``--task link`` the split's MRR (:meth:`link_metrics`)."""
        if self.cfg.task == "link":
            return self.link_metrics(split)["mrr"]
        self.model.eval()
        correct = total = 0
        batch_size = max(self.cfg.batch_size, 1024)
        with self._data_loader(
            split, self.cfg.eval_fanouts, batch_size, shuffle=False, job_id=f"{self.cfg.job_id}-eval"
        ) as loader:
            for _in, output_nodes, blocks in loader:
                logits, y = predict(self.model, output_nodes, blocks)
                correct += int((logits.argmax(1) == y).sum())
                total += len(y)
        return correct / max(1, total)

    def link_metrics(self, split: str, h: Any = None) -> dict[str, float]:
        """``--task link``: MRR, Hits@K (and Recall@K / NDCG@K for a user-item relation) of the
        edge split, every node embedded through the services (:mod:`graphfeed.trainer.linkpred.task`),
        or given as ``h`` (what :meth:`node_embeddings` returned for the current weights)."""
        cfg, loader = self.cfg, self.train_loader
        lp = LinkPredConfig(eval_negatives=cfg.eval_negatives, seed=cfg.seed, eval_batch_size=self._eval_batch)
        return evaluate_link_split(
            self._eval_loader, self.link_predictor(), loader.schema, loader.seed_etype, split, lp, h
        )

    def node_embeddings(self, out_dir: Path | None = None) -> Any:
        """``--task link``: every node's embedding by layer-wise inference through the services
        ([N, hidden] by global id, or per node type by type-wise id); ``out_dir``: also written
        there, resumably (:func:`~graphfeed.trainer.linkpred.task.service_embeddings`)."""
        encoder, schema = self.link_predictor().encoder, self.train_loader.schema
        return service_embeddings(self._eval_loader, encoder, schema, self._eval_batch, out_dir)

    @property
    def _eval_batch(self) -> int:
        return max(self.cfg.batch_size, 1024)

    def link_predictor(self) -> LinkPredictor:
        if not isinstance(self.model, LinkPredictor):
            raise TypeError(f"--task link trains a link predictor; the model is a {type(self.model).__name__}")
        return self.model

    def _eval_loader(self, split: str, fanouts: list[int], batch_size: int, **edges: Any) -> Any:
        """A data loader over ``split`` for evaluation and inference (in order, its own job id, no labels)."""
        job_id = f"{self.cfg.job_id}-eval"
        return self._data_loader(split, fanouts, batch_size, shuffle=False, job_id=job_id, label_name="", **edges)

    def fit(self, on_epoch=None) -> list[EpochReport]:  # noqa: ANN001
        """Trains until ``cfg.epochs`` epochs are done (counting resumed ones)."""
        reports = []
        while self.train_loader.state_dict()["epoch"] < self.cfg.epochs:
            epoch = self.train_loader.state_dict()["epoch"]
            t0 = time.perf_counter()
            loss, stopped = self.train_epoch()
            if stopped:
                break
            s = self.train_loader.stats
            train_s = time.perf_counter() - t0  # before validation, which is not training time
            rep = EpochReport(
                epoch=epoch,
                loss=loss,
                val_acc=self.evaluate("val"),
                minibatches_per_s=s.minibatches / max(1e-9, train_s),
                hit_rate=s.hit_rate,
                remote_feature_bytes=s.remote_feature_bytes,
                metric="val_mrr" if self.cfg.task == "link" else "val_acc",
            )
            reports.append(rep)
            if on_epoch is not None:
                on_epoch(rep)
        if self.cfg.checkpoint is not None:
            self._save()
        return reports

    def close(self) -> None:
        self.train_loader.close()
        if self.remote_opt is not None:
            self.remote_opt.close()
        if self._emb_parts is not None:
            self._emb_parts.close()
        if self.embedded is not None:
            self.embedded.close()
            if self._sampler is not None:
                self._sampler.close()
            self.embedded.partitions.close()


def _step_tuple(key: StepKey | None) -> tuple[int, int] | None:
    return None if key is None else (key.epoch, key.step)


def _embedded_loader(cfg: TrainConfig) -> tuple[Loader, SamplerClient]:
    """A loader in this process over the graph-stores and sampler of ``cfg``, and that sampler's client."""
    from graphfeed.common.readiness import check_serving  # noqa: PLC0415 - embedded mode only
    from graphfeed.graph_store.peers import connect_partitions  # noqa: PLC0415
    from graphfeed.loader.core import Loader  # noqa: PLC0415
    from graphfeed.sampler.client import SamplerClient  # noqa: PLC0415

    if not cfg.graph_stores or not cfg.sampler_address:
        raise ValueError("give either loader_address, or graph_stores and sampler_address (an embedded loader)")
    gpu_bytes = cfg.gpu_cache_bytes
    if gpu_bytes < 0:
        gpu_bytes = 0
        if torch.device(cfg.torch_device).type == "cuda":
            from graphfeed.gpu_kernels._cuda import auto_cache_bytes  # noqa: PLC0415 - GPU path only

            gpu_bytes = auto_cache_bytes()
    shm_dir = cfg.shm_dir or None
    # Graph-stores and sampler may start after this trainer: wait for them (connect_timeout_s).
    partitions = wait_for(
        "graph-stores",
        lambda t: connect_partitions(cfg.graph_stores, timeout_s=30.0, shm_dir=shm_dir, probe_timeout_s=t),
        cfg.connect_timeout_s,
    )
    try:
        at = cfg.sampler_address
        wait_for(f"sampler at {at}", lambda t: check_serving(at, f"sampler {at}", t), cfg.connect_timeout_s)
    except BaseException:
        partitions.close()
        raise
    sampler = SamplerClient(cfg.sampler_address, shm_dir=shm_dir)
    log.info(
        "embedded loader: %s cache %d bytes, GPU cache tier %d bytes", cfg.cache_policy, cfg.cache_bytes, gpu_bytes
    )
    loader = Loader(
        partitions, sampler, cache_policy=cfg.cache_policy, cache_bytes=cfg.cache_bytes, gpu_cache_bytes=gpu_bytes
    )
    return loader, sampler


def format_report(r: EpochReport) -> str:
    return (
        f"epoch {r.epoch:3d}  loss {r.loss:.4f}  {r.metric} {r.val_acc:.4f}  "
        f"{r.minibatches_per_s:7.1f} minibatches/s  cache hit rate {r.hit_rate:6.1%}  "
        f"remote feature bytes {r.remote_feature_bytes / 1e6:8.2f} MB"
    )
