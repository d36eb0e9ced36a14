"""One response's tensors (:class:`Response`) and one server stream's side of the transport
(:class:`StreamCall`): shared memory or bulk bytes as the call decided (see
:mod:`graphfeed.common.transport`)."""

from __future__ import annotations

import math
from collections.abc import Callable, Iterator, Sequence
from pathlib import Path
from types import TracebackType
from typing import TYPE_CHECKING

import grpc
import numpy as np
from google.protobuf.message import Message
from numpy.typing import DTypeLike

from graphfeed.common import codec
from graphfeed.common.bulk import BulkLayout, Outgoing
from graphfeed.common.errors import FailedPrecondition, InvalidArgument
from graphfeed.common.limits import STREAM_CHUNK_BYTES
from graphfeed.common.placement import Placed, Placement
from graphfeed.common.plane import MIN_BYTES as PLANE_MIN_BYTES
from graphfeed.common.plane import BulkPlane
from graphfeed.common.shm import Arena, Backpressure, Segment, SegmentPool, SegmentRegistry, ShmQuota
from graphfeed.common.shm.placement import ShmPlaced, ShmPlacement
from graphfeed.common.v1 import tensor_pb2

if TYPE_CHECKING:  # the transport makes responses and stream calls; they only call it back
    from graphfeed.common.transport import ServerTransport

Allocator = Callable[[Sequence[int], DTypeLike], np.ndarray]  # (shape, dtype) -> a writable array


