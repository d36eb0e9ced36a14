"""Bulk framing: large arrays cross gRPC as raw bytes beside a small protobuf control part.

The wire format is specified in ``proto/graphfeed/common/v1/tensor.proto`` ("Bulk framing"):
a message type that carries bulk declares ``uint64 bulk_bytes = 14`` and ``bytes bulk = 15``,
and its tensors are :class:`BulkRef` ranges of the bulk bytes, which may continue in later
messages of a stream. Every message stays valid protobuf; what graphfeed adds is how it
writes and reads them:

* Sending (:class:`BulkLayout` -> :class:`Outgoing`): ``bulk`` is written as the message's first
  field, straight from the arrays' memory into the outgoing message (``bytes.join``: the one
  copy a sender makes; protobuf serializes only the control fields, after it).
* Receiving (:func:`parse`): ``bulk`` is sliced out of the received buffer as a memoryview and
  protobuf parses only the rest. A unary answer's arrays are views of the received message; a
  stream's bulk that continues over several messages is copied once, slice by slice, into a
  pooled destination (:func:`assemble`, :class:`~graphfeed.common.buffers.BufferPool`).

* Beside gRPC (:mod:`graphfeed.common.plane`): a large bulk parked on the sender's bulk plane
  (:meth:`BulkLayout.park`) leaves the message with a ``bulk_ticket`` instead; the receiver's
  deserializer reads the bytes from the plane into a pooled buffer (:func:`deserializer`), so
  what follows sees the same :class:`Received` either way.

A server returns :class:`Outgoing` objects where it would return messages; the server
interceptor serializes them (:func:`serializer`). A client reads such answers through
multi-callables built by :func:`unary_unary` / :func:`unary_stream`, which return
:class:`Received` objects.
"""

from __future__ import annotations

from collections.abc import Callable, Generator, Iterable, Iterator
from dataclasses import dataclass
from typing import Any, Generic, TypeVar

import grpc
import numpy as np
from google.protobuf.message import DecodeError, Message

from graphfeed.common.buffers import BufferPool
from graphfeed.common.errors import DataLoss, GraphfeedError
from graphfeed.common.limits import STREAM_CHUNK_BYTES
from graphfeed.common.plane import MIN_BYTES as PLANE_MIN_BYTES
from graphfeed.common.plane import BulkPlane
from graphfeed.common.v1 import tensor_pb2

M = TypeVar("M", bound=Message)

BULK_FIELD = 15
_BULK_KEY = bytes([(BULK_FIELD << 3) | 2])  # field 15, wire type LEN: one byte
ALIGN = 64  # byte alignment of each tensor in the bulk (as in shared-memory segments)
_ZEROS = bytes(ALIGN)
Bulk = bytes | memoryview | np.ndarray
"""A message's bulk bytes: a view of the received buffer, a pooled uint8 array, or the
``bulk`` field as a plain protobuf reader gets it."""


def varint(value: int) -> bytes:
    """``value`` (>= 0) as a protobuf varint."""
    out = bytearray()
    while value >= 0x80:
        out.append((value & 0x7F) | 0x80)
        value >>= 7
    out.append(value)
    return bytes(out)


def read_varint(buf: memoryview, pos: int) -> tuple[int, int]:
    """The varint at ``pos`` and the position after it; DecodeError if truncated or too long."""
    result = shift = 0
    while pos < len(buf) and shift < 64:
        b = buf[pos]
        pos += 1
        result |= (b & 0x7F) << shift
        if b < 0x80:
            return result, pos
        shift += 7
    raise DecodeError("truncated or overlong varint")


def fields(buf: memoryview) -> Iterator[tuple[int, int, int, int]]:
    """``(field number, start, payload start, end)`` of each top-level field of a message."""
    pos = 0
    while pos < len(buf):
        start = pos
        key, pos = read_varint(buf, pos)
        number, wire = key >> 3, key & 7
        if wire == 0:
            _, pos = read_varint(buf, pos)
            payload = start
        elif wire == 1:
            payload, pos = pos, pos + 8
        elif wire == 2:
            size, payload = read_varint(buf, pos)
            pos = payload + size
        elif wire == 5:
            payload, pos = pos, pos + 4
        else:
            raise DecodeError(f"field {number}: unsupported wire type {wire}")
        if pos > len(buf):
            raise DecodeError(f"field {number} runs past the end of the message")
        yield number, start, payload, pos


