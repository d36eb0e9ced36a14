"""A :class:`NeighborSource` over graphfeed's temporal graph-store API (TEMPORAL_SPEC.md).

``StoreNeighbors`` takes anything with the spec's ``append(batch_id, src, dst, t, efeat)`` and
``sample(nodes, times, fanout, strategy=...)``: a ``TemporalStore`` (one partition, in process)
or the routing client (owner fan-out over gRPC). It sends each event in both directions in the
in-process reference's arrival order, so both sources answer the same samples and the same
model trains to the same weights.
"""

from __future__ import annotations

from typing import Any, Protocol

import numpy as np

from graphfeed.common.errors import InvalidArgument
from graphfeed.trainer.temporal.neighbors import TemporalSample


class TemporalGraph(Protocol):
    """The part of the temporal store / routing client API this source uses."""

    def append(
        self, batch_id: str, src: np.ndarray, dst: np.ndarray, t: np.ndarray, efeat: np.ndarray | None = None
    ) -> Any:
        """Durable, idempotent per ``batch_id``; visible to ``sample`` once it returns."""
        ...

    def sample(self, nodes: np.ndarray, times: np.ndarray, fanout: int, strategy: str = "recent") -> Any:
        """A TemporalSample-shaped answer (offsets, nbr, ts, eid, efeat)."""
        ...


class StoreNeighbors:
    """Appends and samples through a graphfeed temporal graph.

    Batch ids are ``"<job>:<first event>:<count>"`` from the number of events appended through
    this object, so a restarted trainer that replays its appends from the start (what
    :class:`~graphfeed.trainer.temporal.loop.TGNTrainer` does on resume) re-sends batches the
    store acknowledges as duplicates instead of storing edges twice.

    Args:
        graph: the store or routing client.
        job: a name unique to the training job (its batch ids must not collide with another's).
    """

    def __init__(self, graph: TemporalGraph, job: str) -> None:
        self.graph, self.job, self.position = graph, job, 0

    def append(self, src: np.ndarray, dst: np.ndarray, t: np.ndarray, efeat: np.ndarray | None) -> None:
        """Sends ``src -> dst`` then ``dst -> src`` of every event, as one batch."""
        batch_id = f"{self.job}:{self.position}:{len(src)}"
        both = None if efeat is None else np.concatenate([efeat, efeat])
        self.graph.append(
            batch_id, np.concatenate([src, dst]), np.concatenate([dst, src]), np.concatenate([t, t]), both
        )
        self.position += len(src)

    def sample(
        self, nodes: np.ndarray, times: np.ndarray, fanout: int, before_event: int | None = None
    ) -> TemporalSample:
        """The store's "recent" temporal sample (strictly before each time: "same-batch" only)."""
        if before_event is not None:
            raise InvalidArgument(
                "visibility previous-batches needs the in-process neighbour source: a graph-store "
                "sample selects by time only; use --visibility same-batch with --graph-stores"
            )
        s = self.graph.sample(nodes, times, fanout, strategy="recent")
        return TemporalSample(offsets=s.offsets, nbr=s.nbr, ts=s.ts, eid=s.eid, efeat=s.efeat)
