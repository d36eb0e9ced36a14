"""Receiving feature rows straight into their places in a minibatch: one ``readv`` per 1024 runs.

A loader asks each graph-store for the rows of the input nodes it owns, in input-node order,
and each row belongs at ``out[positions[i]]`` (interleaved with the other owners' rows). Read
into a buffer and then placed (:func:`~graphfeed.common.rows.place_rows`), every byte was copied
twice after the kernel's copy; the placing alone was a third of the Kubernetes layout loader's
CPU (240 MB of rows per edge minibatch on the large preset). Here the kernel copies the
socket's bytes into the rows' places itself: the positions become an ``iovec`` per run of
consecutive positions, handed to ``readv(2)`` 1024 at a time.

Plain TCP sockets only; a TLS socket's bytes must pass through Python's ``ssl`` reader, so they
are read into a buffer and placed as before.
"""

from __future__ import annotations

import ctypes
import errno
import os
import socket
import ssl

import numba
import numpy as np

from graphfeed.common.rows import place_rows, run_end

_IOV_MAX = 1024  # iovecs one readv takes (Linux's UIO_MAXIOV)
_libc = ctypes.CDLL(None, use_errno=True)
_readv = _libc.readv
_readv.argtypes = [ctypes.c_int, ctypes.c_void_p, ctypes.c_int]
_readv.restype = ctypes.c_ssize_t


@numba.njit(cache=True, nogil=True)
def _runs(base, row_bytes, positions, iov, first):  # noqa: ANN001, ANN202
    """Writes from ``iov[first]`` one (address, length) pair per run of consecutive
    ``positions``; returns the index after the last."""
    k = first
    i = 0
    while i < len(positions):
        j = run_end(positions, i)
        iov[k, 0] = base + np.uint64(positions[i]) * row_bytes
        iov[k, 1] = np.uint64(j - i) * row_bytes
        k += 1
        i = j
    return k


@numba.njit(cache=True, nogil=True)
def _consumed(iov, i, got):  # noqa: ANN001, ANN202
    """Advances past the ``got`` bytes a readv from ``iov[i]`` on read; a partly filled iovec
    is shortened to its rest. Returns the first iovec not read in full."""
    while got > 0:
        if got >= iov[i, 1]:
            got -= iov[i, 1]
            i += 1
        else:
            iov[i, 0] += np.uint64(got)
            iov[i, 1] -= np.uint64(got)
            got = 0
    return i


def recv_rows_into(conn: socket.socket, out: np.ndarray, positions: np.ndarray, skip: int, after: int) -> None:
    """Reads ``skip`` bytes (discarded), ``len(positions)`` rows of ``out`` (the i-th to
    ``out[positions[i]]``, in any order; ``positions`` valid: not checked here) and
    ``after`` bytes (discarded) from ``conn``, blocking as its timeout says.

    Raises:
        ConnectionError: the peer closed the connection first. OSError: a socket error (a
        timeout included).
    """
    positions = np.ascontiguousarray(positions, dtype=np.int64)
    if isinstance(conn, ssl.SSLSocket) or not out.flags.c_contiguous:
        _recv_buffered(conn, out, positions, skip, after)
        return
    row_bytes = out.itemsize * int(np.prod(out.shape[1:], dtype=np.int64))
    scratch = np.empty(max(skip, after, 1), dtype=np.uint8)
    iov = np.empty((len(positions) + 2, 2), dtype=np.uint64)
    k = 0
    if skip:
        iov[0] = (scratch.ctypes.data, skip)
        k = 1
    k = _runs(np.uint64(out.ctypes.data), np.uint64(row_bytes), positions, iov, k)
    if after:
        iov[k] = (scratch.ctypes.data, after)
        k += 1
    _readv_all(conn, iov[:k])


def _readv_all(conn: socket.socket, iov: np.ndarray) -> None:
    """Fills every iovec of ``iov`` (modified) from ``conn``."""
    fd, i, k = conn.fileno(), 0, len(iov)
    while i < k:
        got = _readv(fd, iov[i:].ctypes.data, min(_IOV_MAX, k - i))  # GIL released by ctypes
        if got > 0:
            i = _consumed(iov, i, got)
        elif got == 0:
            raise ConnectionError("connection closed")
        else:
            err = ctypes.get_errno()
            if err not in (errno.EAGAIN, errno.EWOULDBLOCK, errno.EINTR):
                raise OSError(err, os.strerror(err))
            # A socket with a timeout is non-blocking underneath: wait for data as recv would.
            if conn.recv(1, socket.MSG_PEEK) == b"":
                raise ConnectionError("connection closed")


def recv_exact(conn: socket.socket, view: memoryview) -> None:
    """Fills ``view`` from ``conn``.

    Raises:
        ConnectionError: the peer closed the connection first.
    """
    got = 0
    while got < len(view):
        n = conn.recv_into(view[got:])
        if n == 0:
            raise ConnectionError("connection closed")
        got += n


def _recv_buffered(conn: socket.socket, out: np.ndarray, positions: np.ndarray, skip: int, after: int) -> None:
    buf = np.empty(skip + len(positions) * out[0:1].nbytes + after, dtype=np.uint8)
    recv_exact(conn, buf.data)
    rows = buf[skip : len(buf) - after].view(out.dtype).reshape((len(positions), *out.shape[1:]))
    place_rows(rows, out, positions)
