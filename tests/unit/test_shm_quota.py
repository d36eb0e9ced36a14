"""Shared memory per client: what one client holds unclaimed is bounded, the directory keeps room
for everyone, and a response refused shared memory (or finding no room) travels inline whole."""

from __future__ import annotations

import os
from collections.abc import Iterator
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path

import numpy as np
import pytest
from prometheus_client import CollectorRegistry

from graphfeed.common import bulk, codec, shm
from graphfeed.common.errors import ResourceExhausted
from graphfeed.common.placement import HostPlacement
from graphfeed.common.shm.placement import ShmPlaced, ShmPlacement
from graphfeed.common.shm.quota import FULL, QUOTA
from graphfeed.common.transport import ServerTransport
from graphfeed.common.v1 import tensor_pb2
from graphfeed.graph_store.metrics import GraphStoreMetrics
from graphfeed.graph_store.servicer import GraphStoreServicer
from graphfeed.graph_store.store import GraphStore
from graphfeed.graph_store.v1.graph_store_pb2 import GetNodeDataRequest, GetNodeDataResponse, SampleNeighborsResponse
from graphfeed.loader.servicer import StreamSlots
from tests.unit.test_transport import _Context


class _Statvfs:
    """``os.statvfs`` of a directory with ``size`` bytes, ``free`` of them free (1-byte blocks)."""

    def __init__(self, size: int, free: int) -> None:
        self.size, self.free = size, free

    def __call__(self, _path: Path) -> os.statvfs_result:
        return os.statvfs_result((1, 1, self.size, self.free, self.free, 0, 0, 0, 0, 255))


def _sent(registry: shm.SegmentRegistry, directory: Path, client: str, nbytes: int) -> Path:
    """A one-off segment of ``nbytes`` sent to ``client`` and not claimed yet."""
    arena = shm.Arena(directory, registry, client=client)
    arena.reserve((nbytes,), np.uint8)
    seg = arena.finish()
    assert seg is not None
    seg.close()
    return seg.path


def test_the_registry_counts_what_each_client_holds_until_claimed(tmp_path: Path) -> None:
    registry = shm.SegmentRegistry(ttl_s=60)
    a1, _, b = (
        _sent(registry, tmp_path, "a", 100),
        _sent(registry, tmp_path, "a", 50),
        _sent(registry, tmp_path, "b", 7),
    )
    assert (
        registry.unclaimed("a") == (2, 150) and registry.unclaimed("b") == (1, 7) and registry.unclaimed("c") == (0, 0)
    )
    a1.unlink()  # claimed by its reader
    assert registry.unclaimed("a") == (1, 50)
    registry.close()  # what is left is removed, and no longer counted
    assert registry.unclaimed("a") == (0, 0) and not b.exists()


def test_a_client_over_its_quota_is_refused_until_it_claims(tmp_path: Path) -> None:
    registry = shm.SegmentRegistry()
    refusals: list[str] = []
    quota = shm.ShmQuota(
        tmp_path,
        registry,
        client_bytes=1000,
        client_segments=3,
        on_decline=refusals.append,
        statvfs=_Statvfs(1 << 30, 1 << 30),
    )
    assert quota.decline("a", 5000) is None  # nothing unclaimed: one message of any size
    first = _sent(registry, tmp_path, "a", 900)
    assert quota.decline("a", 200) == QUOTA and quota.decline("a") is None  # 900 + 200 > 1000; an unsized one fits
    assert quota.decline("b", 200) is None  # another client is not held to a's quota
    first.unlink()
    assert quota.decline("a", 200) is None
    for _ in range(3):
        _sent(registry, tmp_path, "a", 1)
    assert quota.decline("a") == QUOTA  # the segment count bounds tiny unclaimed messages too
    assert refusals == [QUOTA, QUOTA]


