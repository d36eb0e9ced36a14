"""Node embeddings trained in the graph-stores (issue 25), as DistDGL's ``DistEmbedding`` with
``SparseAdagrad``/``SparseAdam``: the table of a featureless node type lives in the
graph-stores, each row in the partition owning the node, with the optimizer's state beside it.

* :class:`RemoteEmbedding` (one node type): ``forward(type-wise ids)`` pulls the rows as a leaf
  tensor requiring grad and records ``(ids, tensor)`` for the step (in training mode with grad
  enabled only; evaluation just reads).
* :class:`RemoteSparseOptimizer`: ``step(key)`` pushes each recorded tensor's gradient with the
  step's identity (job, epoch, step, rank, world size); the next pull waits until the
  graph-stores applied that step, so a step always sees the rows the previous one left.

**DDP.** Dense parameters are all-reduced by DDP as usual. Embedding gradients are *not*
all-reduced: each rank pushes its own, and each graph-store applies a step once every rank's
push of it arrived, combining them in rank order: gradients of the same id are summed over all
ranks and divided by their count (DistDGL's sparse optimizers do exactly this after their
all-to-all). The result is independent of the order pushes arrive in, bit for bit, and only
the rows a step touched cross the network (an all-reduce would ship a dense table, or need
sparse collectives). Every rank must push every step to every partition, empty or not: a
partition cannot otherwise tell "no gradient here" from "not arrived yet".

**Exact resume.** :meth:`RemoteSparseOptimizer.snapshot` keeps the tables as they are right
after the last pushed step (call it with every checkpoint); a resumed job calls
:meth:`RemoteSparseOptimizer.restore` with the checkpoint's step (None at a fresh start: the
seeded rows), which also forgets later steps, so replayed steps compute identical rows.
"""

from __future__ import annotations

import math
from concurrent.futures import Future, ThreadPoolExecutor
from typing import TYPE_CHECKING, Any

import numpy as np
import torch
from torch import nn

from graphfeed.common.schema import GraphSchema
from graphfeed.graph_store.embeddings.client import PartitionEmbeddings
from graphfeed.graph_store.embeddings.types import EmbeddingSpec, OptimizerName, StepKey
from graphfeed.trainer.config import TrainConfig
from graphfeed.trainer.connect import wait_for

if TYPE_CHECKING:
    from graphfeed.graph_store.partitions import RemotePartitionSet

__all__ = ["RemoteEmbedding", "RemoteSparseOptimizer", "server_embeddings", "table_spec"]

DEFAULT_EPS = {"adagrad": 1e-10, "adam": 1e-8}  # DGL's SparseAdagrad / SparseAdam defaults


def table_spec(
    job: str, ntype: str, num_nodes: int, dim: int, optimizer: OptimizerName, lr: float, seed: int
) -> EmbeddingSpec:
    """The table of ``ntype`` for ``job``: named ``"<job>:<ntype>"``, rows uniform in
    ``±sqrt(6 / (num_nodes + dim))`` (Xavier's bound, as the local RGCN's ``nn.Embedding``)."""
    bound = math.sqrt(6.0 / (num_nodes + dim))
    return EmbeddingSpec(
        name=f"{job}:{ntype}",
        ntype=ntype,
        dim=dim,
        job=job,
        optimizer=optimizer,
        lr=lr,
        eps=DEFAULT_EPS[optimizer],
        init_low=-bound,
        init_high=bound,
        seed=seed,
    )


class RemoteEmbedding(nn.Module):
    """The embedding of one node type, held by the graph-stores (no local parameters).

    Args:
        tables: the graph-stores' embedding tables (routed by owner).
        schema: the graph's types (type-wise id -> global id).
        spec: the table (created by :meth:`RemoteSparseOptimizer.create`).
    """

    def __init__(self, tables: PartitionEmbeddings, schema: GraphSchema, spec: EmbeddingSpec) -> None:
        super().__init__()
        self.tables, self.schema, self.spec = tables, schema, spec
        self.after: StepKey | None = None  # pulls wait until this step was applied
        self.trace: list[tuple[np.ndarray, torch.Tensor]] = []

    def forward(self, ids: torch.Tensor) -> torch.Tensor:
        """Rows of the type-wise ``ids`` (on ``ids``' device), float32 ``[len(ids), dim]``."""
        gids = self.schema.to_gids(self.spec.ntype, ids.detach().cpu().numpy())
        rows = torch.from_numpy(self.tables.pull(self.spec.name, gids, self.spec.dim, self.after)).to(ids.device)
        if self.training and torch.is_grad_enabled():
            rows.requires_grad_()
            self.trace.append((gids, rows))
        return rows

    def gradients(self) -> tuple[np.ndarray, np.ndarray]:
        """``(gids, grads)`` recorded since the last step (zeros for rows without a gradient)."""
        if not self.trace:
            return np.empty(0, np.int64), np.empty((0, self.spec.dim), np.float32)
        grads = [t.grad if t.grad is not None else torch.zeros_like(t) for _, t in self.trace]
        gids = np.concatenate([g for g, _ in self.trace])
        return gids, torch.cat(grads).detach().float().cpu().numpy()


