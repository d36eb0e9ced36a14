"""Trainable embeddings in the graph-store core (issue 25), without sockets: rows and optimizer
state against a torch transcription of DGL's SparseAdagrad/SparseAdam, pushes taken once and
combined independently of arrival order, refusals, restart from disk, snapshot and restore."""

from __future__ import annotations

import os
import shutil
from pathlib import Path

import numpy as np
import pytest
import torch

from graphfeed.common.errors import DeadlineExceeded, FailedPrecondition, InvalidArgument, NotFound, ResourceExhausted
from graphfeed.common.partition import part_dir_name
from graphfeed.common.schema import GraphSchema
from graphfeed.graph_store.embeddings.optim import init_rows
from graphfeed.graph_store.embeddings.store import EmbeddingStore
from graphfeed.graph_store.embeddings.types import NO_STEP, EmbeddingSpec, StepKey
from graphfeed.graph_store.partitions import LocalPartitionSet
from graphfeed.graph_store.store import GraphStore
from tests.hetero_graphs import write_hetero

# Two partitions of 10 nodes each: paper [0, 4) + author [4, 10) in p0, paper [10, 13) + author [13, 20) in p1.
SCHEMA = GraphSchema(
    ("paper", "author"), (("author", "writes", "paper"),), np.array([[0, 4, 10], [10, 13, 20]]), np.array([0, 0])
)
DIM = 4
AUTHORS = np.arange(4, 10)  # owned by partition 0


def spec(optimizer: str = "adam", **over: object) -> EmbeddingSpec:
    values: dict = dict(name="job:author", ntype="author", dim=DIM, job="job", optimizer=optimizer, lr=0.1, seed=7)
    values["eps"] = 1e-10 if optimizer == "adagrad" else 1e-8
    values.update(over)
    return EmbeddingSpec(**values)


def open_store(root: Path, flush_every: int = 64, max_ids: int = 1000) -> EmbeddingStore:
    return EmbeddingStore(root, SCHEMA, 0, max_ids_per_request=max_ids, chunk_bytes=40, flush_every=flush_every)


def grads_of(step: int, rank: int, ids: np.ndarray) -> np.ndarray:
    """Arithmetic gradients: small dyadic values, exact in float32 whatever the summation order."""
    return ((ids[:, None] * 3 + np.arange(DIM)[None, :] + step * 5 + rank * 7) % 11 - 5).astype(np.float32) / 8


def ranks_ids(step: int) -> list[np.ndarray]:
    """Each rank's ids of a step: repeats within and across ranks, as minibatches have."""
    return [np.array([4, 5, 5, 9, 6 + step % 3]), np.array([9, 8, 4, 7 - step % 2])]


class DglReference:
    """DGL's sparse_optim.py update rules, written again in torch (what the server must match)."""

    def __init__(self, s: EmbeddingSpec, weight: torch.Tensor) -> None:
        self.s, self.w = s, weight.clone()
        self.sum = torch.zeros_like(self.w)
        self.mem, self.power = torch.zeros_like(self.w), torch.zeros_like(self.w)
        self.steps = torch.zeros(len(self.w))

    def step(self, idx: torch.Tensor, grad: torch.Tensor) -> None:
        s = self.s
        uniq, inverse, cnt = torch.unique(idx, return_inverse=True, return_counts=True)
        g = torch.zeros((len(uniq), grad.shape[1])).index_add_(0, inverse, grad) / cnt.unsqueeze(1)
        if s.optimizer == "adagrad":
            self.sum[uniq] += g * g
            self.w[uniq] -= s.lr * g / (self.sum[uniq].sqrt() + s.eps)
            return
        self.steps[uniq] += 1
        t = self.steps[uniq]
        self.mem[uniq] = s.beta1 * self.mem[uniq] + (1.0 - s.beta1) * g
        self.power[uniq] = s.beta2 * self.power[uniq] + (1.0 - s.beta2) * g * g
        m_corr = self.mem[uniq] / (1.0 - torch.pow(torch.tensor(s.beta1), t)).unsqueeze(1)
        p_corr = self.power[uniq] / (1.0 - torch.pow(torch.tensor(s.beta2), t)).unsqueeze(1)
        self.w[uniq] -= s.lr * m_corr / (torch.sqrt(p_corr) + s.eps)


def push_step(store: EmbeddingStore, step: int, order: tuple[int, ...] = (0, 1)) -> None:
    ids = ranks_ids(step)
    for rank in order:
        store.push("job:author", "job", StepKey(0, step), rank, 2, ids[rank], grads_of(step, rank, ids[rank]))