class Response:
    """The tensors of one response message, in shared memory or inline as its call decided.

    Get one from :meth:`ServerTransport.response` (a unary answer) or
    :meth:`StreamCall.response` (one message of a stream) and use it as a context manager. A
    core writes into :meth:`empty` arrays (in the segment: zero-copy), the servicer encodes the
    results with :meth:`encode`: an array that already lives in a segment becomes a reference
    where it lies, any other is put in the response's segment, or inline. On exit the arrays
    :meth:`encode` put there are copied into a segment, the writer's mappings dropped and the
    bytes counted. Send the message after the ``with`` block; only a message whose tensors
    were all written in place or inline may go earlier (GetNodeData's one shared-memory chunk).

    Layout, as the reader expects it: arrays encoded before an :meth:`empty_many` share its
    segment (in front); later ones go into one more segment, written on exit.

    Without shared memory the arrays travel as the message's bulk bytes: return
    :meth:`framed` (or yield :meth:`frames`) instead of the message itself.
    """

    def __init__(
        self,
        transport: ServerTransport,
        method: str,
        directory: Path | None,
        owner: object = None,
        client: str = "",
        plane: BulkPlane | None = None,
        peer: str = "",
        parked: list[bytes] | None = None,
    ) -> None:
        self.directory = directory
        self.plane = plane  # the server's bulk plane, when this call's client offered to read from it
        self.tickets: list[bytes] = []  # what this response parked on the plane
        self._call_tickets = parked  # its stream's, dropped if the stream is cancelled
        self._peer = peer  # the caller's host: its share of the plane
        self.paths: list[Path] = []  # the segments this message refers to (a stream's back-pressure watches them)
        self._transport = transport
        self._method = method
        self._owner = owner
        self._client = client
        self._arena: Arena | None = None  # where :meth:`encode` puts arrays, copied when finished
        self._pending: list[tuple[np.ndarray, tensor_pb2.Tensor]] = []  # what :meth:`encode` put in the arena
        self._segments: list[Segment] = []  # written (and peers' segments), mapped until exit
        self._placed: dict[int, tuple[str, int, bool, int]] = {}  # data address -> (segment, offset, recycle, nbytes)
        self._nbytes = 0
        self._layout = BulkLayout()  # the arrays :meth:`encode` sends as bulk bytes (no shared memory)

    @property
    def shared(self) -> bool:
        """Whether this message's tensors travel in shared memory."""
        return self.directory is not None

    @property
    def alloc(self) -> Allocator | None:
        """:meth:`empty` when arrays can live in the response's segment; None inline (a core
        then makes ordinary arrays itself and may cut its answer into messages of bounded size)."""
        return self.empty if self.shared else None

    def empty(self, shape: Sequence[int], dtype: DTypeLike) -> np.ndarray:
        """A writable array for the core to fill: in the response's segment (encoded in
        place), or an ordinary one inline."""
        return self.empty_many([shape], dtype)[0]

    def shared_empty(self, shape: Sequence[int], dtype: DTypeLike) -> np.ndarray | None:
        """:meth:`empty` only where it lies in the response's segment: None inline, or when the
        segment is refused (quota, no room), so that the caller answers in bounded pieces
        instead of building the whole answer in one ordinary array."""
        if self.directory is None:
            return None
        out = self.empty(shape, dtype)
        return out if self.directory is not None else None

    def empty_many(self, shapes: Sequence[Sequence[int]], dtype: DTypeLike) -> list[np.ndarray]:
        """Several arrays like :meth:`empty`, laid out in one segment after whatever was
        encoded before (which that segment then carries too)."""
        if self.directory is not None:
            arena = self._open_arena()
            encoded = arena.nbytes  # what was encoded before; the new arrays count as encoded
            offsets = [arena.reserve(shape, dtype) for shape in shapes]
            segment = self._finish_arena()
            if segment is not None:
                self._nbytes += encoded
                out = [segment.array(at, tuple(shape), dtype) for at, shape in zip(offsets, shapes)]
                for arr, at in zip(out, offsets):
                    self._place(arr, segment.name, at, segment.recycle)
                return out
        return [np.empty(tuple(shape), dtype) for shape in shapes]

    def adopt(self, array: np.ndarray, segment: str, offset: int = 0, recycle: bool = False) -> None:
        """Says that ``array`` already lives in ``segment`` (of this server, e.g. a stream's
        feature segment) at byte ``offset``: :meth:`encode` refers to it there. Inline: ignored."""
        if self.directory is not None:
            self._place(array, segment, offset, recycle)
            self.paths.append(self.directory / segment)

    def adopt_placed(self, array: np.ndarray, placed: Placed | None) -> None:
        """:meth:`adopt` for an array a stream placed (:meth:`StreamCall.placement`): referred to
        in its segment when it lies in one, else sent like any other."""
        if isinstance(placed, ShmPlaced) and placed.segment is not None:
            self.adopt(array, placed.segment.name, 0, placed.segment.recycle)

    def encode(self, array: np.ndarray, field: tensor_pb2.Tensor) -> tensor_pb2.Tensor:
        """Fills ``field`` with ``array``: a reference where it lies in a segment (a prefix of
        an :meth:`empty` array counts), else put in the response's segment, or inline bytes."""
        if self.directory is None:
            return codec.encode(array, field, layout=self._layout)
        arr = np.asarray(array)
        ref = self._placed.get(arr.ctypes.data) if arr.flags.c_contiguous else None
        if ref is None or arr.nbytes > ref[3]:
            self._pending.append((arr, field))
            return codec.encode(arr, field, self._open_arena())
        self._nbytes += arr.nbytes
        return codec.encode_ref(arr.shape, arr.dtype, ref[0], ref[1], field, ref[2])

    def framed(self, message: Message) -> Message | Outgoing:
        """What to send for ``message``: itself when its tensors are inline or in shared memory,
        else it with the bulk bytes of the arrays encoded since the last frame, or with a ticket
        for them on the bulk plane (:mod:`graphfeed.common.plane`) when its client offered that."""
        if not self._layout:
            return message
        layout, self._layout = self._layout, BulkLayout()
        return self._parked(layout, message) or layout.frame(message)

    def frames(self, message: Message, chunk_bytes: int = STREAM_CHUNK_BYTES) -> Iterator[Message | Outgoing]:
        """Like :meth:`framed` for a stream: the bulk bytes cut into continuation messages of at
        most ``chunk_bytes`` each, which the reader joins (:func:`graphfeed.common.bulk.assemble`)
        (one message with a ticket when they go through the bulk plane)."""
        if not self._layout:
            yield message
            return
        layout, self._layout = self._layout, BulkLayout()
        parked = self._parked(layout, message)
        if parked is not None:
            yield parked
            return
        yield from layout.frames(message, chunk_bytes)

    def plane_empty(self, shape: Sequence[int], dtype: DTypeLike) -> np.ndarray | None:
        """A writable array (pooled: its pages are mapped already) for an answer that goes
        through the bulk plane in one message; None without one, when it is too small to, or
        when the plane has no room for it now (then it goes inline, in bounded messages)."""
        nbytes = math.prod(shape) * np.dtype(dtype).itemsize
        if self.plane is None or self.directory is not None or nbytes < PLANE_MIN_BYTES:
            return None
        if not self.plane.fits(nbytes, self._peer):
            return None
        return self.plane.buffers.take(nbytes).view(dtype).reshape(tuple(shape))

    def unread(self) -> bool:
        """Whether a message of this response waits on the bulk plane for its client."""
        return self.plane is not None and any(self.plane.holds(t) for t in self.tickets)

    def _parked(self, layout: BulkLayout, message: Message) -> Outgoing | None:
        if self.plane is None:
            return None
        parked = layout.park(message, self.plane, self._peer)
        if parked is not None:
            self.tickets.append(message.bulk_ticket.ticket)
            if self._call_tickets is not None:
                self._call_tickets.append(message.bulk_ticket.ticket)
            self._transport.count_plane(self._method, parked.elsewhere)
        return parked

    def peer_array(self, segment: str, offset: int, shape: Sequence[int], dtype: DTypeLike) -> np.ndarray:
        """A writable view of the caller's own segment (a loader's minibatch features that a
        graph-store writes rows into); count what is written with :meth:`count`.

        Raises:
            FailedPrecondition: no verified shared-memory offer with this call.
            InvalidArgument: not a segment name, or the array does not fit in it.
            FailedPrecondition: no such segment (asking again cannot help), or not this user's.
        """
        if self.directory is None:
            raise FailedPrecondition(f"{self._method} with a target needs a shared-memory offer this server can verify")
        peer = self._transport.peers.open(self.directory, segment)
        self._segments.append(peer)
        try:
            return peer.array(offset, tuple(shape), dtype)
        except ValueError as exc:
            raise InvalidArgument(f"target {segment}: {exc}") from None

    def count(self, nbytes: int) -> None:
        """Counts bytes delivered through shared memory that no encoded tensor carries (rows
        written into a :meth:`peer_array`)."""
        self._nbytes += nbytes

    def __enter__(self) -> Response:
        return self

    def __exit__(
        self, exc_type: type[BaseException] | None, exc: BaseException | None, tb: TracebackType | None
    ) -> None:
        """Writes the put arrays' segment (unless the response failed), unmaps, counts."""
        try:
            if self._arena is not None and exc_type is None:
                laid_out = self._arena.nbytes  # not the (recycled) file's capacity
                if self._finish_arena() is not None:
                    self._nbytes += laid_out
        finally:
            self._arena, self._pending = None, []
            for segment in self._segments:
                segment.close()  # arrays over it keep their mapping until they are gone
            self._segments = []
        if self._nbytes and exc_type is None:
            self._transport.count(self._method, self._nbytes)

    def _open_arena(self) -> Arena:
        if self._arena is None:
            if self.directory is None:
                raise RuntimeError(f"{self._method}: no shared directory was accepted, so no arena can be opened")
            pool = self._transport.pool(self.directory)
            self._arena = Arena(self.directory, self._transport.registry, self._owner, pool, self._client)
        return self._arena

    def _finish_arena(self) -> Segment | None:
        """The arena's segment, written; None when the directory had no room: then what was
        put in it, and the rest of the response, goes inline."""
        if self._arena is None or self.directory is None:
            raise RuntimeError(f"{self._method}: no arena is open to finish")
        arena, self._arena = self._arena, None
        pending, self._pending = self._pending, []
        quota = self._transport.quota  # never None where a directory was accepted
        segment = arena.finish() if quota is None else quota.create(arena)
        if segment is None:  # refused after all (quota, or no room): the rest goes inline
            self.directory = None
            for array, field in pending:
                codec.encode(array, field, layout=self._layout)
            return None
        self._segments.append(segment)
        self.paths.append(self.directory / segment.name)
        return segment

    def _place(self, array: np.ndarray, segment: str, offset: int, recycle: bool) -> None:
        self._placed[array.ctypes.data] = (segment, offset, recycle, array.nbytes)


