"""A loader's read of node-data rows into their minibatch places, chunk by chunk.

A ``GetNodeData`` answer comes in chunks (``start``: the first row's index among the ids
asked for). A chunk whose bytes wait on the graph-store's bulk plane is read from the plane
straight into the rows' places (:func:`~graphfeed.common.recv_rows.recv_rows_into`: no buffer,
no second copy); one whose bytes came with it (inline, or in shared memory) is placed from
there. The answers are deserialized with :func:`deferred`, which leaves the plane's bytes where
they are until the reader knows where they go.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import TypeVar

import numpy as np
from google.protobuf.message import Message

from graphfeed.common import bulk, codec
from graphfeed.common.bulk import Received
from graphfeed.common.errors import DataLoss, GraphfeedError
from graphfeed.common.plane import PlaneClient
from graphfeed.common.recv_rows import recv_rows_into
from graphfeed.common.rows import place_rows
from graphfeed.common.shm import SegmentReader
from graphfeed.graph_store.v1 import graph_store_pb2 as pb

M = TypeVar("M", bound=Message)


def deferred(cls: type[M]) -> Callable[[bytes], Received[M]]:
    """A gRPC response deserializer like :func:`graphfeed.common.bulk.deserializer`, except that
    a message whose bulk bytes wait on the bulk plane (``bulk_ticket``) arrives without them."""

    def read(data: bytes) -> Received[M]:
        try:
            return bulk.parse(cls, data)
        except GraphfeedError as exc:
            return Received(None, memoryview(b""), error=str(exc), failure=type(exc))

    return read


def place_chunk(
    r: Received[pb.GetNodeDataResponse],
    where: str,
    out: np.ndarray,
    positions: np.ndarray,
    plane: PlaneClient | None,
    segments: SegmentReader | None,
) -> tuple[int, int]:
    """Puts the rows of one chunk of a ``GetNodeData`` answer for ``len(positions)`` ids at
    ``out[positions[start:]]``; returns ``(rows, bytes)`` placed.

    Raises:
        DataLoss: rows that do not fit the ids asked for or ``out``'s row shape and dtype.
        Unavailable: the plane's bytes could not be read (ask again).
    """
    msg = r.message
    t = msg.rows
    ticketed = msg.HasField("bulk_ticket") and t.WhichOneof("payload") == "bulk"
    rows = None if ticketed else codec.decode(t, where, segments, r.bulk)
    shape = tuple(int(d) for d in t.shape) if rows is None else rows.shape
    dtype = codec.dtype_from_proto(t.dtype) if rows is None else rows.dtype
    start, n = int(msg.start), shape[0] if shape else -1
    row_bytes = out.itemsize * int(np.prod(out.shape[1:], dtype=np.int64))
    if shape[1:] != out.shape[1:] or dtype != out.dtype or n < 0 or not 0 <= start <= len(positions) - n:
        raise DataLoss(
            f"{where}: chunk at {start} of {list(shape)} {dtype} does not fit {len(positions)} rows of "
            f"{list(out.shape[1:])} {out.dtype}"
        )
    at = positions[start : start + n]
    if rows is not None:
        place_rows(rows, out, at)
        return n, rows.nbytes
    total, offset = int(msg.bulk_bytes), int(t.bulk.offset)
    if plane is None or offset + n * row_bytes > total:
        raise DataLoss(f"{where}: {n} rows at byte {offset} of {total} parked on a bulk plane not offered")
    ticket = msg.bulk_ticket
    plane.fetch_into(
        ticket.ticket,
        ticket.port,
        total,
        ticket.host,
        lambda conn: recv_rows_into(conn, out, at, offset, total - offset - n * row_bytes),
    )
    return n, n * row_bytes
