"""Bulk framing (graphfeed.common.bulk): exact for every dtype and size, readable by plain
protobuf, refused when truncated, oversized or corrupt, and copying each payload once per side."""

from __future__ import annotations

import gc
import tracemalloc
from collections.abc import Callable
from typing import TypeVar

import numpy as np
import pytest

from graphfeed.common import bulk, codec
from graphfeed.common.buffers import BufferPool
from graphfeed.common.errors import DataLoss
from graphfeed.common.v1 import tensor_pb2
from graphfeed.loader.v1 import loader_pb2 as pb

DTYPES = [
    np.bool_,
    np.int8,
    np.uint8,
    np.int16,
    np.uint16,
    np.int32,
    np.uint32,
    np.int64,
    np.uint64,
    np.float16,
    np.float32,
    np.float64,
]
CHUNK = 4096
T = TypeVar("T")


def _array(dtype: type, shape: tuple[int, ...], seed: int = 0) -> np.ndarray:
    raw = np.random.default_rng(seed).integers(
        0, 256, size=int(np.prod(shape)) * np.dtype(dtype).itemsize, dtype=np.uint8
    )
    arr: np.ndarray = raw.view(np.dtype(dtype)).reshape(shape)
    return arr.astype(np.bool_) if dtype is np.bool_ else arr


def _minibatch(features: np.ndarray, labels: np.ndarray) -> tuple[pb.Minibatch, bulk.BulkLayout]:
    msg, layout = pb.Minibatch(steps_per_epoch=7), bulk.BulkLayout()
    msg.step_key.step = 3
    codec.encode(features, msg.input_features, layout=layout)
    codec.encode(labels, msg.labels, layout=layout)
    return msg, layout


def _wire(frames: list[bulk.Outgoing]) -> list[bytes]:
    return [bulk.serializer(None)(f) for f in frames]


def _receive(wire: list[bytes], pool: BufferPool | None = None) -> list[bulk.Received[pb.Minibatch]]:
    received = (bulk.parse(pb.Minibatch, w) for w in wire)
    return list(bulk.assemble(received, pool or BufferPool(), "test"))


