"""Trainable embeddings over gRPC (issue 25): two real graph-store servers on loopback, a
table of the featureless ``tag`` type created on both, rows pulled and gradients pushed through
the owner-routing client, a graph-store restarted in between, every refusal with its status,
and two ranks stepping one table together through the trainer's classes."""

from __future__ import annotations

import threading
from collections.abc import Iterator
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path

import numpy as np
import pytest
import torch
from prometheus_client import CollectorRegistry

from graphfeed.cluster import ServiceProcess, start_service
from graphfeed.common.errors import DeadlineExceeded, FailedPrecondition, InvalidArgument, NotFound, ResourceExhausted
from graphfeed.common.partition import part_dir_name
from graphfeed.graph_store.config import GraphStoreSettings
from graphfeed.graph_store.embeddings.optim import combine, init_rows
from graphfeed.graph_store.embeddings.types import EmbeddingSpec, StepKey
from graphfeed.graph_store.partitions import RemotePartitionSet
from graphfeed.graph_store.server import serve
from graphfeed.ingest.partition import write_partitioned
from graphfeed.trainer.remote_embedding import RemoteEmbedding, RemoteSparseOptimizer, table_spec
from tests.integration.test_hetero_end_to_end import typed_graph
from tests.unit.test_embeddings import DglReference

pytestmark = [pytest.mark.integration]
DIM = 3
SPEC = EmbeddingSpec(name="emb-job:tag", ntype="tag", dim=DIM, job="emb-job", optimizer="adagrad", lr=0.5, eps=1e-10)


@pytest.fixture(scope="module")
def root(tmp_path_factory: pytest.TempPathFactory) -> Path:
    out = tmp_path_factory.mktemp("emb-wire") / "g"
    write_partitioned(typed_graph(), out, 2, method="random", seed=3)
    return out


def start(root: Path, p: int, max_ids: int = 1000) -> tuple:
    settings = GraphStoreSettings.model_validate(
        {"part_dir": root / part_dir_name(p), "port": 0, "metrics_port": -1, "max_ids_per_request": max_ids}
    )
    return serve(settings, CollectorRegistry())


@pytest.fixture()
def servers(root: Path) -> Iterator[list]:
    running = [start(root, p) for p in range(2)]
    yield running
    for srv, store in running:
        srv.stop(0.2)
        store.close()


def test_pull_and_push_route_to_the_owners_and_survive_a_restart(root: Path, servers: list) -> None:
    parts = RemotePartitionSet([s.address for s, _ in servers], timeout_s=10)
    emb = parts.embeddings()
    try:
        schema = parts.info.types
        tags = schema.to_gids("tag", np.arange(schema.num_nodes("tag")))
        assert len(set(parts.owners(tags).tolist())) == 2  # the tags are spread over both partitions
        assert emb.create(SPEC) and not emb.create(SPEC)
        emb.restore(SPEC.name, None)  # a fresh job: the seeded rows, whatever an earlier test left
        assert np.array_equal(emb.pull(SPEC.name, tags, DIM), init_rows(SPEC, tags))
        assert all(SPEC.name not in i for i in parts.info.node_data)  # not node data: no loader caches it
        ids = [tags[[0, 1, 1, 5]], tags[[5, 2]]]  # two ranks, repeats within and across
        grads = [np.full((4, DIM), 1.0, np.float32), np.full((2, DIM), 3.0, np.float32)]
        first = emb.push(SPEC.name, "emb-job", StepKey(0, 0), 1, 2, ids[1], grads[1])
        assert all(a.pending_ranks == (0,) for a in first)  # every partition got rank 1's push
        with pytest.raises(DeadlineExceeded, match=r"awaits ranks \[0\]"):
            emb.calls[0].timeout_s = 0.5
            emb.pull(SPEC.name, tags, DIM, after=StepKey(0, 0))
        emb.calls[0].timeout_s = 10
        emb.push(SPEC.name, "emb-job", StepKey(0, 0), 0, 2, ids[0], grads[0])
        got = emb.pull(SPEC.name, tags, DIM, after=StepKey(0, 0))
        want = init_rows(SPEC, tags)
        uniq, mean = combine([(ids[0], grads[0]), (ids[1], grads[1])])  # tag 1: 1, tag 5: (1 + 3) / 2
        pos = np.searchsorted(tags, uniq)
        want[pos] -= 0.5 * mean / (np.sqrt(mean * mean) + np.float32(1e-10))
        assert np.array_equal(got, want)
        assert all(a.duplicate for a in emb.push(SPEC.name, "emb-job", StepKey(0, 0), 0, 2, ids[0], grads[0]))
        emb.snapshot(SPEC.name, StepKey(0, 0))

        srv, store = servers[1]  # graph-store 1 goes down and comes back on its directory
        srv.stop(0)
        store.close()
        servers[1] = start(root, 1)
        back = RemotePartitionSet([s.address for s, _ in servers], timeout_s=10)
        try:
            assert np.array_equal(back.embeddings().pull(SPEC.name, tags, DIM), got)
        finally:
            back.close()
    finally:
        emb.close()
        parts.close()