class RemoteSparseOptimizer:
    """Pushes the gradients of :class:`RemoteEmbedding` modules; the graph-stores apply the
    table's optimizer (Adagrad or Adam, DGL's semantics). Not a ``torch.optim.Optimizer``:
    ``zero_grad`` has nothing to clear (each step's rows are new leaf tensors).

    Args:
        embeddings: the modules, by node type.
        job, rank, world_size: the step identity's constant part.
    """

    def __init__(self, embeddings: dict[str, RemoteEmbedding], job: str, rank: int, world_size: int) -> None:
        self.embeddings, self.job, self.rank, self.world_size = embeddings, job, rank, world_size
        self.last: StepKey | None = None  # the last pushed step
        # One push in flight, behind the next minibatch's fetch and forward: the next pull waits
        # on the graph-store until the step is applied, so nothing reads a row before its update.
        self._pusher = ThreadPoolExecutor(1, thread_name_prefix="embedding-push")
        self._pending: Future[None] | None = None

    def create(self) -> None:
        """Creates every table on every graph-store (idempotent: the same spec finds it)."""
        for emb in self.embeddings.values():
            emb.tables.create(emb.spec)

    def zero_grad(self) -> None:
        """Nothing to do: gradients live on the pulled rows, which the next step pulls anew."""

    def step(self, key: StepKey) -> None:
        """Pushes this rank's gradients of step ``key`` in the background (the previous step's
        push is waited for first, and its error raised here) and makes later pulls wait until
        every rank's push of it was applied. :meth:`flush` waits for it to be durable."""
        pushes = []
        for emb in self.embeddings.values():
            gids, grads = emb.gradients()
            pushes.append((emb.tables, emb.spec.name, gids, grads))
            emb.trace, emb.after = [], key
        self.flush()
        self._pending = self._pusher.submit(self._push, key, pushes)
        self.last = key

    def _push(self, key: StepKey, pushes: list[tuple[Any, str, np.ndarray, np.ndarray]]) -> None:
        for tables, name, gids, grads in pushes:
            tables.push(name, self.job, key, self.rank, self.world_size, gids, grads)

    def flush(self) -> None:
        """Waits until the last step's push is acknowledged (durable); raises its error."""
        pending, self._pending = self._pending, None
        if pending is not None:
            pending.result()

    def snapshot(self) -> StepKey | None:
        """Keeps every table as it is after the last pushed step (waits for it); returns that step."""
        self.flush()
        if self.last is not None:
            for emb in self.embeddings.values():
                emb.tables.snapshot(emb.spec.name, self.last)
        return self.last

    def restore(self, key: StepKey | None, apply: bool = True) -> None:
        """Continues from step ``key`` (None: from the start). With ``apply`` (one rank of a
        job, before any rank pushes again), every table returns to its snapshot of ``key``."""
        self.flush()
        for emb in self.embeddings.values():
            if apply:
                emb.tables.restore(emb.spec.name, key)
            emb.after, emb.trace = key, []
        self.last = key

    def close(self) -> None:
        """Waits for the last push, then releases the embeddings' clients (their partition set is
        its owner's to close)."""
        try:
            self.flush()
        finally:
            self._pusher.shutdown(wait=True)
        for tables in {id(e.tables): e.tables for e in self.embeddings.values()}.values():
            tables.close()


def server_embeddings(
    cfg: TrainConfig, loader: Any
) -> tuple[dict[str, RemoteEmbedding], RemoteSparseOptimizer, RemotePartitionSet]:
    """``--embeddings server``: a :class:`RemoteEmbedding` for every featureless node type of the
    graph ``loader`` reads and every type of ``cfg.featureless_types`` (width ``cfg.hidden``,
    optimizer ``cfg.embedding_optimizer`` at ``cfg.lr``, seeded by ``cfg.seed``), its tables
    created on the graph-stores ``cfg.graph_stores`` (waited for up to ``cfg.connect_timeout_s``);
    the optimizer; the partition set (the caller closes it)."""
    from graphfeed.graph_store.peers import connect_partitions  # noqa: PLC0415 - server embeddings only

    parts = wait_for(
        "graph-stores",
        lambda t: connect_partitions(cfg.graph_stores, timeout_s=60.0, shm_dir=None, probe_timeout_s=t),
        cfg.connect_timeout_s,
    )
    schema = parts.info.types
    tables = parts.embeddings()
    with_features = loader.typed_feature_shapes or {schema.ntypes[0]: ()}  # one type: it has "feat" (as _model says)
    featureless = [t for t in schema.ntypes if t not in with_features or t in cfg.featureless_types]
    modules = {
        nt: RemoteEmbedding(
            tables,
            schema,
            table_spec(cfg.job_id, nt, schema.num_nodes(nt), cfg.hidden, cfg.embedding_optimizer, cfg.lr, cfg.seed),
        )
        for nt in featureless
    }
    opt = RemoteSparseOptimizer(modules, cfg.job_id, cfg.rank, cfg.world_size)
    if not modules:
        tables.close()
    try:
        opt.create()
    except BaseException:
        tables.close()
        parts.close()
        raise
    return modules, opt, parts