@pytest.mark.parametrize("optimizer", ["adagrad", "adam"])
def test_pushes_follow_dgl_sparse_optimizers(tmp_path: Path, optimizer: str) -> None:
    store = open_store(tmp_path)
    s = spec(optimizer)
    info = store.create(s)
    assert info.created and (info.lo, info.hi) == (4, 10)
    first = store.pull(s.name, AUTHORS)
    assert first.dtype == np.float32 and first.shape == (6, DIM)
    assert np.array_equal(first, init_rows(s, AUTHORS))  # a pure function of (seed, gid)
    assert first.min() >= -1 and first.max() < 1 and len(np.unique(first)) == first.size
    ref = DglReference(s, torch.from_numpy(first))
    for step in range(4):
        push_step(store, step)
        ids = ranks_ids(step)
        idx = torch.from_numpy(np.concatenate(ids) - 4)
        ref.step(idx, torch.from_numpy(np.concatenate([grads_of(step, r, ids[r]) for r in (0, 1)])))
    got = store.pull(s.name, AUTHORS, after=StepKey(0, 3), timeout_s=1)
    torch.testing.assert_close(torch.from_numpy(got), ref.w, rtol=1e-6, atol=1e-7)
    assert not np.array_equal(got, first)
    if optimizer == "adam":
        assert np.array_equal(store.table(s.name).state()["steps"], ref.steps.numpy())  # rows 4, 9 stepped 4 times
    store.close()


def test_a_step_waits_for_every_rank_and_replays_apply_once(tmp_path: Path) -> None:
    store = open_store(tmp_path)
    store.create(spec())
    ids = ranks_ids(0)
    g0 = grads_of(0, 0, ids[0])
    ack = store.push("job:author", "job", StepKey(0, 0), 0, 2, ids[0], g0)
    assert not ack.duplicate and ack.applied == NO_STEP and ack.pending_ranks == (1,)
    with pytest.raises(DeadlineExceeded, match=r"ranks.*\[1\]"):
        store.pull("job:author", AUTHORS, after=StepKey(0, 0), timeout_s=0.05)
    assert store.push("job:author", "job", StepKey(0, 0), 0, 2, ids[0], g0).duplicate  # retried before the step
    ack = store.push("job:author", "job", StepKey(0, 0), 1, 2, ids[1], grads_of(0, 1, ids[1]))
    assert ack.applied == StepKey(0, 0) and ack.pending_ranks == ()
    after = store.pull("job:author", AUTHORS)
    for rank in (0, 1):  # replayed after the step was applied: nothing changes
        assert store.push(
            "job:author", "job", StepKey(0, 0), rank, 2, ids[rank], grads_of(0, rank, ids[rank])
        ).duplicate
    assert np.array_equal(store.pull("job:author", AUTHORS), after)
    assert store.table("job:author").num_applied == 1
    with pytest.raises(FailedPrecondition, match="other gradients"):
        store.push("job:author", "job", StepKey(0, 0), 0, 2, ids[0], g0 + 1)
    store.close()


def test_arrival_order_does_not_change_a_byte(tmp_path: Path) -> None:
    a, b = open_store(tmp_path / "a"), open_store(tmp_path / "b")
    for store, order in ((a, (0, 1)), (b, (1, 0))):
        store.create(spec())
        for step in range(3):
            push_step(store, step, order)
    assert a.pull("job:author", AUTHORS).tobytes() == b.pull("job:author", AUTHORS).tobytes()
    sa, sb = a.table("job:author").state(), b.table("job:author").state()
    assert all(sa[k].tobytes() == sb[k].tobytes() for k in sa)
    a.close()
    b.close()