@dataclass(frozen=True)
class Received(Generic[M]):
    """One received message: its control fields and its bulk bytes (a read-only view of the
    received buffer, or a pooled writable array once :func:`assemble` joined a stream's).

    A message that could not be read arrives too (``error`` says why), so that its reader gets
    DATA_LOSS with that reason rather than gRPC's bare "Exception deserializing response"."""

    body: M | None
    bulk: Bulk
    continuation: bool = False  # only ``bulk`` was set: the bytes continue the previous message's
    error: str = ""
    failure: type[GraphfeedError] = DataLoss  # what :attr:`message` raises with ``error``

    @property
    def message(self) -> M:
        """The control fields. Raises DataLoss when the message could not be read (Unavailable
        when its bulk bytes could not be fetched from the bulk plane)."""
        if self.body is None:
            raise self.failure(self.error)
        return self.body

    @property
    def bulk_bytes(self) -> int:
        """Total bulk bytes this message announces (its own ``bulk`` when not continued)."""
        total = int(getattr(self.message, "bulk_bytes", 0))
        return total or len(self.bulk)


def parse(cls: type[M], data: bytes) -> Received[M]:
    """Reads a message of type ``cls``: ``bulk`` sliced out without a copy, the rest parsed.

    Raises:
        DataLoss: the bytes are not a valid message (truncated, corrupt).
    """
    buf = memoryview(data)
    try:
        if buf[:1] == _BULK_KEY:  # graphfeed's senders write the bulk first: no scan of the rest
            size, start = read_varint(buf, 1)
            end = start + size
            if end > len(buf):
                raise DecodeError("bulk runs past the end of the message")
            rest = buf[end:]
            return _received(cls.FromString(rest), buf[start:end], len(rest) == 0)
        spans = list(fields(buf))
    except DecodeError as exc:
        raise DataLoss(f"corrupt {cls.DESCRIPTOR.name} message ({len(buf)} bytes): {exc}") from None
    bulk = [(p, e) for n, _, p, e in spans if n == BULK_FIELD]
    if not bulk:
        return Received(_from(cls, buf), memoryview(b""))
    control = b"".join(bytes(buf[s:e]) for n, s, _, e in spans if n != BULK_FIELD)
    p, e = bulk[-1]  # protobuf semantics: the last occurrence of a singular field wins
    return _received(_from(cls, control), buf[p:e], not control)


def _from(cls: type[M], data: bytes | memoryview) -> M:
    try:
        return cls.FromString(data)
    except DecodeError as exc:
        raise DataLoss(f"corrupt {cls.DESCRIPTOR.name} message: {exc}") from None


def _received(msg: M, bulk: memoryview, continuation: bool) -> Received[M]:
    extra = getattr(msg, "bulk", b"")
    return Received(msg, memoryview(extra) if extra else bulk, continuation)


Fetch = Callable[[bytes, int, int, str], np.ndarray]  # (ticket, port, nbytes, host) -> uint8: PlaneClient.fetch


def deserializer(cls: type[M], fetch: Fetch | None = None) -> Callable[[bytes], Received[M]]:
    """A gRPC response deserializer producing :class:`Received` messages of type ``cls``; one
    that cannot be read carries the reason, raised as DataLoss where it is used. A message
    whose bulk bytes wait on the sender's bulk plane (``bulk_ticket``) gets them from ``fetch``
    (they cannot arrive without an offer, which only a client with ``fetch`` makes)."""

    def read(data: bytes) -> Received[M]:
        try:
            rec = parse(cls, data)
            ticket = getattr(rec.body, "bulk_ticket", None)
            if ticket is None or not rec.body.HasField("bulk_ticket"):  # type: ignore[union-attr]
                return rec
            if fetch is None:
                raise DataLoss(f"{cls.DESCRIPTOR.name}: bulk bytes on a bulk plane this client did not offer to read")
            got = fetch(ticket.ticket, ticket.port, int(rec.body.bulk_bytes), ticket.host)  # type: ignore[union-attr]
            return Received(rec.body, got)
        except GraphfeedError as exc:
            return Received(None, memoryview(b""), error=str(exc), failure=type(exc))

    return read