def test_refusals_carry_their_status_and_message(root: Path, servers: list) -> None:
    srv1, store1 = servers[1]  # partition 1 again, with a limit of 4 ids per request
    srv1.stop(0)
    store1.close()
    servers[1] = start(root, 1, max_ids=4)
    parts = RemotePartitionSet([s.address for s, _ in servers], timeout_s=10)
    emb = parts.embeddings()
    try:
        calls = emb.calls
        calls[0].create(SPEC)
        calls[1].create(SPEC)
        schema = parts.info.types
        lo0, hi0 = schema.owned_range(0, "tag")
        lo1 = schema.owned_range(1, "tag")[0]
        with pytest.raises(FailedPrecondition, match="exists with other parameters"):
            calls[0].create(EmbeddingSpec(**{**SPEC.to_dict(), "dim": 4}))
        with pytest.raises(NotFound, match="'nope' does not exist"):
            calls[0].pull("nope", np.array([lo0]), DIM)
        with pytest.raises(NotFound, match="not tag nodes owned by partition 0"):
            calls[0].pull(SPEC.name, np.array([lo1]), DIM)
        with pytest.raises(InvalidArgument, match=r"grads must be float32 \[1, 3\]"):
            calls[0].push(SPEC.name, "emb-job", StepKey(0, 0), 0, 1, np.array([lo0]), np.zeros((1, 2), np.float32))
        with pytest.raises(ResourceExhausted, match="5 rows in one request exceed the limit of 4"):
            calls[1].pull(SPEC.name, np.full(5, lo1), DIM)
        with pytest.raises(FailedPrecondition, match="belongs to job 'emb-job'"):
            calls[0].push(SPEC.name, "other", StepKey(0, 0), 0, 1, np.array([lo0]), np.zeros((1, DIM), np.float32))
        assert calls[0].pull(SPEC.name, np.arange(lo0, hi0), DIM).shape == (hi0 - lo0, DIM)  # still serving
    finally:
        emb.close()
        parts.close()


def test_two_ranks_train_one_table_through_the_trainer_classes(servers: list) -> None:
    """Two ranks (threads) step together: each pulls rows as leaf tensors, backpropagates and
    pushes its own gradients; every partition applies a step once both pushed, as DGL's
    SparseAdam would on the two ranks' gradients together."""
    parts = RemotePartitionSet([s.address for s, _ in servers], timeout_s=20)
    tables = parts.embeddings()
    try:
        schema = parts.info.types
        n = schema.num_nodes("tag")
        spec = table_spec("ranks", "tag", n, 4, "adam", 0.1, seed=1)
        mods = [RemoteEmbedding(tables, schema, spec) for _ in range(2)]
        opts = [RemoteSparseOptimizer({"tag": m}, "ranks", r, 2) for r, m in enumerate(mods)]
        opts[0].create()
        opts[0].restore(None)  # rank 0 resets, the other only follows
        opts[1].restore(None, apply=False)
        ids = [torch.tensor([0, 1, 1, n - 1]), torch.tensor([n - 1, 2, 3])]
        weights = [torch.arange(16.0).reshape(4, 4) / 16, -torch.ones(3, 4)]
        errors: list[Exception] = []

        def rank(r: int) -> None:
            try:
                for step in range(3):
                    (mods[r](ids[r]) * weights[r]).sum().backward()  # d loss / d row = that row's weight
                    opts[r].step(StepKey(0, step))
            except Exception as e:  # noqa: BLE001 - asserted below: a thread's failure must fail the test
                errors.append(e)

        threads = [threading.Thread(target=rank, args=(r,)) for r in range(2)]
        for t in threads:
            t.start()
        for t in threads:
            t.join(60)
        assert not errors and not any(t.is_alive() for t in threads), errors
        gids = schema.to_gids("tag", np.arange(n))
        ref = DglReference(spec, torch.from_numpy(init_rows(spec, gids)))
        for _ in range(3):
            ref.step(torch.cat(ids), torch.cat(weights))
        got = mods[0](torch.arange(n))  # waits for step 2, as the next step's pull would
        torch.testing.assert_close(got.detach(), ref.w, rtol=1e-6, atol=1e-7)
        assert got.requires_grad and not torch.equal(got.detach(), torch.from_numpy(init_rows(spec, gids)))
    finally:
        tables.close()
        parts.close()


