"""Server transport: one decision per response, arrays written in place are referenced where
they lie, the rest put in a segment or sent inline, bytes counted; no sockets."""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path

import numpy as np
import pytest
from prometheus_client import CollectorRegistry

from graphfeed.common import bulk, codec, shm
from graphfeed.common.errors import FailedPrecondition
from graphfeed.common.transport import ServerTransport
from graphfeed.common.v1 import tensor_pb2
from graphfeed.graph_store.v1.graph_store_pb2 import SampleNeighborsResponse


class _Context:
    """The two things a transport asks of a gRPC ServicerContext."""

    def __init__(self, metadata: tuple[tuple[str, str], ...] | None, active: bool = True) -> None:
        self._metadata = metadata
        self.active = active

    def invocation_metadata(self) -> tuple[tuple[str, str], ...] | None:
        return self._metadata

    def is_active(self) -> bool:
        return self.active


def _segments(directory: Path) -> list[str]:
    """Unclaimed segment files (a pool's handed-back ones carry a suffix)."""
    return sorted(
        p.name for p in Path(directory).iterdir() if p.name.startswith(shm.SEGMENT_PREFIX) and "." not in p.name
    )


@pytest.fixture
def shared(tmp_path: Path) -> Iterator[tuple[ServerTransport, _Context, CollectorRegistry]]:
    registry = CollectorRegistry()
    transport = ServerTransport(tmp_path, "TestService", registry)
    offer = shm.ShmOffer.create(tmp_path)
    assert offer is not None
    yield transport, _Context(offer.metadata()), registry
    transport.close()
    offer.close()


def _shm_bytes(registry: CollectorRegistry) -> float:
    value = registry.get_sample_value(
        "graphfeed_rpc_response_shm_bytes_total", {"service": "TestService", "method": "M"}
    )
    return value or 0.0


def test_without_shared_memory_tensors_travel_as_bulk_bytes(tmp_path: Path) -> None:
    transport = ServerTransport(None)
    with transport.response(_Context(None), "M") as r:
        assert not r.shared and r.alloc is None
        out = r.empty((3, 2), np.float32)
        out[:] = 1.5
        resp = SampleNeighborsResponse()
        r.encode(out, resp.src)
    assert resp.src.WhichOneof("payload") == "bulk" and r.paths == []
    rec = bulk.parse(SampleNeighborsResponse, bulk.serializer(None)(r.framed(resp)))
    np.testing.assert_array_equal(codec.decode(rec.message.src, "src", bulk=rec.bulk), out)
    assert r.framed(resp) is resp  # the bulk went with the first frame


def test_an_offer_for_another_directory_gets_inline_bytes(shared, tmp_path: Path) -> None:  # noqa: ANN001
    transport, _, registry = shared
    (tmp_path / "other").mkdir()
    other = shm.ShmOffer.create(tmp_path / "other")
    assert other is not None
    try:
        with transport.response(_Context(other.metadata()), "M") as r:
            msg = r.encode(np.arange(4), tensor_pb2.Tensor())
        assert msg.WhichOneof("payload") == "bulk" and _segments(tmp_path) == []
        assert _shm_bytes(registry) == 0
    finally:
        other.close()


def test_shared_response_refers_to_arrays_written_in_place(shared, tmp_path: Path) -> None:  # noqa: ANN001
    transport, context, registry = shared
    fields = [tensor_pb2.Tensor() for _ in range(4)]
    with transport.response(context, "M") as r:
        assert r.shared
        first = np.arange(5, dtype=np.int64)
        r.encode(first, fields[0])  # travels with the arrays reserved next
        nodes, edges = r.empty_many([(6,), (4,)], np.int64)
        nodes[:], edges[:] = np.arange(6) * 10, np.arange(4) * 100
        r.encode(nodes[:3], fields[1])  # a prefix of a reserved array
        r.encode(edges, fields[2])
        r.encode(np.ones(2, np.float32), fields[3])  # after the reservation: a second segment
    segments = {f.shm.segment for f in fields}
    assert all(f.WhichOneof("payload") == "shm" for f in fields) and len(segments) == 2
    assert fields[0].shm.segment == fields[1].shm.segment == fields[2].shm.segment
    assert sorted(p.name for p in r.paths) == sorted(segments) == _segments(tmp_path)
    reader = shm.SegmentReader(tmp_path)
    got = [codec.decode(f, segments=reader) for f in fields]
    for a, b in zip(got, [first, np.arange(3) * 10, np.arange(4) * 100, np.ones(2, np.float32)]):
        assert a.dtype == b.dtype and a.tobytes() == b.tobytes()
    # Layouts of encoded arrays (with their alignment) plus the bytes of what was written in place.
    assert _shm_bytes(registry) == 5 * 8 + (3 + 4) * 8 + 2 * 4


def test_an_array_adopted_from_another_segment_is_referenced(shared, tmp_path: Path) -> None:  # noqa: ANN001
    transport, context, _ = shared
    arena = shm.Arena(tmp_path)
    at = arena.reserve((3,), np.float32)
    segment = arena.finish()
    assert segment is not None
    features = segment.array(at, (3,), np.float32)
    with transport.stream(context, "M") as call, call.response() as r:
        r.adopt(features, segment.name, at)
        msg = r.encode(features, tensor_pb2.Tensor())
    assert (msg.shm.segment, msg.shm.offset) == (segment.name, at)
    assert r.paths == [tmp_path / segment.name]
    segment.close()


def test_a_failed_response_writes_no_segment(shared, tmp_path: Path) -> None:  # noqa: ANN001
    transport, context, registry = shared
    with pytest.raises(RuntimeError), transport.response(context, "M") as r:
        r.encode(np.arange(4), tensor_pb2.Tensor())
        raise RuntimeError("the core failed")
    assert _segments(tmp_path) == [] and _shm_bytes(registry) == 0


def test_a_cancelled_stream_drops_its_unclaimed_segments(shared, tmp_path: Path) -> None:  # noqa: ANN001
    transport, context, _ = shared
    with transport.stream(context, "M") as call:
        with call.response() as r:
            r.encode(np.arange(4), tensor_pb2.Tensor())
        assert len(_segments(tmp_path)) == 1
        context.active = False  # the client went away
    assert _segments(tmp_path) == []


def test_writing_into_a_callers_segment_needs_a_verified_offer(shared) -> None:  # noqa: ANN001
    transport, _, _ = shared
    with (
        pytest.raises(FailedPrecondition, match="M with a target needs a shared-memory offer"),
        transport.response(_Context(None), "M") as r,
    ):
        r.peer_array("graphfeed-seg-1o00000000-0-00000000", 0, (1,), np.float32)
