"""What a temporal store is opened from: the partition's ingest graph as a time-sorted base CSR,
then the newest snapshot on disk and the logged batches after it."""

from __future__ import annotations

import logging
from collections.abc import Callable
from pathlib import Path

import numpy as np

from graphfeed.common.errors import FailedPrecondition
from graphfeed.common.partition import PartitionReader
from graphfeed.graph_store.temporal import index as ti
from graphfeed.graph_store.temporal import snapshot as temporal_snapshot
from graphfeed.graph_store.temporal.append_log import LoggedBatch, TemporalLog

log = logging.getLogger(__name__)


def partition_base(
    reader_or_part_dir: PartitionReader | Path | str, num_partitions: int | None, partition_id: int | None
) -> tuple[ti.Csr, ti.Layout]:
    """The partition's ingest edges as a time-sorted CSR, and what the partition owns.

    Args:
        reader_or_part_dir: an opened :class:`PartitionReader` (only its memory-mapped topology
            is used) or a partition directory. Ingest-time edges without ``edge_ts.npy`` count as
            edges at ``t = 0``.
        num_partitions, partition_id: checked against the partition's manifest when given.

    Raises:
        FailedPrecondition: the partition is not the one asked for.
    """
    if isinstance(reader_or_part_dir, PartitionReader):
        reader, owned = reader_or_part_dir, False
    else:
        reader, owned = PartitionReader(Path(reader_or_part_dir)), True
    try:
        m = reader.manifest
        layout = ti.Layout(reader.partition_id, m.num_partitions, m.num_nodes, reader.start, reader.stop)
        asked = (num_partitions, partition_id)
        if asked != (None, None) and asked != (m.num_partitions, reader.partition_id):
            raise FailedPrecondition(
                f"{reader.path} is partition {reader.partition_id} of {m.num_partitions}, "
                f"not {partition_id} of {num_partitions}"
            )
        ts = reader.edge_ts if reader.edge_ts is not None else np.zeros(len(reader.indices), dtype=np.int64)
        base = ti.time_sorted_base(
            reader.indptr, nbr=reader.indices, ts=ts, eid=reader.edge_ids, feat=getattr(reader, "edge_feat", None)
        )
    finally:
        if owned:
            reader.close()
    return base, layout


def log_layout(layout: ti.Layout, base: ti.Csr) -> dict[str, int]:
    """What an append log records of the partition it was written for (a log of another is refused)."""
    return {
        "partition_id": layout.partition_id,
        "num_partitions": layout.num_partitions,
        "edge_feat_dim": base.feat.shape[1],
    }


def recover(
    append_log: TemporalLog, start: ti.Snapshot, apply: Callable[[ti.Snapshot, LoggedBatch], ti.Snapshot]
) -> tuple[ti.Snapshot, int]:
    """The newest valid snapshot of ``append_log`` (loaded onto ``start``'s base), then every later
    batch applied in order by ``apply``.

    Returns:
        The recovered snapshot and the edges appended when the loaded snapshot was taken (0
        without one).

    Raises:
        FailedPrecondition: a snapshot beyond the log, a batch out of sequence, or fewer batches
            found than were acknowledged (a damaged log).
    """
    latest, snapshot_at = start, 0
    loaded = temporal_snapshot.load_newest(append_log.path / "snapshots", append_log.layout, start)
    if loaded is not None:
        snap, path = loaded
        if snap.seq > append_log.seq():
            raise FailedPrecondition(
                f"snapshot {path} holds batch {snap.seq} but the log ends at {append_log.seq()}; damaged"
            )
        latest, snapshot_at = snap, snap.num_appended
        temporal_snapshot.remove_others(path.parent, keep=path)  # leftovers of a crash
    count = 0
    for batch in append_log.batches(latest.seq + 1):
        if batch.seq != latest.seq + 1 or batch.first_edge_seq != latest.num_appended:
            raise FailedPrecondition(f"append log: batch {batch.seq} follows batch {latest.seq}; the log is damaged")
        latest = apply(latest, batch)
        count += 1
    if latest.seq != append_log.seq():  # e.g. a damaged snapshot that covered every batch left
        raise FailedPrecondition(
            f"append log: {append_log.seq()} batches were acknowledged, {latest.seq} found; the log is damaged"
        )
    if count:
        log.info(
            "partition %d: replayed %d appended batches (%d edges) from %s",
            append_log.layout["partition_id"],
            count,
            latest.num_appended,
            append_log.path,
        )
    return latest, snapshot_at
