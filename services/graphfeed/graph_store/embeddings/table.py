"""One trainable embedding table of one partition: rows, optimizer state, pushes, versions.

The rows and optimizer state live in memory; what survives a crash is the current image
(:mod:`~graphfeed.graph_store.embeddings.files`) plus the push log
(:mod:`~graphfeed.graph_store.embeddings.pushlog`), every push fsync'd there before it is
acknowledged. Opening the table loads the image and replays the log: pushes of steps the image
holds are skipped, the others are taken again, and steps they complete are applied again, to the
same bytes. Every ``flush_every`` applied steps the image is rewritten and the log cut to the
pushes of steps not yet applied.

A step is applied once all ``world_size`` ranks pushed it, combining their gradients in rank
order (:func:`~graphfeed.graph_store.embeddings.optim.combine`): the result does not depend on
the order in which pushes arrive. The table's version is its last applied step.
"""

from __future__ import annotations

import hashlib
import shutil
import threading
import time
from pathlib import Path

import numpy as np

from graphfeed.common.errors import DeadlineExceeded, FailedPrecondition, InvalidArgument, NotFound
from graphfeed.common.limits import EMBEDDING_DEDUP_STEPS
from graphfeed.graph_store.embeddings import files, optim
from graphfeed.graph_store.embeddings.files import Image
from graphfeed.graph_store.embeddings.pushlog import LoggedPush, PushLog
from graphfeed.graph_store.embeddings.types import NO_STEP, EmbeddingSpec, PushAck, StepKey, StepPush


def push_digest(rows: np.ndarray, grads: np.ndarray) -> str:
    """A digest of a push's content (a replay must send the same)."""
    h = hashlib.blake2b(digest_size=16)
    h.update(np.ascontiguousarray(rows, np.int64).data)
    h.update(np.ascontiguousarray(grads, np.float32).data)
    return h.hexdigest()