def test_refusals_say_what_is_wrong_and_the_table_keeps_working(tmp_path: Path) -> None:
    store = open_store(tmp_path, max_ids=8)
    store.create(spec())
    assert not store.create(spec()).created  # same parameters: fine
    with pytest.raises(FailedPrecondition, match=r"'lr': \(0.1, 0.5\)"):
        store.create(spec(lr=0.5))
    with pytest.raises(InvalidArgument, match="unknown node type"):
        store.create(spec(name="x", ntype="venue"))
    with pytest.raises(NotFound, match="'nope' does not exist"):
        store.pull("nope", AUTHORS)
    with pytest.raises(NotFound, match=r"ids 0, 13 are not author nodes owned by partition 0 \(those are \[4, 10\)\)"):
        store.pull("job:author", np.array([4, 0, 13]))
    with pytest.raises(InvalidArgument, match=r"float32 \[2, 4\].*got float32 \[2, 3\]"):
        store.push("job:author", "job", StepKey(0, 0), 0, 1, np.array([4, 5]), np.zeros((2, 3), np.float32))
    with pytest.raises(InvalidArgument, match=r"got float64 \[2, 4\]"):
        store.push("job:author", "job", StepKey(0, 0), 0, 1, np.array([4, 5]), np.zeros((2, 4)))
    with pytest.raises(InvalidArgument, match=r"grads must be float32 \[1, 4\]"):
        store.push("job:author", "job", StepKey(0, 0), 0, 1, np.array([4]), np.zeros((2, 4), np.float32))
    with pytest.raises(ResourceExhausted, match="9 ids in one request exceed the limit of 8"):
        store.pull("job:author", np.full(9, 4))
    with pytest.raises(InvalidArgument, match=r"world_size must be in \[1, 65536\], got 0"):
        store.push("job:author", "job", StepKey(0, 0), 0, 0, np.array([4]), np.zeros((1, 4), np.float32))
    with pytest.raises(InvalidArgument, match="rank must be in"):
        store.push("job:author", "job", StepKey(0, 0), 2, 2, np.array([4]), np.zeros((1, 4), np.float32))
    with pytest.raises(FailedPrecondition, match="belongs to job 'job', not 'other'"):
        store.push("job:author", "other", StepKey(0, 0), 0, 1, np.array([4]), np.ones((1, 4), np.float32))
    store.push("job:author", "job", StepKey(0, 0), 0, 1, np.array([4]), np.ones((1, 4), np.float32))
    assert store.table("job:author").applied == StepKey(0, 0)
    store.close()


@pytest.mark.parametrize("flush_every", [1, 2, 64])
def test_restart_keeps_rows_state_and_pending_pushes(tmp_path: Path, flush_every: int) -> None:
    """Reopen from disk without close() (a kill -9: only fsync'd files count), with the image
    flushed at every step, every other step, or never (all from the log)."""
    store = open_store(tmp_path, flush_every)
    store.create(spec())
    for step in range(3):
        push_step(store, step)
    ids = ranks_ids(3)
    store.push("job:author", "job", StepKey(0, 3), 1, 2, ids[1], grads_of(3, 1, ids[1]))  # step 3 half-pushed
    rows, state = store.pull("job:author", AUTHORS), store.table("job:author").state()
    crashed = tmp_path.parent / f"{tmp_path.name}-crashed"
    shutil.copytree(tmp_path, crashed)  # what a killed process leaves (every write was fsync'd)
    reopened = open_store(crashed, flush_every)
    assert reopened.table("job:author").applied == StepKey(0, 2)
    assert reopened.pull("job:author", AUTHORS).tobytes() == rows.tobytes()
    assert all(reopened.table("job:author").state()[k].tobytes() == v.tobytes() for k, v in state.items())
    assert reopened.push("job:author", "job", StepKey(0, 3), 1, 2, ids[1], grads_of(3, 1, ids[1])).duplicate
    reopened.push("job:author", "job", StepKey(0, 3), 0, 2, ids[0], grads_of(3, 0, ids[0]))
    store.push("job:author", "job", StepKey(0, 3), 0, 2, ids[0], grads_of(3, 0, ids[0]))
    assert reopened.pull("job:author", AUTHORS).tobytes() == store.pull("job:author", AUTHORS).tobytes()
    store.close()
    reopened.close()


def test_a_torn_log_tail_is_dropped(tmp_path: Path) -> None:
    store = open_store(tmp_path)
    store.create(spec())
    push_step(store, 0)
    rows = store.pull("job:author", AUTHORS)
    store.close()
    log_file = next(tmp_path.glob("*/pushes.log"))
    with open(log_file, "ab") as f:
        f.write(b"GFEP\x10\x00")  # a record cut short by a crash (never acknowledged)
    reopened = open_store(tmp_path)
    assert reopened.pull("job:author", AUTHORS).tobytes() == rows.tobytes()
    push_step(reopened, 1)  # appends after the good records
    reopened.close()
    assert open_store(tmp_path).table("job:author").applied == StepKey(0, 1)


