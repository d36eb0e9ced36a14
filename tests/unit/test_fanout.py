"""The one fan-out: grouping by owner, chunking, every request started before any is awaited,
merge in id order, and cancellation of the rest when one request fails."""

from __future__ import annotations

from concurrent.futures import Future
from dataclasses import dataclass, field
from typing import cast

import numpy as np
import pytest

from graphfeed.common.errors import Unavailable
from graphfeed.graph_store.fanout import Chunk, RowsRequest, fan_out_requests, fetch_rows
from graphfeed.graph_store.types import NodeDataInfo, PartitionSet, RowsInto

IDS = np.array([7, 1, 9, 2, 6, 3], dtype=np.int64)  # partition 0 owns [0, 5), partition 1 [5, 10)


@dataclass
class _Info:
    node_offsets: np.ndarray = field(default_factory=lambda: np.array([0, 5, 10], dtype=np.int64))
    node_data: dict = field(default_factory=lambda: {"feat": NodeDataInfo("feat", np.dtype(np.float32), (2,))})


@dataclass
class _Partitions:
    """Just what a fan-out reads from a partition set: who owns which id."""

    info: _Info = field(default_factory=_Info)
    num_partitions: int = 2
    destinations: list[list[int]] = field(default_factory=list)

    def read_node_data(self, p: int, name: str, ids: np.ndarray, into: RowsInto) -> Future:
        """Row of id v: (10 v, 10 v + 1)."""
        self.destinations.append(into.positions.tolist())
        return _done(into.place(np.stack([ids * 10, ids * 10 + 1], axis=1).astype(np.float32)))


def _partitions(fake: _Partitions | None = None) -> PartitionSet:
    """A :class:`_Partitions` where a fan-out wants a partition set (it reads no more than that)."""
    return cast(PartitionSet, fake or _Partitions())


class _Recorder:
    """``call(chunk)`` that records each chunk and hands back a future resolved only later."""

    def __init__(self) -> None:
        self.chunks: list[Chunk] = []
        self.futures: list[Future] = []

    def __call__(self, chunk: Chunk) -> Future:
        assert all(not f.done() for f in self.futures), "a request was awaited before all were started"
        self.chunks.append(chunk)
        self.futures.append(Future())
        return self.futures[-1]


def test_chunks_grouped_by_owner_all_started_then_merged() -> None:
    call = _Recorder()
    pending = fan_out_requests(_partitions(), IDS, call, max_ids_per_request=2)
    got = [(c.partition, c.ids.tolist(), c.positions.tolist(), c.first_position) for c in call.chunks]
    assert got == [(0, [1, 2], [1, 3], 0), (0, [3], [5], 2), (1, [7, 9], [0, 2], 0), (1, [6], [4], 2)]
    assert pending.order.tolist() == [1, 3, 5, 0, 2, 4]
    assert pending.bounds.tolist() == [0, 2, 3, 5, 6]
    for i, fut in enumerate(call.futures):
        fut.set_result(i)
    assert pending.results() == [0, 1, 2, 3]


def test_rows_come_back_in_id_order_with_bytes_per_partition() -> None:
    rows, received = fetch_rows(_partitions(), "feat", IDS, max_ids_per_request=2)
    np.testing.assert_array_equal(rows, np.stack([IDS * 10, IDS * 10 + 1], axis=1))
    assert received == {0: 3 * 8, 1: 3 * 8}


def test_rows_go_where_the_destination_says() -> None:
    fake = _Partitions()
    out = np.full((8, 2), -1, dtype=np.float32)
    at = np.array([7, 0, 6, 1, 5, 2])  # the i-th id's row goes to out[at[i]]
    got, _ = RowsRequest(_partitions(fake), "feat", IDS, 4, RowsInto(out, at)).wait()
    assert got is out and fake.destinations == [[0, 1, 2], [7, 6, 5]]
    np.testing.assert_array_equal(out[at], np.stack([IDS * 10, IDS * 10 + 1], axis=1))
    assert (out[[3, 4]] == -1).all()


def test_a_failed_request_cancels_the_rest_and_is_reraised() -> None:
    call = _Recorder()
    pending = fan_out_requests(_partitions(), IDS, call, max_ids_per_request=2)
    err = Unavailable("graph-store 0 is down")
    call.futures[0].set_exception(err)
    with pytest.raises(Unavailable) as info:
        pending.results()
    assert info.value is err
    assert all(f.cancelled() for f in call.futures[1:])


def test_a_request_that_fails_to_start_cancels_those_started() -> None:
    call = _Recorder()

    def start(chunk: Chunk) -> Future:
        if chunk.partition == 1:
            raise Unavailable("no channel to graph-store 1")
        return call(chunk)

    with pytest.raises(Unavailable, match="graph-store 1"):
        fan_out_requests(_partitions(), IDS, start, max_ids_per_request=2)
    assert len(call.futures) == 2 and all(f.cancelled() for f in call.futures)


def test_max_ids_per_request_must_be_positive() -> None:
    with pytest.raises(ValueError, match="max_ids_per_request"):
        fan_out_requests(_partitions(), IDS, _Recorder(), max_ids_per_request=0)


def _done(value: object) -> Future:
    fut: Future = Future()
    fut.set_result(value)
    return fut