def test_the_directory_keeps_room_unless_a_pool_file_takes_the_message(tmp_path: Path) -> None:
    registry = shm.SegmentRegistry()
    fs = _Statvfs(size=1600 << 20, free=200 << 20)
    quota = shm.ShmQuota(tmp_path, registry, statvfs=fs)
    assert quota.reserve_bytes == 64 << 20 and quota.client_bytes == 400 << 20  # the defaults, from the size
    assert quota.decline("a", 100 << 20) is None
    assert quota.decline("a", 150 << 20) == FULL  # would leave 50 MiB, under the reserve
    pool = shm.SegmentPool(tmp_path)
    seg = pool.acquire(200 << 10)
    fs.free = 0
    assert quota.decline("a", 100 << 10, pool) == FULL  # the pool's file is still out with its reader
    os.rename(seg.path, shm.files.suffixed(seg.path, shm.FREE_SUFFIX))  # handed back
    assert quota.decline("a", 100 << 10, pool) is None and quota.decline("a", 1 << 30, pool) == FULL
    pool.close()


@pytest.fixture
def small(tmp_path: Path) -> Iterator[tuple[ServerTransport, CollectorRegistry]]:
    metrics = CollectorRegistry()
    transport = ServerTransport(tmp_path, "TestService", metrics, client_quota_bytes=64)
    yield transport, metrics
    transport.close()


def _declined(metrics: CollectorRegistry, reason: str) -> float:
    value = metrics.get_sample_value("graphfeed_rpc_shm_declined_total", {"service": "TestService", "reason": reason})
    return value or 0.0


def test_a_response_over_the_quota_goes_inline(small, tmp_path: Path) -> None:  # noqa: ANN001
    transport, metrics = small
    offer = shm.ShmOffer.create(tmp_path)
    assert offer is not None
    context = _Context(offer.metadata())
    with transport.response(context, "M") as r:
        held = r.encode(np.arange(100), tensor_pb2.Tensor())  # 800 bytes > 64: allowed, nothing was unclaimed
    assert r.shared and held.WhichOneof("payload") == "shm"
    with transport.response(context, "M") as r:
        second = r.encode(np.arange(3), tensor_pb2.Tensor())
    assert not r.shared and second.WhichOneof("payload") == "bulk" and _declined(metrics, QUOTA) == 1
    codec.decode(held, segments=shm.SegmentReader(tmp_path))  # the client claims the first
    with transport.response(context, "M") as r:
        r.encode(np.arange(3), tensor_pb2.Tensor())
    assert r.shared
    offer.close()


