"""Durability of server-side embeddings under kill -9 (part 2 of ``graphfeed bench embeddings``).

Two real ``graphfeed serve graph-store`` processes hold one embedding table (SparseAdam) of a
node type; a pusher thread plays a fixed sequence of steps (ids and gradients drawn from a
seeded RNG) through :class:`~graphfeed.graph_store.embeddings.client.PartitionEmbeddings`, as a
one-rank trainer does: push step ``s``, then pull its rows after ``s``. A failed call is retried
with the same step (a push that reached one partition is replayed there, which must be taken
once). The same steps go, in lockstep, to an uninterrupted reference: in-process
:class:`~graphfeed.graph_store.embeddings.store.EmbeddingStore` partitions (the same code, no
process to kill).

Each trial SIGKILLs one graph-store while pushes flow and restarts it on the same port and
embeddings directory; after a few more steps the pusher pauses and both sides snapshot the last
step. The snapshot images (rows, every optimizer state array, the applied-step history) are
compared byte for byte, and every pulled row after every step too.
"""

from __future__ import annotations

import threading
import time
from collections.abc import Callable
from pathlib import Path
from typing import TypeVar

import numpy as np

from graphfeed.bench.append import StoreProcess
from graphfeed.cluster import start_service
from graphfeed.common.errors import GraphfeedError
from graphfeed.common.partition import GraphManifest, part_dir_name
from graphfeed.graph_store.embeddings import files
from graphfeed.graph_store.embeddings.client import LocalEmbeddingCalls, PartitionEmbeddings
from graphfeed.graph_store.embeddings.store import SPEC, EmbeddingStore
from graphfeed.graph_store.embeddings.types import StepKey
from graphfeed.graph_store.partitions import RemotePartitionSet
from graphfeed.trainer.remote_embedding import table_spec

T = TypeVar("T")
JOB = "emb-kill"


class EmbeddingStoreProcess(StoreProcess):
    """A ``graphfeed serve graph-store`` with its tables in ``append_dir`` (``--embeddings-dir``;
    a typed graph takes no appends), restartable in place on its port."""

    def start(self) -> None:
        self.starts += 1
        argv = ["graph-store", "--part-dir", str(self.part_dir), "--embeddings-dir", str(self.append_dir)]
        argv += ["--port", str(self.port), "--metrics-port", "-1"]
        self.process = start_service(f"{self.part_dir.name}-{self.starts}", argv, self.log_dir)


class Pusher(threading.Thread):
    """Pushes steps 0, 1, ... of one rank to ``remote`` and ``reference`` until paused; checks
    each step's pulled rows are equal on both. A failure is kept and re-raised by :meth:`pause`."""

    def __init__(
        self, remote: PartitionEmbeddings, reference: PartitionEmbeddings, name: str, gids: np.ndarray, dim: int
    ) -> None:
        super().__init__(daemon=True)
        self.remote, self.reference, self.name, self.gids, self.dim = remote, reference, name, gids, dim
        self.steps = 0  # steps acknowledged by both sides
        self.retries = 0
        self.rows_differ = 0  # steps whose pulled rows were not byte-equal
        self.duplicates = 0  # replayed pushes a graph-store had already taken (a kill between log and ack)
        self.ids_per_step = 512
        self._go = threading.Event()
        self._idle = threading.Event()
        self.error: BaseException | None = None

    def run(self) -> None:
        try:
            while True:
                self._idle.set()
                self._go.wait()
                self._idle.clear()
                if self._go.is_set():
                    self._step(self.steps)
                    self.steps += 1
        except BaseException as exc:  # noqa: BLE001 - re-raised by pause()
            self.error = exc
            self._idle.set()

    def _step(self, s: int) -> None:
        rng = np.random.default_rng([s, 25])
        ids = rng.choice(self.gids, self.ids_per_step)  # repeats included: their gradients are summed
        grads = rng.standard_normal((len(ids), self.dim), dtype=np.float32)
        key = StepKey(0, s)
        self.reference.push(self.name, JOB, key, 0, 1, ids, grads)
        want = self.reference.pull(self.name, ids, self.dim, key)
        acks = self._retry(lambda: self.remote.push(self.name, JOB, key, 0, 1, ids, grads))
        self.duplicates += sum(a.duplicate for a in acks)
        got = self._retry(lambda: self.remote.pull(self.name, ids, self.dim, key))
        self.rows_differ += int(got.tobytes() != want.tobytes())

    def _retry(self, call: Callable[[], T], deadline_s: float = 600.0) -> T:
        """``call()`` until it succeeds: a killed graph-store answers again once restarted."""
        deadline = time.monotonic() + deadline_s
        while True:
            try:
                return call()
            except GraphfeedError:
                if time.monotonic() > deadline:
                    raise
                self.retries += 1
                time.sleep(0.05)  # a pause between attempts, not synchronisation

    def resume(self) -> None:
        self._go.set()

    def pause(self, timeout_s: float = 600.0) -> None:
        """Stops after the step in progress; re-raises the pusher's failure."""
        self._go.clear()
        if not self._idle.wait(timeout_s):
            raise RuntimeError(f"pusher stuck at step {self.steps}")
        if self.error is not None:
            raise self.error

    def wait_for(self, steps: int, timeout_s: float = 600.0) -> None:
        deadline = time.monotonic() + timeout_s
        while self.steps < steps:
            if self.error is not None or time.monotonic() > deadline:
                raise RuntimeError(f"pusher stuck at {self.steps} steps (wanted {steps})") from self.error
            time.sleep(0.01)


