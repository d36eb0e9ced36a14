"""A :class:`NeighborSource` over graphfeed's temporal graph-store API (TEMPORAL_SPEC.md).

``StoreNeighbors`` takes a :class:`~graphfeed.graph_store.temporal.client.TemporalStoreView`
(the routing client over a partition set: graph-stores over gRPC, or in-process stores through a
``LocalPartitionSet``): ``append(batch_id, src, dst, t, efeat)``, ``version()`` and
``sample(nodes, times, fanout, strategy=..., as_of=...)``. It sends each event in both directions
in the in-process reference's arrival order, so both sources answer the same samples and the
same model trains to the same weights.

"previous-batches" visibility (``before_event``) reads the stores as they were when that event's
batch was about to be appended: the version after every append is kept (per partition, the edges
appended so far, from the acks), and the sample asks for that version. A restarted job re-sends
its appends, gets the same acks back and so the same versions.
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

    def version(self) -> Any:
        """The graph as the acknowledged appends left it, for ``sample(as_of=...)``."""
        ...

    def sample(
        self, nodes: np.ndarray, times: np.ndarray, fanout: int, strategy: str = "recent", *, as_of: Any = None
    ) -> Any:
        """A TemporalSample-shaped answer (offsets, nbr, ts, eid, efeat); ``as_of``: of that version."""
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
        self._versions: dict[int, Any] = {0: graph.version()}  # stream position -> the stores then

    def append(self, src: np.ndarray, dst: np.ndarray, t: np.ndarray, efeat: np.ndarray | None) -> None:
        """Sends ``src -> dst`` then ``dst -> src`` of every event, as one batch."""
        batch_id = f"{self.job}:{self.position}:{len(src)}"
        both = None if efeat is None else np.concatenate([efeat, efeat])
        self.graph.append(
            batch_id, np.concatenate([src, dst]), np.concatenate([dst, src]), np.concatenate([t, t]), both
        )
        self.position += len(src)
        self._versions[self.position] = self.graph.version()

    def sample(
        self, nodes: np.ndarray, times: np.ndarray, fanout: int, before_event: int | None = None
    ) -> TemporalSample:
        """The stores' "recent" temporal sample, strictly before each time; with ``before_event`` (a
        position between two of this source's appends) of the stores as they were then."""
        as_of = None
        if before_event is not None:
            if before_event not in self._versions:
                raise InvalidArgument(
                    f"before_event {before_event} is not a position between two appends of this source "
                    f"(appended so far: {self.position} events)"
                )
            as_of = self._versions[before_event]
        s = self.graph.sample(nodes, times, fanout, strategy="recent", as_of=as_of)
        return TemporalSample(offsets=s.offsets, nbr=s.nbr, ts=s.ts, eid=s.eid, efeat=s.efeat)
