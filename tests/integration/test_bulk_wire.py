"""Bulk framing over a real gRPC server on loopback (the server interceptor writes the frames):
exact for every dtype and awkward sizes, truncated and oversized streams refused with DATA_LOSS,
and no pooled buffer left behind on either side when a stream breaks or its reader goes away."""

from __future__ import annotations

import gc
import threading
import time
from collections.abc import Callable, Iterator
from dataclasses import dataclass, field

import grpc
import numpy as np
import pytest
from prometheus_client import CollectorRegistry

from graphfeed.common import bulk, codec
from graphfeed.common.buffers import BufferPool
from graphfeed.common.errors import DataLoss
from graphfeed.common.metrics import RpcMetrics
from graphfeed.common.rpc import RunningServer, channel_options, start_server
from graphfeed.loader.v1 import loader_pb2 as pb

pytestmark = pytest.mark.integration
SERVICE = "graphfeed.test.BulkWire"
CHUNK = 64 << 10


@dataclass
class Sender:
    """Streams one minibatch-shaped message per request: features of the requested dtype and
    rows (job_id "<dtype> <rows>"), labels; ``mangle`` edits the frames before they are sent.
    Feature arrays come from ``pool``, as the loader's do."""

    pool: BufferPool = field(default_factory=BufferPool)
    mangle: Callable[[list[bulk.Outgoing]], list[bulk.Outgoing | bytes]] = lambda frames: list(frames)
    sent: threading.Event = field(default_factory=threading.Event)

    def stream(
        self, request: pb.StreamMinibatchesRequest, context: grpc.ServicerContext
    ) -> Iterator[bulk.Outgoing | bytes]:
        dtype, rows = request.job.job_id.split()
        features = _features(np.dtype(dtype), int(rows), self.pool)
        msg, layout = pb.Minibatch(steps_per_epoch=1), bulk.BulkLayout()
        codec.encode(features, msg.input_features, layout=layout)
        codec.encode(np.arange(int(rows)), msg.labels, layout=layout)
        del features  # the frames keep the pooled array alive until they are sent
        for frame in self.mangle(list(layout.frames(msg, CHUNK))):
            yield frame
            self.sent.set()


def _features(dtype: np.dtype, rows: int, pool: BufferPool | None = None) -> np.ndarray:
    nbytes = rows * 3 * dtype.itemsize
    raw = pool.take(nbytes) if pool is not None else np.empty(nbytes, np.uint8)
    raw[:] = np.arange(nbytes, dtype=np.uint64).astype(np.uint8) * 7 + 1  # no NaN payloads: 1..255 pattern
    out: np.ndarray = raw.view(dtype).reshape(rows, 3)
    return out


@pytest.fixture
def sender() -> Iterator[tuple[Sender, RunningServer]]:
    s = Sender()
    handler = grpc.method_handlers_generic_handler(
        SERVICE, {"Stream": grpc.unary_stream_rpc_method_handler(s.stream, pb.StreamMinibatchesRequest.FromString)}
    )
    server = start_server(
        register=lambda srv: srv.add_generic_rpc_handlers((handler,)),
        service_names=[SERVICE],
        metrics=RpcMetrics.create(CollectorRegistry()),
    )
    yield s, server
    server.stop(0)


def _read(server: RunningServer, dtype: str, rows: int, pool: BufferPool) -> list[bulk.Received[pb.Minibatch]]:
    with grpc.insecure_channel(server.address, options=channel_options()) as ch:
        call = bulk.unary_stream(ch, SERVICE, "Stream", pb.StreamMinibatchesRequest, pb.Minibatch)
        request = pb.StreamMinibatchesRequest(job=pb.JobSpec(job_id=f"{dtype} {rows}"))
        return list(bulk.assemble(call(request, timeout=30), pool, "test stream"))


@pytest.mark.parametrize("dtype", ["bool", "int8", "uint16", "int32", "int64", "float16", "float32", "float64"])
@pytest.mark.parametrize("rows", [0, 1, 5461, 40000])  # empty, one row, about one chunk, many chunks plus a tail
def test_chunked_stream_is_exact(sender: tuple[Sender, RunningServer], dtype: str, rows: int) -> None:
    pool = BufferPool()
    [got] = _read(sender[1], dtype, rows, pool)
    want = _features(np.dtype(dtype), rows)
    out = codec.decode(got.message.input_features, bulk=got.bulk)
    assert out.dtype == want.dtype and out.shape == want.shape and out.tobytes() == want.tobytes()
    np.testing.assert_array_equal(codec.decode(got.message.labels, bulk=got.bulk), np.arange(rows))


@pytest.mark.parametrize(
    ("mangle", "message"),
    [
        (lambda frames: frames[:-1], "stream ended after"),
        (lambda frames: [*frames, bulk.Outgoing(None, [bytes(CHUNK)])], "continuation message with no message"),
        (lambda frames: [*frames[:-1], bulk.Outgoing(None, [bytes(2 * CHUNK)])], "announced"),
        (
            lambda frames: [frames[0], b"\x0a\xff"],
            "corrupt Minibatch",
        ),  # a field cut short (raw bytes pass as they are)
    ],
    ids=["truncated", "one too many", "oversized", "corrupt"],
)
def test_broken_streams_are_refused_with_data_loss(sender: tuple[Sender, RunningServer], mangle, message: str) -> None:  # noqa: ANN001
    s, server = sender
    s.mangle = mangle
    pool = BufferPool()
    with pytest.raises(DataLoss, match=message) as err:
        _read(server, "float32", 40000, pool)
    assert err.value.code == grpc.StatusCode.DATA_LOSS
    gc.collect()
    assert pool.outstanding == 0, "the receiver's half-filled buffer went back to its pool"
    _wait(lambda: s.pool.outstanding == 0, "the sender's pooled features were released")


def test_a_reader_gone_mid_stream_leaves_no_pooled_buffer(sender: tuple[Sender, RunningServer]) -> None:
    s, server = sender
    pool = BufferPool()
    ch = grpc.insecure_channel(server.address, options=channel_options())
    call = bulk.unary_stream(ch, SERVICE, "Stream", pb.StreamMinibatchesRequest, pb.Minibatch)(
        pb.StreamMinibatchesRequest(job=pb.JobSpec(job_id="float32 200000")), timeout=30
    )
    received = bulk.assemble(call, pool, "test stream")
    first = next(iter(call))  # the head frame: the reader dies inside the minibatch's bulk
    assert first.message.bulk_bytes > len(first.bulk)
    call.cancel()
    ch.close()
    del received, first
    gc.collect()
    assert pool.outstanding == 0
    _wait(lambda: s.pool.outstanding == 0, "the sender's pooled features were released after the cancel")


def _wait(cond: Callable[[], bool], what: str, timeout_s: float = 10.0) -> None:
    deadline = time.monotonic() + timeout_s
    while not cond():
        assert time.monotonic() < deadline, what
        gc.collect()
        time.sleep(0.02)
