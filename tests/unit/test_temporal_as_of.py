"""Sampling the temporal graph as it was after an append (``as_of_appended``), and the TGN job's
"previous-batches" visibility through graph-stores built on it: the same samples as a store that
only ever got those appends (compactions in between, ingest edges always seen), and the same
weights as the in-process neighbour source over two epochs."""

from __future__ import annotations

from pathlib import Path

import numpy as np
import pytest
import torch

from graphfeed.common.errors import InvalidArgument
from graphfeed.graph_store.partitions import LocalPartitionSet
from graphfeed.graph_store.store import GraphStore
from graphfeed.graph_store.temporal.client import TemporalClient, TemporalStoreView
from graphfeed.graph_store.temporal.store import TemporalStore
from graphfeed.temporal_run import empty_partitions
from graphfeed.trainer.temporal.config import TGNConfig
from graphfeed.trainer.temporal.events import load_events
from graphfeed.trainer.temporal.loop import TGNTrainer
from graphfeed.trainer.temporal.store_source import StoreNeighbors
from tests.unit.temporal_graphs import write_temporal


def batches(n: int = 6, size: int = 30) -> list[tuple[np.ndarray, np.ndarray, np.ndarray]]:
    """Appends for part 0 (nodes [0, 20)), newer than every ingest edge, with equal times in each."""
    g = np.random.default_rng(5)
    return [(g.integers(0, 40, size), g.integers(0, 20, size), np.full(size, 100 + 10 * i)) for i in range(n)]


def sample(s: TemporalStore, as_of: int | None, fanout: int, strategy: str) -> tuple[list[int], ...]:
    nodes = np.repeat(np.arange(20), 3)
    times = np.tile(np.array([65, 125, 1000]), 20)
    out = s.sample(nodes, times, fanout, strategy, 11, 0, False, as_of)
    return tuple(a.tolist() for a in (out.offsets, out.nbr, out.ts, out.eid))


@pytest.mark.parametrize(("fanout", "strategy"), [(-1, "recent"), (3, "recent"), (4, "uniform")])
def test_a_sample_as_of_an_append_is_that_of_a_store_that_stopped_there(
    tmp_path: Path, fanout: int, strategy: str
) -> None:
    part = write_temporal(tmp_path / "g", num_partitions=2)[0] / "part-00000"
    full = TemporalStore.open(part, tmp_path / "full", max_blocks=2)  # compactions between the appends
    acks = [full.append(f"b{i}", *b) for i, b in enumerate(batches())]
    assert [a.appended for a in acks] == [30 * (i + 1) for i in range(6)]
    for k in range(len(acks) + 1):
        then = TemporalStore.open(part, tmp_path / f"then-{k}")
        for i, b in enumerate(batches()[:k]):
            then.append(f"b{i}", *b)
        as_of = acks[k - 1].appended if k else 0
        assert sample(full, as_of, fanout, strategy) == sample(then, None, fanout, strategy), k
        then.close()
    assert sample(full, None, fanout, strategy) == sample(full, acks[-1].appended, fanout, strategy)
    with pytest.raises(InvalidArgument, match="as_of_appended"):
        full.sample(np.array([1]), np.array([5]), 1, "recent", 0, 0, False, -1)
    full.close()


def stores_view(events: object, root: Path, parts: int = 2) -> tuple[TemporalClient, list[GraphStore]]:
    empty_partitions(events, root, parts)  # type: ignore[arg-type]
    stores = [GraphStore.open(root / f"part-{p:05d}", append_dir=root / f"log-{p}") for p in range(parts)]
    return TemporalClient(LocalPartitionSet(stores)), stores


def test_previous_batches_through_graph_stores_trains_as_in_process(tmp_path: Path) -> None:
    """Epoch 2 is the test: the stores then hold the whole stream, and only the versions kept
    from the acks hide the batches after the one being scored."""
    events = load_events("collegemsg").head(300)
    cfg = TGNConfig(
        epochs=2, batch_size=30, memory_dim=8, time_dim=8, embed_dim=8, mrr_negatives=2, visibility="previous-batches"
    )
    threads = torch.get_num_threads()
    torch.set_num_threads(1)
    try:
        local = TGNTrainer(events, cfg, report=lambda _: None)
        local.run()
        client, _stores = stores_view(events, tmp_path / "g")
        source = StoreNeighbors(TemporalStoreView(client), "job")
        remote = TGNTrainer(events, cfg, source=source, report=lambda _: None)
        remote.run()
    finally:
        torch.set_num_threads(threads)
    assert repr(local.result.chunks) == repr(remote.result.chunks)
    for k, v in local.model.state_dict().items():
        assert torch.equal(v, remote.model.state_dict()[k]), k
    with pytest.raises(InvalidArgument, match="not a position between two appends"):
        source.sample(np.array([1]), np.array([10**12]), 3, before_event=7)
    client.close()