@pytest.mark.slow
def test_tables_survive_kill_9_of_the_graph_store_processes(root: Path, tmp_path: Path) -> None:
    """Real ``graphfeed serve graph-store`` processes, SIGKILLed after three steps and half of a
    fourth (no shutdown, no flush): restarted on the same partitions they serve the same bytes,
    and the half-pushed step completes with its other rank's push."""
    spec = EmbeddingSpec(name="kill:tag", ntype="tag", dim=DIM, job="kill", optimizer="adam", lr=0.1)

    def start_all() -> tuple[list[ServiceProcess], RemotePartitionSet]:
        n = len(started)
        with ThreadPoolExecutor(2) as pool:  # both start at once: a start is mostly imports
            procs = list(
                pool.map(
                    lambda p: start_service(
                        f"gs{p}-{n}", ["graph-store", "--part-dir", str(root / part_dir_name(p))], logs
                    ),
                    range(2),
                )
            )
        started.extend(procs)
        return procs, RemotePartitionSet([s.address for s in procs], timeout_s=20)

    logs, started = tmp_path / "logs", []  # type: ignore[var-annotated]
    procs, parts = start_all()
    try:
        emb, schema = parts.embeddings(), parts.info.types
        tags = schema.to_gids("tag", np.arange(schema.num_nodes("tag")))
        emb.create(spec)
        emb.restore(spec.name, None)
        ref = DglReference(spec, torch.from_numpy(init_rows(spec, tags)))
        ids = [tags[[0, 3, 3, len(tags) - 1]], tags[[1, len(tags) - 1]]]
        grads = [np.linspace(-1, 1, 4 * DIM, dtype=np.float32).reshape(4, DIM), np.ones((2, DIM), np.float32)]
        for step in range(4):
            for rank in (1, 0) if step < 3 else (1,):  # step 3: rank 1 only
                emb.push(spec.name, "kill", StepKey(0, step), rank, 2, ids[rank], grads[rank] * (step + 1))
            ref.step(
                torch.from_numpy(np.searchsorted(tags, np.concatenate(ids))),
                torch.from_numpy(np.concatenate(grads) * (step + 1)),
            )
        before = emb.pull(spec.name, tags, DIM, after=StepKey(0, 2))
        emb.close()
        parts.close()
        for s in procs:
            s.proc.kill()
            s.proc.wait(30)
        procs, parts = start_all()
        emb = parts.embeddings()
        assert emb.pull(spec.name, tags, DIM).tobytes() == before.tobytes()
        emb.push(spec.name, "kill", StepKey(0, 3), 0, 2, ids[0], grads[0] * 4)  # completes the logged half step
        got = emb.pull(spec.name, tags, DIM, after=StepKey(0, 3))
        torch.testing.assert_close(torch.from_numpy(got), ref.w, rtol=1e-6, atol=1e-7)
        emb.close()
    finally:
        parts.close()
        for s in procs:
            s.stop()
    for s in started:
        assert "Traceback" not in s.log_path.read_text(errors="replace"), s.log_path
