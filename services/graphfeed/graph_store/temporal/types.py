"""The values a :class:`~graphfeed.graph_store.temporal.store.TemporalStore` returns (re-exported there)."""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np

from graphfeed.common.errors import InvalidArgument


class OutOfOrder(InvalidArgument):
    """An appended edge is older than the last edge already stored for its row."""


@dataclass(frozen=True)
class AppendAck:
    """The answer to an append (also to a retry of it, with ``duplicate=True``)."""

    first_eid: int  # eid of the batch's first stored edge (in stored (dst, t) order)
    num_edges: int
    duplicate: bool  # True when batch_id had already been acknowledged (nothing applied)
    visible_seq: int  # batches applied after this one (monotone); sampling sees it from now on
    appended: int  # edges appended to the partition up to this batch: a sample's ``as_of_appended``


@dataclass(frozen=True, kw_only=True)
class EdgeBatch:
    """Edges ``src -> dst`` at times ``t`` for one partition (every ``dst`` owned by it), sent
    once per ``batch_id``: a retry sends the same id with the same edges."""

    batch_id: str
    src: np.ndarray  # int64 [n]
    dst: np.ndarray  # int64 [n]
    t: np.ndarray  # int64 [n]
    efeat: np.ndarray | None = None  # float32 [n, D]


@dataclass(frozen=True, kw_only=True)
class TemporalQuery:
    """One hop of temporal sampling for roots owned by one partition; the fields are the
    arguments of :meth:`graphfeed.graph_store.temporal.store.TemporalStore.sample`."""

    nodes: np.ndarray  # int64 [N]
    times: np.ndarray  # int64 [N]
    fanout: int
    strategy: str = "recent"
    seed: int = 0
    first_position: int = 0
    with_features: bool = True
    as_of_appended: int | None = None  # only ingest edges and the first N appended ones (None: all)


@dataclass(frozen=True)
class TemporalSample:
    """Per root ``i``, edges ``[offsets[i], offsets[i+1])`` in ascending time."""

    offsets: np.ndarray  # int64 [N+1]
    nbr: np.ndarray  # int64 [S] neighbour gids
    ts: np.ndarray  # int64 [S]
    eid: np.ndarray  # int64 [S]
    efeat: np.ndarray | None  # float32 [S, D], None when D == 0 or not asked


@dataclass(frozen=True)
class TemporalInfo:
    """Size and state of the temporal graph of one partition."""

    num_edges: int  # base + appended edges
    num_appended: int  # edges appended since ingest (the next edge seq)
    num_rows: int  # owned ingest nodes + nodes that arrived by append
    num_blocks: int  # append blocks not compacted yet
    min_t: int | None  # None when there is no edge
    max_t: int | None
    edge_feat_dim: int
    seq: int  # batches acknowledged
    log_bytes: int = 0  # bytes of edge data written to the log by this process
    compactions: int = 0  # background compactions published by this process