def unary_unary(
    channel: grpc.Channel,
    service: str,
    method: str,
    request: type[Message],
    response: type[M],
    fetch: Fetch | None = None,
) -> Any:
    """A unary multi-callable whose answers are :class:`Received` (``service`` is its full name;
    ``fetch``: how to read bulk bytes from the server's bulk plane, see :func:`deserializer`)."""
    return channel.unary_unary(f"/{service}/{method}", request.SerializeToString, deserializer(response, fetch))


def unary_stream(
    channel: grpc.Channel,
    service: str,
    method: str,
    request: type[Message],
    response: type[M],
    fetch: Fetch | None = None,
) -> Any:
    """A server-streaming multi-callable whose messages are :class:`Received`."""
    return channel.unary_stream(f"/{service}/{method}", request.SerializeToString, deserializer(response, fetch))


def assemble(messages: Iterable[Received[M]], pool: BufferPool, what: str) -> Generator[Received[M], None, None]:
    """Joins each message with its continuation messages: the bulk copied, slice by slice, into
    a buffer from ``pool`` (the one copy a receiver makes); messages not continued pass as they
    are. A buffer of a message left incomplete goes back to the pool with the stream.

    Raises:
        DataLoss: a stream that ends inside a message's bulk, a continuation where none is due
            or one that is not a continuation where one is, or more bytes than announced.
    """
    it = iter(messages)
    for first in it:
        first.message  # noqa: B018 - raises DataLoss for a message that could not be read
        if first.continuation:
            raise DataLoss(f"{what}: a continuation message with no message to continue")
        total, got = first.bulk_bytes, len(first.bulk)
        if got > total:
            raise DataLoss(f"{what}: {got} bulk bytes in a message that announces {total}")
        if got == total:
            yield first
            continue
        yield Received(first.message, _join(first, it, pool.take(total), what))


def _join(first: Received[M], rest: Iterator[Received[M]], buf: np.ndarray, what: str) -> np.ndarray:
    """Copies ``first``'s bulk and its continuations' into ``buf``; on failure lets go of
    ``buf`` before raising (a traceback kept by the caller must not hold a pooled buffer)."""
    total, got = len(buf), len(first.bulk)
    try:
        buf[:got] = np.frombuffer(first.bulk, np.uint8)
        while got < total:
            nxt = next(rest, None)
            if nxt is None:
                raise DataLoss(f"{what}: the stream ended after {got} of {total} bulk bytes (truncated)")
            nxt.message  # noqa: B018 - raises DataLoss for a message that could not be read
            if not nxt.continuation:
                raise DataLoss(f"{what}: a new message after {got} of {total} bulk bytes (truncated)")
            n = len(nxt.bulk)
            if got + n > total:
                raise DataLoss(f"{what}: continuation brings the bulk to {got + n} bytes, {total} announced")
            buf[got : got + n] = np.frombuffer(nxt.bulk, np.uint8)
            got += n
    except BaseException:
        del buf
        raise
    return buf


def view(bulk: Bulk, offset: int, shape: tuple[int, ...], dtype: np.dtype, what: str) -> np.ndarray:
    """The array at ``offset`` of ``bulk`` without a copy (read-only over a received message).

    Raises:
        DataLoss: the range does not lie within the bulk bytes.
    """
    count = int(np.prod(shape, dtype=np.int64)) if shape else 1
    end = offset + count * dtype.itemsize
    if end > len(bulk):
        raise DataLoss(f"{what}: bytes [{offset}, {end}) lie outside the {len(bulk)} bulk bytes")
    return np.frombuffer(bulk, dtype=dtype, count=count, offset=offset).reshape(shape)


@dataclass
class Outgoing:
    """A message to send with its bulk bytes: the memoryviews in ``parts`` are written as its
    ``bulk`` field, first; ``message`` (None for a continuation) after them."""

    message: Message | None
    parts: list[memoryview | bytes]
    elsewhere: int = 0  # bulk bytes of this message sent through the bulk plane instead (counted as sent)

    def serialize(self) -> bytes:
        size = sum(len(p) for p in self.parts)
        tail = self.message.SerializeToString() if self.message is not None else b""
        return b"".join([_BULK_KEY, varint(size), *self.parts, tail])


def serializer(serialize: Callable[[Any], bytes] | None) -> Callable[[Any], bytes]:
    """A gRPC response serializer that writes :class:`Outgoing` frames and, for anything else,
    calls ``serialize`` (None: the value is already bytes)."""

    def framed(msg: Any) -> bytes:
        if isinstance(msg, Outgoing):
            return msg.serialize()
        return serialize(msg) if serialize is not None else msg

    return framed


