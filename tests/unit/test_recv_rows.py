"""Rows read from a socket straight into their places (readv over runs of positions)."""

from __future__ import annotations

import socket
import threading

import numpy as np
import pytest

from graphfeed.common import codec
from graphfeed.common.bulk import Received
from graphfeed.common.errors import DataLoss
from graphfeed.common.recv_rows import recv_rows_into
from graphfeed.graph_store.rows_in_place import place_chunk
from graphfeed.graph_store.v1 import graph_store_pb2 as pb


def _send_slowly(sock: socket.socket, data: bytes, piece: int) -> None:
    for i in range(0, len(data), piece):  # pieces much smaller than the iovecs' runs: partial readv's
        sock.sendall(data[i : i + piece])


@pytest.mark.parametrize(("rows", "piece", "skip", "after"), [(5000, 777, 64, 24), (3, 1, 0, 0), (0, 10, 8, 8)])
def test_rows_land_at_their_positions_and_nothing_else_is_touched(rows: int, piece: int, skip: int, after: int) -> None:
    rng = np.random.default_rng(rows)
    table = rng.random((rows, 33), dtype=np.float32)  # 132-byte rows: no word alignment assumed
    out = np.full((2 * rows + 7, 33), -1.0, dtype=np.float32)
    positions = np.sort(rng.choice(len(out), rows, replace=False))  # runs of every length, gaps
    positions[: rows // 2] = np.arange(rows // 2) + 3  # and one long run
    positions = np.unique(positions)
    positions = np.concatenate([positions, np.setdiff1d(np.arange(len(out)), positions)])[:rows]
    data = b"p" * skip + table.tobytes() + b"s" * after
    a, b = socket.socketpair()
    b.settimeout(10.0)  # non-blocking underneath, as the plane's sockets are
    try:
        writer = threading.Thread(target=_send_slowly, args=(a, data, piece))
        writer.start()
        recv_rows_into(b, out, positions, skip, after)
        writer.join()
        a.sendall(b"next")
        assert b.recv(4) == b"next", "exactly the answer's bytes were read"
    finally:
        a.close()
        b.close()
    np.testing.assert_array_equal(out[positions], table)
    untouched = np.setdiff1d(np.arange(len(out)), positions)
    assert (out[untouched] == -1.0).all()


def test_a_non_contiguous_destination_is_read_then_placed() -> None:
    table = np.arange(40, dtype=np.int64).reshape(20, 2)
    out = np.zeros((20, 4), dtype=np.int64)[:, ::2]  # every other column: not C-contiguous
    positions = np.arange(20)[::-1].copy()
    a, b = socket.socketpair()
    try:
        a.sendall(b"xx" + table.tobytes())
        recv_rows_into(b, out, positions, 2, 0)
    finally:
        a.close()
        b.close()
    np.testing.assert_array_equal(out[positions], table)


def test_a_peer_that_closes_early_is_a_connection_error() -> None:
    out = np.zeros((100, 8), dtype=np.float64)
    a, b = socket.socketpair()
    b.settimeout(10.0)
    a.sendall(b"\0" * 1000)
    a.close()
    try:
        with pytest.raises(ConnectionError):
            recv_rows_into(b, out, np.arange(100), 0, 0)
    finally:
        b.close()


@pytest.mark.parametrize(("shape", "start"), [([-5, 4], 0), ([3, 4], 8), ([3, 5], 0)])
def test_a_parked_chunk_that_does_not_fit_is_data_loss_before_any_read(shape: list[int], start: int) -> None:
    msg = pb.GetNodeDataResponse(start=start, bulk_bytes=1 << 20)
    msg.rows.dtype = codec.dtype_to_proto(np.dtype(np.float32))
    msg.rows.shape.extend(shape)
    msg.rows.bulk.offset = 0
    msg.bulk_ticket.ticket, msg.bulk_ticket.port = b"t" * 16, 1
    out = np.zeros((10, 4), dtype=np.float32)
    with pytest.raises(DataLoss, match="does not fit"):  # no plane is even asked (None would fail otherwise)
        place_chunk(Received(msg, memoryview(b"")), "graph-store x", out, np.arange(10), None, None)