@pytest.mark.parametrize("dtype", DTYPES)
@pytest.mark.parametrize("rows", [0, 1, 1000, 1031])  # empty, one row, chunk multiples and not
def test_chunked_minibatch_arrives_exact(dtype: type, rows: int) -> None:
    features, labels = _array(dtype, (rows, 5)), _array(np.int64, (rows,), seed=1)
    msg, layout = _minibatch(features, labels)
    frames = list(layout.frames(msg, CHUNK))
    total = sum(len(p) for f in frames for p in f.parts)
    assert len(frames) == max(1, -(-total // CHUNK)), "every frame but the last carries a full chunk"
    [got] = _receive(_wire(frames))
    assert got.message.step_key.step == 3 and got.message.steps_per_epoch == 7
    for arr, field in ((features, got.message.input_features), (labels, got.message.labels)):
        out = codec.decode(field, "x", bulk=got.bulk)
        assert out.dtype == arr.dtype and out.shape == arr.shape and out.tobytes() == arr.tobytes()


def test_one_frame_is_plain_protobuf_with_aligned_views() -> None:
    features, labels = _array(np.float32, (100, 3)), np.arange(100)
    msg, layout = _minibatch(features, labels)
    wire = bulk.serializer(None)(layout.frame(msg))
    plain = pb.Minibatch.FromString(wire)  # what any protobuf library reads
    np.testing.assert_array_equal(codec.decode(plain.input_features, bulk=plain.bulk), features)
    got = bulk.parse(pb.Minibatch, wire)
    out = codec.decode(got.message.labels, bulk=got.bulk)
    np.testing.assert_array_equal(out, labels)
    assert not out.flags.writeable, "a view of the received message, not a copy"
    start = wire.index(labels.tobytes())
    assert start % bulk.ALIGN == 0, "arrays sit 64-byte aligned relative to the message start"


def test_a_bulk_field_anywhere_in_the_message_is_found() -> None:
    """Another protobuf writer may put the bulk field last (or twice: the last one wins)."""
    features = _array(np.float64, (10, 2))
    msg, layout = _minibatch(features, np.arange(10))
    first = pb.Minibatch.FromString(bulk.serializer(None)(layout.frame(msg)))
    other = pb.Minibatch()
    other.CopyFrom(first)
    wire = other.SerializeToString()  # protobuf's own order: the bulk field (15) last
    assert wire[:1] != bytes([0x7A])
    got = bulk.parse(pb.Minibatch, wire)
    np.testing.assert_array_equal(codec.decode(got.message.input_features, bulk=got.bulk), features)
    twice = bulk.parse(pb.Minibatch, bytes([0x7A, 1, 0]) + wire)
    assert bytes(twice.bulk) == first.bulk


def _frames(rows: int = 2000) -> list[bytes]:
    msg, layout = _minibatch(_array(np.float32, (rows, 4)), np.arange(rows))
    return _wire(list(layout.frames(msg, CHUNK)))


@pytest.mark.parametrize(
    ("mangle", "message"),
    [
        (lambda w: w[:-1], "stream ended after"),  # the last continuation never came
        (lambda w: [*w[:-1], w[0]], "new message after"),  # a new minibatch inside the bulk
        (lambda w: [*w, w[1]], "continuation message with no message"),  # a stray continuation
        (lambda w: [*w[:-1], bulk.serializer(None)(bulk.Outgoing(None, [bytes(CHUNK)]))], "announced"),  # oversized
        (lambda w: [w[0][:-3]], "corrupt"),  # a message cut short
    ],
    ids=["truncated", "interrupted", "stray", "oversized", "corrupt"],
)
def test_broken_streams_are_refused_and_leak_no_buffer(
    mangle: Callable[[list[bytes]], list[bytes]], message: str
) -> None:
    pool = BufferPool()
    with pytest.raises(DataLoss, match=message):
        _receive(mangle(_frames()), pool)
    gc.collect()
    assert pool.outstanding == 0


def test_a_reader_that_stops_mid_stream_hands_its_buffer_back() -> None:
    pool = BufferPool()
    received = bulk.assemble((bulk.parse(pb.Minibatch, w) for w in _frames() * 2), pool, "test")
    first = next(received)
    assert pool.outstanding == 1
    received.close()
    del first
    gc.collect()
    assert pool.outstanding == 0


def test_pooled_buffers_are_reused_once_the_arrays_are_gone() -> None:
    pool, wire = BufferPool(), _frames()
    for _ in range(3):
        [got] = _receive(wire, pool)
        features = codec.decode(got.message.input_features, bulk=got.bulk)
        del got
        assert pool.outstanding == 1, "the features keep their buffer"
        del features
        gc.collect()
    assert pool.outstanding == 0 and pool.allocated == 1


def _allocated(fn: Callable[[], T]) -> tuple[int, T]:
    """Peak bytes Python (NumPy included) allocated while ``fn`` ran, and its result."""
    gc.collect()
    tracemalloc.start()
    try:
        out = fn()
        return tracemalloc.get_traced_memory()[1], out
    finally:
        tracemalloc.stop()


def test_each_side_copies_the_payload_once() -> None:
    """Sender: arrays -> outgoing message (one copy). Receiver: message -> pooled destination
    (one copy, into memory allocated beforehand); a unary answer's views copy nothing. The
    protobuf way (``tobytes``, assign, serialize; parse, ``.data``) copies 3x and 2x."""
    payload = _array(np.float32, ((8 << 20) // 16, 4), seed=2)  # 8 MiB
    labels = np.zeros(len(payload), np.int8)
    msg, layout = _minibatch(payload, labels)
    frames = list(layout.frames(msg, 1 << 20))
    sent, wire = _allocated(lambda: _wire(frames))  # every frame kept: the peak is their total
    total = payload.nbytes + labels.nbytes
    assert total <= sent < 1.05 * total
    pool = BufferPool()
    _receive(wire, pool)  # the pool's buffer now exists
    gc.collect()
    received, got = _allocated(lambda: _receive(wire, pool))
    assert received < 0.05 * total and pool.allocated == 1
    np.testing.assert_array_equal(codec.decode(got[0].message.input_features, bulk=got[0].bulk), payload)

    # The contrast, the protobuf way (graphfeed before bulk framing). upb's own copies (into its
    # arena on assignment and parsing) are invisible to tracemalloc, so these are lower bounds.
    _, proto_wire = _allocated(lambda: codec.encode(payload).SerializeToString())
    proto_received, _ = _allocated(lambda: codec.decode(tensor_pb2.Tensor.FromString(proto_wire)))
    assert proto_received >= payload.nbytes, "parse, then .data: a traced copy of the whole payload"