def _bytes_of(array: np.ndarray) -> memoryview:
    arr = np.ascontiguousarray(array)
    return memoryview(arr.reshape(-1).view(np.uint8).data) if arr.size else memoryview(b"")


class BulkLayout:
    """The tensors of one outgoing message that travel as bulk bytes: :meth:`add` while the
    message is built, then :meth:`frame` (one message) or :meth:`frames` (a stream's message and
    its continuations) lays them out, fills in every :class:`BulkRef` and returns the frames."""

    def __init__(self) -> None:
        self._items: list[tuple[np.ndarray, tensor_pb2.Tensor]] = []

    def __bool__(self) -> bool:
        return bool(self._items)

    def add(self, array: np.ndarray, field: tensor_pb2.Tensor) -> None:
        """Puts ``array`` in the bulk; ``field`` (its dtype and shape already set, see
        :func:`graphfeed.common.codec.encode`) gets its offset when the frames are made."""
        field.bulk.offset = 0
        self._items.append((np.asarray(array), field))

    def _lay_out(self, lead: int) -> tuple[list[memoryview | bytes], int]:
        """Sets every ref's offset: the first array at ``lead``, each next one at an offset
        congruent to ``lead`` modulo ALIGN; returns the bulk's parts (padding included) and size."""
        parts: list[memoryview | bytes] = []
        at = 0
        for arr, field in self._items:
            pad = (lead - at) % ALIGN
            if pad:
                parts.append(_ZEROS[:pad])
                at += pad
            field.bulk.offset = at
            data = _bytes_of(arr)
            parts.append(data)
            at += len(data)
        return parts, at

    def frame(self, message: Message) -> Outgoing:
        """``message`` and its bulk in one frame, each array placed 64-byte aligned relative to
        the start of the received message, so the receiver's views of it are as aligned as its
        buffer (16 bytes for a CPython ``bytes``) and need no copy."""
        size = self._lay_out(0)[1]
        lead = 0
        for _ in range(3):  # the length varint's size and the lead depend on each other
            lead = -(1 + len(varint(size + lead))) % ALIGN
        return Outgoing(message, self._lay_out(lead)[0])

    def park(self, message: Message, plane: BulkPlane, client: str = "") -> Outgoing | None:
        """``message`` with its bulk bytes parked on ``plane`` for ``client`` (``bulk_ticket``
        set, ``bulk`` empty); None when they are too few to be worth it or the plane holds too much."""
        parts, total = self._lay_out(0)
        if total < PLANE_MIN_BYTES:
            return None
        ticket = plane.park(parts, total, client)
        if ticket is None:
            return None
        message.bulk_bytes = total  # declared by every bulk-carrying type
        message.bulk_ticket.ticket = ticket
        message.bulk_ticket.port = plane.port
        message.bulk_ticket.host = plane.advertise
        return Outgoing(message, [], elsewhere=total)

    def frames(self, message: Message, chunk_bytes: int = STREAM_CHUNK_BYTES) -> Iterator[Outgoing]:
        """``message`` with the first ``chunk_bytes`` of its bulk, then continuation frames of at
        most ``chunk_bytes`` each (the receiver joins them: :func:`assemble`)."""
        parts, total = self._lay_out(0)
        if total <= chunk_bytes:
            yield Outgoing(message, parts)
            return
        message.bulk_bytes = total  # declared by every bulk-carrying type (tensor.proto)
        chunks = _split(parts, chunk_bytes)
        yield Outgoing(message, next(chunks))
        for chunk in chunks:
            yield Outgoing(None, chunk)


def _split(parts: list[memoryview | bytes], chunk_bytes: int) -> Iterator[list[memoryview | bytes]]:
    """``parts`` regrouped into lists of ``chunk_bytes`` bytes (the last one shorter); views only."""
    out: list[memoryview | bytes] = []
    room = chunk_bytes
    for part in parts:
        mv = memoryview(part)
        while len(mv):
            take = mv[:room]
            out.append(take)
            mv = mv[len(take) :]
            room -= len(take)
            if room == 0:
                yield out
                out, room = [], chunk_bytes
    if out:
        yield out