def test_snapshot_and_restore_return_to_exact_bytes(tmp_path: Path) -> None:
    store = open_store(tmp_path, flush_every=2)
    s = spec()
    store.create(s)
    push_step(store, 0)
    push_step(store, 1)
    assert store.snapshot(s.name, StepKey(0, 1), timeout_s=1)
    assert not store.snapshot(s.name, StepKey(0, 1))  # idempotent
    table_dir = next(tmp_path.glob("*/CURRENT")).parent
    image, snap = (table_dir / (table_dir / "CURRENT").read_text(), table_dir / "snapshots" / f"{0:012d}-{1:012d}")
    assert os.stat(image / "rows.npy").st_ino == os.stat(snap / "rows.npy").st_ino  # shared, not written twice
    at_1 = store.pull(s.name, AUTHORS)
    push_step(store, 2)
    push_step(store, 3)  # a flush: the image the snapshot shares files with is deleted
    assert not image.exists()
    first_3 = store.pull(s.name, AUTHORS)
    push_step(store, 4, order=(0,))  # a crashed run's half step
    store.restore(s.name, StepKey(0, 1))
    assert store.table(s.name).applied == StepKey(0, 1)
    assert store.pull(s.name, AUTHORS).tobytes() == at_1.tobytes()
    push_step(store, 2)  # replayed: taken again (their old records were dropped)
    push_step(store, 3)
    after_3 = store.pull(s.name, AUTHORS)
    assert after_3.tobytes() == first_3.tobytes()  # the replayed steps computed the same bytes
    with pytest.raises(FailedPrecondition, match="table is at epoch 0 step 3"):
        store.snapshot(s.name, StepKey(0, 2))
    with pytest.raises(NotFound, match="no snapshot of epoch 0 step 2"):
        store.restore(s.name, StepKey(0, 2))
    store.restore(s.name, None)  # a job started over: the seeded rows again
    assert np.array_equal(store.pull(s.name, AUTHORS), init_rows(s, AUTHORS))
    for step in range(4):
        push_step(store, step)
    assert store.pull(s.name, AUTHORS).tobytes() == after_3.tobytes()
    store.close()
    assert open_store(tmp_path).pull(s.name, AUTHORS).tobytes() == after_3.tobytes()  # restore is durable
    assert os.listdir(tmp_path)  # the tables live under the given directory


def test_a_table_of_another_graph_is_not_served(tmp_path: Path) -> None:
    store = open_store(tmp_path)
    store.create(spec())
    store.close()
    other = GraphSchema(
        ("paper", "author"), (("author", "writes", "paper"),), np.array([[0, 4, 9], [9, 12, 20]]), np.array([0, 0])
    )
    reopened = EmbeddingStore(tmp_path, other, 0, max_ids_per_request=10, chunk_bytes=40)  # 5 authors now, not 6
    with pytest.raises(NotFound, match="'job:author' does not exist"):
        reopened.pull("job:author", np.array([4]))
    assert open_store(tmp_path).table("job:author").applied == NO_STEP  # still there for its own graph


def test_partition_embeddings_route_by_owner_in_process(tmp_path: Path) -> None:
    """The owner-routing client over two in-process graph-stores of the arithmetic heterograph:
    each tag's row comes from, and its gradient goes to, the partition owning it."""
    root = write_hetero(tmp_path / "g")
    stores = [GraphStore.open(root / part_dir_name(p)) for p in range(2)]
    parts = LocalPartitionSet(stores)
    emb = parts.embeddings(timeout_s=1)
    try:
        schema = parts.info.types
        tags = schema.to_gids("tag", np.arange(schema.num_nodes("tag")))
        assert len(set(parts.owners(tags).tolist())) == 2
        s = spec(ntype="tag", name="job:tag", optimizer="adagrad")
        assert emb.create(s)
        assert np.array_equal(emb.pull(s.name, tags[::-1], DIM), init_rows(s, tags[::-1]))  # request order kept
        grads = np.ones((len(tags), DIM), np.float32)
        acks = emb.push(s.name, "job", StepKey(0, 0), 0, 1, tags, grads)
        assert [a.applied for a in acks] == [StepKey(0, 0)] * 2  # both partitions applied the step
        want = init_rows(s, tags) - np.float32(0.1) * grads / (np.sqrt(grads * grads) + np.float32(1e-10))
        assert np.array_equal(emb.pull(s.name, tags, DIM, after=StepKey(0, 0)), want)
        for p, store in enumerate(stores):
            lo, hi = schema.owned_range(p, "tag")
            assert store.embeddings.describe(s.name).lo == lo and store.embeddings.table(s.name).hi == hi
    finally:
        emb.close()
        for store in stores:
            store.close()
