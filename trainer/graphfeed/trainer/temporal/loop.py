"""Chronological TGN training with exact resume.

One epoch walks the whole event stream in batches: training batches (loss, optimizer step),
then validation and test batches (no step; the memory keeps following the stream, as in TGN).
Before a batch is scored its events are appended to the neighbour source, and samples are
"strictly before each event's time", so what a root sees is a pure function of the data (an
event never sees itself, later events, or events at its own time) and a source that already
holds the whole stream (a graph-store in epoch 2) answers exactly as one that is being fed.

Every random draw comes from ``graphfeed.common.seeds.rng(seed, "neg", epoch, step)``; a
checkpoint (model, optimizer, memory, stream position, metric accumulators) is written
atomically every ``checkpoint_every`` batches, and a restarted job replays the source's appends
up to the checkpoint and continues to the same final weights bit for bit. Dropout draws from
torch's generator seeded by ``derive_seed(seed, "dropout", epoch, step)`` for that batch only.

After every epoch the validation AP picks the best epoch so far; its weights and its memory at
the end of its stream are kept (in the checkpoint too) and restored when training ends
(``keep_best``), and ``patience`` epochs without a better one stop training.

``cfg.device`` places the weights and the node memory (``cuda``: on the GPU, with the stream's
edge features in the GPU cache of :mod:`.device` when the neighbours are in process).
"""

from __future__ import annotations

import ctypes
import logging
import os
import signal
import time
from collections.abc import Callable
from dataclasses import dataclass, field

import numpy as np
import torch
import torch.nn.functional as F

from graphfeed.common.seeds import derive_seed, rng
from graphfeed.gpu_kernels.backend import Backend
from graphfeed.trainer.checkpoint import save_checkpoint
from graphfeed.trainer.temporal.config import TGNConfig
from graphfeed.trainer.temporal.device import EdgeFeatureCache, resolve_device
from graphfeed.trainer.temporal.events import TemporalEvents
from graphfeed.trainer.temporal.memory import NodeMemory
from graphfeed.trainer.temporal.metrics import Scores
from graphfeed.trainer.temporal.model import TGN, TGNDims
from graphfeed.trainer.temporal.neighbors import InProcessNeighbors, NeighborSource, TemporalSample

log = logging.getLogger(__name__)

PHASES = ("train", "val", "test")


@dataclass(frozen=True)
class ChunkLine:
    """AP / MRR / loss of the events ``[first, stop)`` of one epoch."""

    epoch: int
    first: int
    stop: int
    phase: str
    ap: float
    mrr: float
    loss: float

    def __str__(self) -> str:
        mrr = "     -" if np.isnan(self.mrr) else f"{self.mrr:.4f}"
        span = f"epoch {self.epoch} events {self.first:>7,}-{self.stop:>7,} ({self.phase:5})"
        return f"{span} AP {self.ap:.4f} MRR {mrr} loss {self.loss:.4f}"


@dataclass(frozen=True)
class EpochResult:
    """Per-phase (AP, MRR, mean loss) of one epoch, and its wall time."""

    epoch: int
    metrics: dict[str, tuple[float, float, float]]
    seconds: float

    def __str__(self) -> str:
        parts = [
            f"{p} AP {ap:.4f}" + ("" if np.isnan(mrr) else f" MRR {mrr:.4f}")
            for p, (ap, mrr, _) in self.metrics.items()
        ]
        return f"epoch {self.epoch}: " + ", ".join(parts) + f" ({self.seconds:.1f}s)"


@dataclass
class TGNResult:
    """Per-epoch and per-chunk metrics; ``best_epoch`` (1-based) has the best validation AP, and
    ``kept_epoch`` is the epoch whose weights the trainer holds at the end."""

    epochs: list[EpochResult] = field(default_factory=list)
    chunks: list[ChunkLine] = field(default_factory=list)
    best_epoch: int = 0
    kept_epoch: int = 0
    stopped_early: bool = False

    @property
    def test_ap(self) -> float:
        """Test AP of the kept epoch's pass over the stream."""
        return self.epochs[self.kept_epoch - 1].metrics["test"][0]

    @property
    def test_mrr(self) -> float:
        return self.epochs[self.kept_epoch - 1].metrics["test"][1]


def batch_bounds(events: TemporalEvents, batch_size: int) -> list[tuple[int, int, str]]:
    """``(first, stop, phase)`` of every batch of an epoch; no batch straddles two phases."""
    edges = (0, events.val_start, events.test_start, events.num_events)
    return [
        (a, min(a + batch_size, hi), phase)
        for phase, lo, hi in zip(PHASES, edges, edges[1:])
        for a in range(lo, hi, batch_size)
    ]


