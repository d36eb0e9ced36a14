"""The trainable embedding tables of one partition (:class:`EmbeddingStore`), without gRPC.

A table holds one learnable float32 row per node of one node type that the partition owns
(the rows of other partitions' nodes live there: tables are owner-partitioned like node data).
Tables live in ``<dir>/<digest of the name>/`` (``spec.json``, images, snapshots, push log),
``<dir>`` being ``<partition dir>/embeddings`` by default, and are reopened with the store.

They are not node data: :meth:`GraphStore.info` does not list them, so no loader serves or
caches their rows (they change every step).
"""

from __future__ import annotations

import hashlib
import json
import logging
import os
import threading
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path

import numpy as np

from graphfeed.common.errors import FailedPrecondition, InvalidArgument, NotFound, ResourceExhausted, name_ids
from graphfeed.common.limits import MAX_WORLD_SIZE
from graphfeed.common.schema import GraphSchema
from graphfeed.graph_store.embeddings.table import EmbeddingTable, push_digest
from graphfeed.graph_store.embeddings.types import EmbeddingSpec, PushAck, StepKey, StepPush

log = logging.getLogger(__name__)
SPEC = "spec.json"


@dataclass(frozen=True)
class TableInfo:
    """A table as created: its spec, the global ids ``[lo, hi)`` it holds here, its version."""

    spec: EmbeddingSpec
    lo: int
    hi: int
    applied: StepKey
    created: bool = False