def _image(emb_dir: Path, name: str, key: StepKey) -> files.Image:
    """The snapshot of step ``key`` of table ``name`` under one partition's embeddings dir."""
    for spec in emb_dir.glob(f"*/{SPEC}"):
        if f'"name": "{name}"' in spec.read_text():
            return files.read_image(files.snapshot_dir(spec.parent, key))
    raise FileNotFoundError(f"no table {name!r} under {emb_dir}")


def compare_images(a: files.Image, b: files.Image) -> dict[str, bool]:
    """Byte equality of rows, optimizer state and applied-step history of two images."""
    return {
        "rows_equal": a.rows.tobytes() == b.rows.tobytes(),
        "state_equal": sorted(a.state) == sorted(b.state)
        and all(a.state[k].tobytes() == b.state[k].tobytes() for k in a.state),
        "history_equal": (a.applied, a.count, a.done) == (b.applied, b.count, b.done),
    }


def kill_trials(
    root: Path,
    work: Path,
    trials: int,
    ntype: str,
    dim: int = 16,
    steps_before_kill: int = 5,
    on_trial: Callable[[dict], None] | None = None,
) -> list[dict]:
    """``trials`` kill -9 / restart cycles of graph-store ``k % 2`` (trial ``k``) under pushes to
    the table of ``ntype``; one result per trial (after it, both sides compared)."""
    (work / "logs").mkdir(parents=True, exist_ok=True)
    stores = [
        EmbeddingStoreProcess(root / part_dir_name(p), work / f"emb-{p}", work / "logs")
        for p in range(GraphManifest.load(root).num_partitions)
    ]
    for s in stores:
        s.start()
    # 30 s a call: a restarting graph-store (interpreter, imports, push log replay) is retried
    parts = RemotePartitionSet([s.address for s in stores], timeout_s=30)
    schema = parts.info.types
    refs = [
        EmbeddingStore(work / f"ref-{p}", schema, p, max_ids_per_request=1 << 20, chunk_bytes=1 << 22)
        for p in range(len(stores))
    ]
    remote, reference = parts.embeddings(), PartitionEmbeddings([LocalEmbeddingCalls(r) for r in refs], schema)
    spec = table_spec(JOB, ntype, schema.num_nodes(ntype), dim, "adam", 0.01, seed=25)
    remote.create(spec)
    reference.create(spec)
    pusher = Pusher(remote, reference, spec.name, schema.to_gids(ntype, np.arange(schema.num_nodes(ntype))), dim)
    pusher.start()
    results: list[dict] = []
    try:
        for k in range(trials):
            pusher.resume()
            pusher.wait_for(pusher.steps + steps_before_kill)
            retries0, dup0, victim, t0 = pusher.retries, pusher.duplicates, stores[k % len(stores)], time.perf_counter()
            victim.kill9()
            victim.start()
            down_s = time.perf_counter() - t0
            pusher.wait_for(pusher.steps + steps_before_kill)
            pusher.pause()
            last = StepKey(0, pusher.steps - 1)
            remote.snapshot(spec.name, last)
            reference.snapshot(spec.name, last)
            checks = [
                compare_images(_image(work / f"emb-{p}", spec.name, last), _image(work / f"ref-{p}", spec.name, last))
                for p in range(len(stores))
            ]
            applied = [_image(work / f"emb-{p}", spec.name, last).count for p in range(len(stores))]
            row = {
                "trial": k,
                "killed": k % len(stores),
                "steps": pusher.steps,
                "retries": pusher.retries - retries0,
                "duplicate_acks": pusher.duplicates - dup0,  # replays taken once, not twice
                "down_s": round(down_s, 2),
                "applied_steps": applied,  # per partition; == steps: none lost, none twice
                "lost_or_twice": sum(abs(a - pusher.steps) for a in applied),
                "pulled_rows_differ": pusher.rows_differ,
                **{key: all(c[key] for c in checks) for key in checks[0]},
            }
            results.append(row)
            if on_trial is not None:
                on_trial(row)
    finally:
        pusher.pause()
        remote.close()
        reference.close()
        parts.close()
        for r in refs:
            r.close()
        codes = [s.stop() for s in stores]
    if any(codes):
        raise RuntimeError(f"graph-stores exited with {codes}; logs in {work / 'logs'}")
    return results