class StreamCall:
    """A server-streaming call's side of the transport: shared memory or inline for all its
    messages, decided once. Its segments (messages' and those the producer makes, see
    :attr:`owner`) belong to it: when the call ends they go to the client, or, if it was
    cancelled, are removed at once. Use as a context manager around the whole stream."""

    def __init__(self, transport: ServerTransport, context: grpc.ServicerContext, method: str) -> None:
        self.directory, self.client = transport.accept(context)
        self.plane, self.peer = transport.plane_of(context)
        self.tickets: list[bytes] = []  # every message's parked on the plane
        self.owner = object()  # the registry owner of every segment of this call
        self._transport = transport
        self._context = context
        self._method = method

    @property
    def registry(self) -> SegmentRegistry:
        """Where segments of this call are recorded (under :attr:`owner`)."""
        return self._transport.registry

    @property
    def pool(self) -> SegmentPool | None:
        """The server's reusable segment files in :attr:`directory` (None inline)."""
        return None if self.directory is None else self._transport.pool(self.directory)

    @property
    def quota(self) -> ShmQuota | None:
        """What decides, per message, whether the call's client may be sent more through shared memory."""
        return self._transport.quota

    def placement(self, fallback: Placement) -> Placement:
        """Where the stream's producer assembles each message's bulk array: a segment per
        message in the call's shared directory (owned by the call; ``fallback`` when the client's
        quota declines one), or ``fallback`` for an inline call."""
        if self.directory is None or self.quota is None:
            return fallback
        return ShmPlacement(self.directory, self.registry, self.owner, self.quota, self.client, fallback, self.pool)

    def backpressure(self, limit: int) -> Backpressure:
        """Bounds the messages sent through shared memory and not yet claimed by the client to
        ``limit`` (see :class:`~graphfeed.common.shm.Backpressure`)."""
        return Backpressure(self._context, limit)

    def response(self, shared: bool = True) -> Response:
        """The tensors of the stream's next message; ``shared`` False sends it inline (its
        producer was refused shared memory for it: see :class:`ShmQuota`)."""
        directory = self.directory if shared else None
        return Response(
            self._transport, self._method, directory, self.owner, self.client, self.plane, self.peer, self.tickets
        )

    def __enter__(self) -> StreamCall:
        return self

    def __exit__(self, *exc: object) -> None:
        if self.plane is not None and not self._context.is_active():  # cancelled: nobody reads what is parked
            self.plane.drop(self.tickets)
        if self.directory is None:
            return
        if self._context.is_active():  # ended normally: the client may still read buffered messages
            self.registry.release(self.owner)  # what it never claims goes after the TTL
        else:  # cancelled: nobody will claim what is left
            self.registry.drop(self.owner)