def return_freed_memory_to_the_os(mmap_threshold_bytes: int = 1 << 20) -> None:
    """Fixes glibc's mmap threshold for this process (call once, from a main()).

    Each batch allocates MBs of temporaries whose sizes vary (the edge index grows by a batch,
    val/test batches have 20x more roots). glibc raises its mmap threshold after such blocks are
    freed, serves the next ones from the heap, and the heap fragments: resident memory grew by
    ~11 MB per val/test batch, to 3.8 GB after one LastFM epoch (6.7 GB peak after two). With the
    threshold fixed at 1 MiB a LastFM epoch peaks at 0.86 GB, but takes 259 s instead of 137 s
    (CollegeMsg, 20k events: 24.6 s vs ~18 s). A no-op where the C library is not glibc.
    """
    try:
        libc = ctypes.CDLL("libc.so.6")
    except OSError:
        return
    m_mmap_threshold = -3  # from glibc's malloc.h
    libc.mallopt(m_mmap_threshold, mmap_threshold_bytes)


class TGNTrainer:
    """Trains a :class:`TGN` on ``events`` chronologically, neighbours from ``source``.

    Args:
        events: the stream.
        cfg: settings; with ``cfg.checkpoint`` set and present, training resumes from it.
        source: a fresh or durable neighbour source (default: :class:`InProcessNeighbors`). On
            resume every append up to the checkpoint is sent again, in the same batches, so a
            durable source must treat a re-sent batch as a duplicate.
        report: called with every chunk and epoch line (default: ``print``).
        backend: where the edge-feature cache's kernels run (default: the CUDA device when
            ``cfg.device`` is a GPU; tests pass the kernel emulator to use the cache on a CPU).
    """

    def __init__(
        self,
        events: TemporalEvents,
        cfg: TGNConfig,
        source: NeighborSource | None = None,
        report: Callable[[str], None] = print,
        backend: Backend | None = None,
    ) -> None:
        self.events, self.cfg, self.report = events, cfg, report
        self.device = resolve_device(cfg.device)
        self.features = None if source is not None else self._edge_cache(backend)
        self._local: InProcessNeighbors | None = None  # the neighbour source when it is in process
        if source is None:
            source = self._local = InProcessNeighbors(events.num_nodes, 0 if self.features else events.edge_feat_dim)
        self.source: NeighborSource = source
        dims = TGNDims(cfg.memory_dim, cfg.time_dim, cfg.embed_dim, events.edge_feat_dim, cfg.heads, cfg.dropout)
        with torch.random.fork_rng():  # the job seed fixes the initial weights, global RNG untouched
            torch.manual_seed(derive_seed(cfg.seed, "init") & (2**63 - 1))
            self.model = TGN(dims).to(self.device)
        self.optimizer = torch.optim.Adam(self.model.parameters(), lr=cfg.lr)
        self.memory = NodeMemory(events.num_nodes, cfg.memory_dim, events.edge_feat_dim, self.device)
        self.bounds = batch_bounds(events, cfg.batch_size)
        self.epoch, self.step, self.position = 0, 0, 0
        self.result = TGNResult()
        self._best: dict | None = None  # epoch, val AP, weights, memory of the best epoch so far
        self._epoch_seconds = 0.0
        self._new_epoch_scores()
        self._batches_run = 0
        if cfg.checkpoint is not None and cfg.checkpoint.exists():
            self._restore(torch.load(cfg.checkpoint, weights_only=False, map_location=self.device))

    def _edge_cache(self, backend: Backend | None) -> EdgeFeatureCache | None:
        """The stream's edge features in the GPU cache, where there are features and a GPU (or a
        ``backend``) to keep them; None: the neighbour source keeps and returns them."""
        if self.events.efeat is None:
            return None
        if backend is None:
            from graphfeed.gpu_kernels._cuda import gpu_available, unavailable_reason  # noqa: PLC0415

            if self.device.type != "cuda" or not gpu_available():
                if self.device.type == "cuda":
                    log.warning("edge features stay on the host: the GPU kernels cannot run (%s)", unavailable_reason())
                return None
            from graphfeed.gpu_kernels.backend import cuda_backend  # noqa: PLC0415 - imports CuPy

            backend = cuda_backend()
        return EdgeFeatureCache(self.events.efeat, self.cfg.edge_cache_rows, backend)

    def run(self) -> TGNResult:
        """Trains the remaining epochs; returns the per-chunk and per-epoch metrics."""
        while self.epoch < self.cfg.epochs and not self.result.stopped_early:
            t0 = time.perf_counter() - self._epoch_seconds
            while self.step < len(self.bounds):
                self._batch(*self.bounds[self.step])
                self.step += 1
                self._epoch_seconds = time.perf_counter() - t0
                self._after_batch()
            done = EpochResult(self.epoch + 1, {p: s.summary() for p, s in self._phase.items()}, self._epoch_seconds)
            self.result.epochs.append(done)
            self.report(str(done))
            self._track_best(done)
            self.epoch, self.step = self.epoch + 1, 0
            if self.epoch == self.cfg.epochs or self.result.stopped_early:
                self._finish()  # the memory stays as at the end of the kept epoch's stream
            else:
                self.memory.reset()
            self._new_epoch_scores()
            self._checkpoint()
        return self.result

    def _track_best(self, done: EpochResult) -> None:
        """Keeps the weights and end-of-stream memory of the best validation AP so far."""
        val_ap = done.metrics["val"][0]
        if self._best is None or val_ap > self._best["val_ap"]:
            self._best = {
                "epoch": done.epoch,
                "val_ap": val_ap,
                "model": {k: v.clone() for k, v in self.model.state_dict().items()},
                "memory": self.memory.state_dict(),
            }
            self.result.best_epoch = done.epoch
        elif self.cfg.patience is not None and done.epoch - self._best["epoch"] >= self.cfg.patience:
            self.result.stopped_early = True
            self.report(f"no better validation AP for {self.cfg.patience} epoch(s): stopping after epoch {done.epoch}")

    def _finish(self) -> None:
        """The kept weights and memory: the best epoch's (``keep_best``) or the last one's."""
        self.result.kept_epoch = len(self.result.epochs)
        if self.cfg.keep_best and self._best is not None:
            self.model.load_state_dict(self._best["model"])
            self.memory.load_state_dict(self._best["memory"])
            self.result.kept_epoch = self._best["epoch"]
            self.report(f"kept epoch {self.result.kept_epoch} (best validation AP {self._best['val_ap']:.4f})")

    def _new_epoch_scores(self) -> None:
        self._phase = {p: Scores() for p in PHASES}
        self._chunk, self._chunk_first, self._epoch_seconds = Scores(), 0, 0.0

    def _after_batch(self) -> None:
        first, stop, phase = self.bounds[self.step - 1]
        n = self.events.num_events
        phase_ends = stop in (self.events.val_start, self.events.test_start, n)
        if (
            phase_ends or stop * self.cfg.chunks // n > first * self.cfg.chunks // n
        ):  # a chunk boundary (or a phase's end)
            line = ChunkLine(self.epoch + 1, self._chunk_first, stop, phase, *self._chunk.summary())
            self.result.chunks.append(line)
            self.report(str(line))
            self._chunk, self._chunk_first = Scores(), stop
        self._batches_run += 1
        if self.cfg.checkpoint_every and self.step % self.cfg.checkpoint_every == 0:
            self._checkpoint()
        if self._batches_run == self.cfg.crash_after_batches:
            os.kill(os.getpid(), signal.SIGKILL)

    def _batch(self, first: int, stop: int, phase: str) -> None:
        ev = self.events
        if self.position < stop:  # visible before it is scored: samples are strictly before t
            self._append(first, stop)
        if self.features is not None:
            self.features.advance(stop)
        src, dst, t = ev.src[first:stop], ev.dst[first:stop], ev.t[first:stop]
        lo, hi = ev.dst_range
        train = phase == "train"
        k = 1 if train else self.cfg.mrr_negatives  # extra negatives cost a root each: only where MRR is reported
        neg = rng(self.cfg.seed, "neg", self.epoch, self.step).integers(lo, hi + 1, size=(len(src), k))
        self.model.train(train)
        with torch.set_grad_enabled(train), torch.random.fork_rng(devices=[]):
            torch.manual_seed(derive_seed(self.cfg.seed, "dropout", self.epoch, self.step) & (2**63 - 1))
            pos, negs, loss, nodes, mem = self._forward(src, dst, t, neg, first)
            if train:
                self.optimizer.zero_grad()
                loss.backward()
                self.optimizer.step()
        self.memory.commit(nodes, mem)
        self.memory.store_messages(src, dst, t, None if ev.efeat is None else ev.efeat[first:stop])
        scores = (pos.detach().cpu().numpy(), negs.detach().cpu().numpy(), float(loss.detach()))
        self._phase[phase].add(*scores)
        self._chunk.add(*scores)

    def _append(self, first: int, stop: int) -> None:
        ev = self.events
        self.source.append(
            ev.src[first:stop], ev.dst[first:stop], ev.t[first:stop], None if ev.efeat is None else ev.efeat[first:stop]
        )
        self.position = stop

    def _forward(
        self, src: np.ndarray, dst: np.ndarray, t: np.ndarray, neg: np.ndarray, first: int | None = None
    ) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor, np.ndarray, torch.Tensor]:
        """Logits of the positives [B] and negatives [B, K], the loss, and the memory read, of
        the batch of events starting at stream position ``first``."""
        b, k = neg.shape
        roots = np.concatenate([src, dst, neg[:, 0], neg[:, 1:].ravel()])
        times = np.concatenate([t, t, t, np.repeat(t, k - 1)])
        smp = self._sample(roots, times, first)
        nodes = np.unique(np.concatenate([roots, smp.nbr]))
        mem = self.memory.read(self.model, nodes)
        z = self._embed(mem, nodes, smp, roots, times, 0, 3 * b)  # these carry the loss's gradient
        extra = torch.zeros(b, 0, device=self.device)
        if k > 1:
            with torch.no_grad():  # the extra negatives only rank the positive (MRR)
                z_extra = self._embed(mem.detach(), nodes, smp, roots, times, 3 * b, len(roots))
                extra = self.model.link(z[:b].detach().repeat_interleave(k - 1, dim=0), z_extra).reshape(b, k - 1)
        pos = self.model.link(z[:b], z[b : 2 * b])
        neg0 = self.model.link(z[:b], z[2 * b :])
        loss = F.binary_cross_entropy_with_logits(pos, torch.ones_like(pos))
        loss = loss + F.binary_cross_entropy_with_logits(neg0, torch.zeros_like(neg0))
        return pos, torch.cat([neg0.detach().unsqueeze(1), extra], dim=1), loss, nodes, mem

    def _sample(self, roots: np.ndarray, times: np.ndarray, first: int | None) -> TemporalSample:
        """The neighbours the visibility setting allows (previous-batches: the events before
        ``first``, at any time up to the root's own, as PyG's LastNeighborLoader)."""
        if self.cfg.visibility == "previous-batches" and first is not None:
            return self.source.sample(roots, times + 1, self.cfg.fanout, before_event=first)
        return self.source.sample(roots, times, self.cfg.fanout)

    def _embed(
        self,
        mem: torch.Tensor,
        nodes: np.ndarray,
        smp: TemporalSample,
        roots: np.ndarray,
        times: np.ndarray,
        r0: int,
        r1: int,
    ) -> torch.Tensor:
        """Embeddings of roots ``[r0, r1)`` of a sample."""
        s0, s1 = int(smp.offsets[r0]), int(smp.offsets[r1])
        offsets = smp.offsets[r0 : r1 + 1] - s0
        up = lambda a: torch.from_numpy(a).to(self.device)  # noqa: E731
        at = lambda ids: up(np.searchsorted(nodes, ids))  # noqa: E731 - row of each gid in mem
        root_t = np.repeat(times[r0:r1], np.diff(offsets))
        dt = up((root_t - smp.ts[s0:s1]).astype(np.float32))
        if self.features is not None and self._local is not None:
            feat = self.features.gather(self._local.event_of(smp.eid[s0:s1]))
        elif smp.efeat is None:
            feat = torch.zeros(s1 - s0, 0, device=self.device)
        else:
            feat = up(np.ascontiguousarray(smp.efeat[s0:s1]))
        return self.model.embed(mem[at(roots[r0:r1])], mem[at(smp.nbr[s0:s1])], dt, feat, offsets)

    def _checkpoint(self) -> None:
        if self.cfg.checkpoint is None:
            return
        state = {
            "model": self.model.state_dict(),
            "optimizer": self.optimizer.state_dict(),
            "memory": self.memory.state_dict(),
            "epoch": self.epoch,
            "step": self.step,
            "position": self.position,
            "result": self.result,
            "phase": self._phase,
            "chunk": self._chunk,
            "chunk_first": self._chunk_first,
            "epoch_seconds": self._epoch_seconds,
            "best": self._best,
        }
        save_checkpoint(self.cfg.checkpoint, state)

    def _restore(self, state: dict) -> None:
        self.model.load_state_dict(state["model"])
        self.optimizer.load_state_dict(state["optimizer"])
        self.memory.load_state_dict(state["memory"])
        self.epoch, self.step, self.result = state["epoch"], state["step"], state["result"]
        self._phase, self._chunk, self._chunk_first = state["phase"], state["chunk"], state["chunk_first"]
        self._epoch_seconds, self._best = state["epoch_seconds"], state["best"]
        for first, stop, _ in self.bounds:  # the source sees the same appends, in the same batches
            if stop <= state["position"]:
                self._append(first, stop)
        log.info(
            "resumed from %s at epoch %d step %d (%d events in the neighbour source)",
            self.cfg.checkpoint,
            self.epoch + 1,
            self.step,
            self.position,
        )