class EmbeddingTable:
    """The table ``spec`` holding global ids ``[lo, hi)``, in directory ``path``.

    Args:
        flush_every: applied steps between rewrites of the image (the log holds the rest).
        keep_snapshots: snapshots kept (the oldest are deleted beyond it).
    """

    def __init__(
        self, path: Path, spec: EmbeddingSpec, lo: int, hi: int, flush_every: int = 64, keep_snapshots: int = 3
    ) -> None:
        self.path, self.spec, self.lo, self.hi = path, spec, lo, hi
        self.flush_every, self.keep_snapshots = flush_every, keep_snapshots
        self._cond = threading.Condition()
        self._pending: dict[StepKey, dict[int, LoggedPush]] = {}
        path.mkdir(parents=True, exist_ok=True)
        loaded = files.load_current(path)
        if loaded is None:
            self._image, self._generation = self._initial(), 0
            files.save_current(path, self._image, 0)
        else:
            self._image, self._generation = loaded
            if self._image.rows.shape != (hi - lo, spec.dim):
                raise FailedPrecondition(
                    f"embedding {spec.name!r} in {path} holds {list(self._image.rows.shape)} rows, but the partition "
                    f"has {hi - lo} {spec.ntype} nodes of width {spec.dim}: it was written for another graph"
                )
        self._unflushed = 0
        # More than the log can hold (pushes since the last flush): replay recognizes every applied one.
        self._keep_done = max(EMBEDDING_DEDUP_STEPS, 2 * flush_every)
        self._replaying = True  # the log is only cut once every record of it was taken again
        self._log = PushLog(path / "pushes.log", spec.dim)
        with self._cond:
            for rec in self._log.records():
                if rec.push.key not in self._image.done:
                    self._take(rec)
        self._replaying = False

    def _initial(self) -> Image:
        rows = optim.init_rows(self.spec, np.arange(self.lo, self.hi, dtype=np.int64))
        return Image(rows, optim.new_state(self.spec.optimizer, self.hi - self.lo, self.spec.dim), NO_STEP, 0, {})

    @property
    def applied(self) -> StepKey:
        """The last applied step (:data:`NO_STEP` before any)."""
        return self._image.applied

    @property
    def num_applied(self) -> int:
        return self._image.count

    def state(self) -> dict[str, np.ndarray]:
        """Copies of the optimizer state arrays (tests, debugging)."""
        with self._cond:
            return {k: v.copy() for k, v in self._image.state.items()}

    # -- reads --------------------------------------------------------------------------------

    def pull(self, rows: np.ndarray, after: StepKey | None = None, timeout_s: float | None = None) -> np.ndarray:
        """A copy of local ``rows``, once step ``after`` is applied (waits up to ``timeout_s``).

        Raises:
            DeadlineExceeded: ``after`` was not applied in time (the message says which ranks'
                pushes are missing).
        """
        with self._cond:
            if after is not None:
                self._wait(after, timeout_s)
            return self._image.rows[rows]

    def _wait(self, key: StepKey, timeout_s: float | None) -> None:
        deadline = None if timeout_s is None else time.monotonic() + max(0.0, timeout_s)
        while self._image.applied < key:
            left = None if deadline is None else deadline - time.monotonic()
            if left is not None and left <= 0:
                waiting = "; ".join(f"{k} awaits ranks {list(self._missing(k))}" for k in sorted(self._pending))
                raise DeadlineExceeded(
                    f"embedding {self.spec.name!r}: {key} not applied within {timeout_s:.1f} s (last applied: "
                    f"{self._image.applied}; {waiting or 'no step awaits pushes'})"
                )
            self._cond.wait(left)

    # -- pushes -------------------------------------------------------------------------------

    def push(self, push: StepPush, rows: np.ndarray, grads: np.ndarray) -> PushAck:
        """Takes one rank's gradients of one step (durable when this returns), once.

        Raises:
            InvalidArgument: a bad rank or world size.
            FailedPrecondition: the same rank and step sent again with other gradients, a world
                size other than the step's first push said, or a step before the last applied one.
        """
        if not 0 <= push.rank < push.world_size:
            raise InvalidArgument(f"rank must be in [0, world_size={push.world_size}), got {push.rank}")
        with self._cond:
            if self._seen(push):
                return self._ack(push.key, duplicate=True)
            rec = LoggedPush(push, rows, grads)
            self._log.append(rec)
            self._take(rec)
            return self._ack(push.key, duplicate=False)

    def _seen(self, push: StepPush) -> bool:
        """Whether this exact push was taken already (raises for a conflicting one)."""
        key, name = push.key, self.spec.name
        done = self._image.done.get(key)
        if done is not None:
            if push.rank >= len(done) or done[push.rank] != push.digest:
                raise FailedPrecondition(
                    f"embedding {name!r}: {key} was applied with other gradients from rank {push.rank} "
                    f"(or another world size than {push.world_size}); a replay must resend the same"
                )
            return True
        if key < self._image.applied:
            raise FailedPrecondition(
                f"embedding {name!r}: a push of {key} arrived after {self._image.applied} was applied; "
                "restore the table to a snapshot before replaying earlier steps"
            )
        waiting = self._pending.get(key, {})
        first = next(iter(waiting.values()), None)
        if first is not None and first.push.world_size != push.world_size:
            raise FailedPrecondition(
                f"embedding {name!r}: {key} pushed with world_size {push.world_size}, "
                f"but earlier with {first.push.world_size}"
            )
        prev = waiting.get(push.rank)
        if prev is not None and prev.push.digest != push.digest:
            raise FailedPrecondition(f"embedding {name!r}: rank {push.rank} pushed {key} twice with other gradients")
        return prev is not None

    def _take(self, rec: LoggedPush) -> None:
        """Adds a (logged) push; applies its step once every rank's push is in."""
        key = rec.push.key
        waiting = self._pending.setdefault(key, {})
        waiting[rec.push.rank] = rec
        if len(waiting) < rec.push.world_size:
            return
        del self._pending[key]
        parts = [(waiting[r].rows, waiting[r].grads) for r in range(rec.push.world_size)]
        uniq, grad = optim.combine(parts)
        img = self._image
        optim.apply_update(self.spec, img.rows, img.state, uniq, grad)
        img.done[key] = tuple(waiting[r].push.digest for r in range(rec.push.world_size))
        while len(img.done) > self._keep_done:  # oldest first: steps are applied in order
            del img.done[next(iter(img.done))]
        img.applied, img.count = max(img.applied, key), img.count + 1
        self._unflushed += 1
        self._cond.notify_all()
        if self._unflushed >= self.flush_every and not self._replaying:
            self._flush()

    def _missing(self, key: StepKey) -> tuple[int, ...]:
        """The ranks whose push of pending step ``key`` has not arrived (none if not pending)."""
        waiting = self._pending.get(key)
        if not waiting:
            return ()
        world = next(iter(waiting.values())).push.world_size
        return tuple(sorted(set(range(world)) - set(waiting)))

    def _ack(self, key: StepKey, duplicate: bool) -> PushAck:
        return PushAck(duplicate=duplicate, applied=self._image.applied, pending_ranks=self._missing(key))

    def _flush(self) -> None:
        """Rewrites the image and cuts the log to the pushes of steps not yet applied."""
        self._generation += 1
        files.save_current(self.path, self._image, self._generation)
        self._log.rewrite(rec for waiting in self._pending.values() for rec in waiting.values())
        self._unflushed = 0

    # -- snapshots ----------------------------------------------------------------------------

    def snapshot(self, key: StepKey, timeout_s: float | None = None) -> bool:
        """Keeps the table's state at step ``key`` (once applied); True if it was written now,
        False if that snapshot existed. FailedPrecondition when the table is already past ``key``."""
        with self._cond:
            if key in files.snapshot_keys(self.path):
                return False
            self._wait(key, timeout_s)
            if self._image.applied != key:
                raise FailedPrecondition(
                    f"embedding {self.spec.name!r}: cannot snapshot {key}, the table is at {self._image.applied} "
                    "already; snapshot right after the step"
                )
            if self._unflushed:  # the image then holds step ``key``: the snapshot shares its files
                self._flush()
            files.link_image(files.current_dir(self.path), files.snapshot_dir(self.path, key))
            for old in files.snapshot_keys(self.path)[: -self.keep_snapshots]:
                shutil.rmtree(files.snapshot_dir(self.path, old), ignore_errors=True)
            return True

    def restore(self, key: StepKey | None) -> None:
        """Returns the table to its snapshot of step ``key`` (None: its seeded initial state),
        dropping every later step: pending pushes and the record of later applied ones, so that
        the steps can be pushed again. NotFound when there is no such snapshot."""
        with self._cond:
            if key is None or key == NO_STEP:
                image = self._initial()
            else:
                where = files.snapshot_dir(self.path, key)
                if not where.exists():
                    have = [str(k) for k in files.snapshot_keys(self.path)]
                    raise NotFound(f"embedding {self.spec.name!r} has no snapshot of {key}; it has {have or 'none'}")
                image = files.read_image(where)
            for later in [k for k in files.snapshot_keys(self.path) if k > image.applied]:
                shutil.rmtree(files.snapshot_dir(self.path, later), ignore_errors=True)
            self._image, self._pending = image, {}
            self._flush()
            self._cond.notify_all()

    def close(self) -> None:
        """Flushes the image if steps were applied since the last one, and closes the log."""
        with self._cond:
            if self._unflushed:
                self._flush()
            self._log.close()