def test_a_response_that_finds_no_room_goes_inline_whole(
    small: tuple[ServerTransport, CollectorRegistry], tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    transport, metrics = small
    offer = shm.ShmOffer.create(tmp_path)
    assert offer is not None

    def no_room(self: shm.SegmentPool, nbytes: int, name: str | None = None) -> shm.Segment:
        raise ResourceExhausted(f"no room for a {nbytes}-byte segment in {self.directory}")

    monkeypatch.setattr(shm.SegmentPool, "acquire", no_room)
    resp = SampleNeighborsResponse()
    with transport.response(_Context(offer.metadata()), "M") as r:
        r.encode(np.arange(5), resp.src)  # put in the arena: re-encoded inline when it finds no room
        (edges,) = r.empty_many([(4,)], np.int64)  # the arena is finished here, and fails
        edges[:] = [7, 8, 9, 10]
        r.encode(edges, resp.edge_ids)
    assert not r.shared and _declined(metrics, FULL) == 1
    rec = bulk.parse(SampleNeighborsResponse, bulk.serializer(None)(r.framed(resp)))
    assert codec.decode(rec.message.src, bulk=rec.bulk).tolist() == list(range(5))
    assert codec.decode(rec.message.edge_ids, bulk=rec.bulk).tolist() == [7, 8, 9, 10]
    offer.close()


def test_node_data_refused_shared_memory_is_answered_in_bounded_chunks(
    arith_root: Path, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """When the segment for a GetNodeData answer is refused, the rows go inline in the store's
    chunks, never gathered whole into one array and one message (issue 28: 150k Cora ids made one
    860 MB message and a 2.8 GB peak)."""
    store = GraphStore.open(arith_root / "part-00000", chunk_bytes=64)  # 4 rows of 4 float32 per chunk
    registry = CollectorRegistry()
    transport = ServerTransport(tmp_path, "GraphStoreService", registry)
    servicer = GraphStoreServicer(store, GraphStoreMetrics.create(registry), transport)
    offer = shm.ShmOffer.create(tmp_path)
    assert offer is not None

    def no_room(self: shm.SegmentPool, nbytes: int, name: str | None = None) -> shm.Segment:
        raise ResourceExhausted(f"no room for a {nbytes}-byte segment in {self.directory}")

    monkeypatch.setattr(shm.SegmentPool, "acquire", no_room)
    ids = np.arange(store.start, store.stop, dtype=np.int64)
    request = GetNodeDataRequest(name="feat")
    codec.encode(ids, request.ids)
    answers = [
        bulk.parse(GetNodeDataResponse, bulk.serializer(None)(m))
        for m in servicer.GetNodeData(request, _Context(offer.metadata()))
    ]
    rows = [codec.decode(a.message.rows, bulk=a.bulk) for a in answers]
    assert len(answers) == -(-len(ids) // 4) and all(len(r) <= 4 for r in rows)
    assert np.array_equal(np.concatenate(rows), store.get_node_data("feat", ids))
    assert [int(a.message.start) for a in answers] == list(range(0, len(ids), 4))
    offer.close()
    transport.close()
    store.close()


def test_the_stream_placement_declines_a_client_over_its_quota(tmp_path: Path) -> None:
    registry = shm.SegmentRegistry()
    quota = shm.ShmQuota(tmp_path, registry, client_bytes=1000, statvfs=_Statvfs(1 << 30, 1 << 30))
    placement = ShmPlacement(tmp_path, registry, object(), quota, "trainer", HostPlacement())
    first = placement.place((100,), np.dtype(np.float32))  # 400 bytes
    assert isinstance(first, ShmPlaced) and first.segment is not None and first.region is not None
    assert registry.unclaimed("trainer") == (1, 400) and not first.declined
    second = placement.place((200,), np.dtype(np.float32))  # 400 + 800 > 1000: the minibatch goes inline
    assert second.declined and second.region is None and second.array.shape == (200,)
    first.segment.path.unlink()  # claimed
    assert placement.place((200,), np.dtype(np.float32)).region is not None


def test_stream_slots_bound_each_client_and_the_loader() -> None:
    slots = StreamSlots(total=3, per_client=2)
    with slots.hold("a"), slots.hold("a"):
        with pytest.raises(ResourceExhausted, match="already has 2 minibatch streams open"), slots.hold("a"):
            pass
        with slots.hold("b"), pytest.raises(ResourceExhausted, match="has 3 minibatch streams open"), slots.hold("c"):
            pass
    with slots.hold("a"), slots.hold("a"):  # released when the streams ended
        pass


def test_concurrent_messages_to_one_client_cannot_all_pass_the_check(tmp_path: Path) -> None:
    registry = shm.SegmentRegistry()
    quota = shm.ShmQuota(tmp_path, registry, client_bytes=1000, statvfs=_Statvfs(1 << 30, 1 << 30))

    def one(_: int) -> shm.Segment | None:
        arena = shm.Arena(tmp_path, registry, client="flood")
        arena.reserve((600,), np.uint8)
        return quota.create(arena)

    with ThreadPoolExecutor(16) as pool:
        made = [seg for seg in pool.map(one, range(64)) if seg is not None]
    assert len(made) == 1 and registry.unclaimed("flood") == (1, 600)  # the first; 600 + 600 > 1000 for the rest