class EmbeddingStore:
    """Every embedding table of partition ``partition_id`` of a graph of ``schema``.

    Args:
        root: the tables' directory (created on first use).
        max_ids_per_request: most ids in one pull or push (ResourceExhausted beyond).
        chunk_bytes: most bytes of rows per chunk of :meth:`iter_pull` (at least one row).
        flush_every: applied steps between rewrites of a table's image.
    """

    def __init__(
        self,
        root: Path,
        schema: GraphSchema,
        partition_id: int,
        max_ids_per_request: int,
        chunk_bytes: int,
        flush_every: int = 64,
    ) -> None:
        self.root, self.schema, self.partition_id = Path(root), schema, partition_id
        self.max_ids, self.chunk_bytes, self.flush_every = max_ids_per_request, chunk_bytes, flush_every
        self._lock = threading.Lock()
        self._tables: dict[str, EmbeddingTable] = {}
        for spec_file in sorted(self.root.glob(f"*/{SPEC}")) if self.root.exists() else []:
            spec = EmbeddingSpec(**json.loads(spec_file.read_text()))
            try:
                self._tables[spec.name] = self._open(spec)
            except (InvalidArgument, FailedPrecondition) as exc:  # another graph's table: kept on disk, not served
                log.warning("partition %d: embedding table %r not reopened: %s", partition_id, spec.name, exc)
        if self._tables:
            log.info("partition %d: embedding tables %s reopened", partition_id, sorted(self._tables))

    def _dir(self, name: str) -> Path:
        return self.root / hashlib.blake2b(name.encode(), digest_size=10).hexdigest()

    def _open(self, spec: EmbeddingSpec) -> EmbeddingTable:
        lo, hi = self.schema.owned_range(self.partition_id, spec.ntype)
        return EmbeddingTable(self._dir(spec.name), spec, lo, hi, self.flush_every)

    @property
    def names(self) -> list[str]:
        return sorted(self._tables)

    def table(self, name: str) -> EmbeddingTable:
        """The table ``name``; NotFound naming the tables there are."""
        table = self._tables.get(name)
        if table is None:
            raise NotFound(f"embedding table {name!r} does not exist here; create it first (have: {self.names})")
        return table

    def create(self, spec: EmbeddingSpec) -> TableInfo:
        """Creates table ``spec`` (rows seeded, optimizer state zero), or finds it: idempotent
        for the same spec; FailedPrecondition for a table of that name with another spec."""
        spec.check()
        self.schema.ntype_id(spec.ntype)  # InvalidArgument for an unknown type
        with self._lock:
            table = self._tables.get(spec.name)
            if table is not None:
                if table.spec != spec:
                    theirs, ours = table.spec.to_dict(), spec.to_dict()
                    diff = {k: (theirs[k], ours[k]) for k in ours if theirs[k] != ours[k]}
                    raise FailedPrecondition(
                        f"embedding table {spec.name!r} exists with other parameters (existing, requested): {diff}"
                    )
                return self.describe(spec.name)
            d = self._dir(spec.name)
            d.mkdir(parents=True, exist_ok=True)
            tmp = d / (SPEC + ".tmp")
            tmp.write_text(json.dumps(spec.to_dict()))
            os.replace(tmp, d / SPEC)  # the table exists once its spec does; its image comes next
            self._tables[spec.name] = table = self._open(spec)
        log.info(
            "partition %d: embedding table %r created (%d rows)", self.partition_id, spec.name, table.hi - table.lo
        )
        return TableInfo(spec, table.lo, table.hi, table.applied, created=True)

    def describe(self, name: str) -> TableInfo:
        t = self.table(name)
        return TableInfo(t.spec, t.lo, t.hi, t.applied)

    def _rows(self, table: EmbeddingTable, ids: np.ndarray) -> np.ndarray:
        """Local rows of owned ``ids`` of ``table``'s type (InvalidArgument, ResourceExhausted, NotFound)."""
        arr = np.asarray(ids)
        if arr.ndim != 1 or (arr.size and arr.dtype.kind not in "iu"):
            raise InvalidArgument(f"ids must be 1-D integer global ids, got {arr.dtype} {list(arr.shape)}")
        if arr.size > self.max_ids:
            raise ResourceExhausted(f"{arr.size} ids in one request exceed the limit of {self.max_ids}; split it")
        gids = arr.astype(np.int64, copy=False)
        bad = (gids < table.lo) | (gids >= table.hi)
        if bad.any():
            raise NotFound(
                f"ids {name_ids(gids[bad])} are not {table.spec.ntype} nodes owned by partition {self.partition_id} "
                f"(those are [{table.lo}, {table.hi})), so embedding {table.spec.name!r} has no row for them"
            )
        return gids - table.lo

    def pull(
        self, name: str, ids: np.ndarray, after: StepKey | None = None, timeout_s: float | None = None
    ) -> np.ndarray:
        """Rows of ``ids`` (owned here), float32 ``[n, dim]``, once step ``after`` is applied."""
        table = self.table(name)
        return table.pull(self._rows(table, ids), after, timeout_s)

    def iter_pull(
        self, name: str, ids: np.ndarray, after: StepKey | None = None, timeout_s: float | None = None
    ) -> Iterator[tuple[int, np.ndarray]]:
        """:meth:`pull` in ``(start, rows)`` chunks of at most ``chunk_bytes`` (one chunk for no ids)."""
        rows = self.pull(name, ids, after, timeout_s)
        per = max(1, self.chunk_bytes // max(1, rows.shape[1] * 4))
        return iter([(s, rows[s : s + per]) for s in range(0, max(1, len(rows)), per)])

    def push(
        self, name: str, job: str, key: StepKey, rank: int, world_size: int, ids: np.ndarray, grads: np.ndarray
    ) -> PushAck:
        """Rank ``rank`` of job ``job``'s gradients of step ``key`` for ``ids`` (owned here;
        may be empty): float32 ``[len(ids), dim]``. Durable when this returns; a replay is taken once."""
        table = self.table(name)
        if job != table.spec.job:
            raise FailedPrecondition(f"embedding {name!r} belongs to job {table.spec.job!r}, not {job!r}")
        rows = self._rows(table, ids)
        g = np.asarray(grads)
        if g.dtype != np.float32 or g.shape != (len(rows), table.spec.dim):
            raise InvalidArgument(
                f"embedding {name!r}: grads must be float32 [{len(rows)}, {table.spec.dim}] (one row per id), "
                f"got {g.dtype} {list(g.shape)}"
            )
        if not 1 <= world_size <= MAX_WORLD_SIZE:
            raise InvalidArgument(f"world_size must be in [1, {MAX_WORLD_SIZE}], got {world_size}")
        push = StepPush(key, int(rank), int(world_size), push_digest(ids, g))
        return table.push(push, rows, g)

    def snapshot(self, name: str, key: StepKey, timeout_s: float | None = None) -> bool:
        """See :meth:`EmbeddingTable.snapshot`."""
        return self.table(name).snapshot(key, timeout_s)

    def restore(self, name: str, key: StepKey | None) -> None:
        """See :meth:`EmbeddingTable.restore`."""
        self.table(name).restore(key)
        log.info("partition %d: embedding table %r restored to %s", self.partition_id, name, key or "its initial rows")

    def close(self) -> None:
        with self._lock:
            for t in self._tables.values():
                t.close()
            self._tables = {}
