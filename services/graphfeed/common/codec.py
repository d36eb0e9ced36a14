"""numpy <-> ``graphfeed.common.v1.Tensor``: dtype + shape + raw little-endian bytes.

The bytes travel inline, or, when the receiver offered a shared directory, in a shared-memory
segment (:mod:`graphfeed.common.shm`): ``encode(..., arena=...)`` places the array in the
response's segment, :func:`encode_ref` refers to one already there (a server decides which
through :class:`graphfeed.common.transport.Response`), and ``decode(..., segments=...)`` maps
it without a copy; a tensor in its message's bulk bytes (:mod:`graphfeed.common.bulk`) is
decoded as a view of them. Inline decoding
reads the message's bytes once and wraps them (``np.frombuffer``, read-only). Nothing here
pickles.
"""

from __future__ import annotations

import math
import sys
from typing import TYPE_CHECKING, Any

import numpy as np

from graphfeed.common.bulk import Bulk, BulkLayout, view
from graphfeed.common.errors import InvalidArgument
from graphfeed.common.limits import MAX_TENSOR_DIMS
from graphfeed.common.v1 import tensor_pb2

if TYPE_CHECKING:
    from graphfeed.common.shm import Arena, SegmentReader

DType = tensor_pb2.DType

BFLOAT16 = np.dtype([("bfloat16", "<u2")])
"""bfloat16 elements, which NumPy lacks: 2 bytes each, the high half of a float32 (see
:func:`to_bfloat16`, :func:`from_bfloat16`). A structured dtype of its own, so a bfloat16 array
is never mistaken for (or computed with as) uint16; ``arr.view(np.uint16)`` gives the bits."""

_TO_PROTO: dict[np.dtype, tensor_pb2.DType] = {
    np.dtype(np.bool_): DType.DTYPE_BOOL,
    np.dtype(np.int8): DType.DTYPE_INT8,
    np.dtype(np.uint8): DType.DTYPE_UINT8,
    np.dtype(np.int16): DType.DTYPE_INT16,
    np.dtype(np.uint16): DType.DTYPE_UINT16,
    np.dtype(np.int32): DType.DTYPE_INT32,
    np.dtype(np.uint32): DType.DTYPE_UINT32,
    np.dtype(np.int64): DType.DTYPE_INT64,
    np.dtype(np.uint64): DType.DTYPE_UINT64,
    np.dtype(np.float16): DType.DTYPE_FLOAT16,
    np.dtype(np.float32): DType.DTYPE_FLOAT32,
    np.dtype(np.float64): DType.DTYPE_FLOAT64,
    BFLOAT16: DType.DTYPE_BFLOAT16,
}
_FROM_PROTO: dict[int, np.dtype] = {v: k.newbyteorder("<") for k, v in _TO_PROTO.items()}

_MAX_BYTES = 2**63 - 1  # largest byte count a numpy array (an int64 size) can describe

if sys.byteorder != "little":  # pragma: no cover - every supported platform is little-endian
    raise ImportError("graphfeed's wire format assumes a little-endian host")


_HALF = np.uint32(16)  # a uint32 shift count: with a Python int, a 0-d uint32 array would become int64


def to_bfloat16(x: np.ndarray) -> np.ndarray:
    """``x`` (converted to float32 first if it is not) as :data:`BFLOAT16`, same shape: each
    element rounded to the nearest bfloat16, ties to even (as IEEE conversions, and PyTorch's
    ``.bfloat16()``, round). Finite values past the largest bfloat16 become infinite; NaN stays
    NaN (quiet, sign kept); subnormals round like any other value."""
    f = np.asarray(x, dtype=np.float32, order="C")
    bits = f.view(np.uint32)
    # Adding 0x7FFF, plus 1 when the kept half is odd, carries into the kept half exactly
    # when the dropped half is above the tie, or at the tie with an odd kept half. In place,
    # in one scratch array: this runs on every minibatch's features.
    r = np.right_shift(bits, _HALF, out=np.empty_like(bits))  # an array even for a 0-d ``x``
    r &= np.uint32(1)
    r += np.uint32(0x7FFF)
    r += bits
    r >>= _HALF
    nan = np.isnan(f)
    if nan.any():  # a NaN whose payload lies in the dropped half would round to infinity (or
        # carry into the sign): keep its high half with the quiet bit set instead.
        r[nan] = (bits[nan] >> _HALF) | np.uint32(0x0040)
    return r.astype(np.uint16).view(BFLOAT16)


def from_bfloat16(x: np.ndarray) -> np.ndarray:
    """A :data:`BFLOAT16` array as float32, same shape (exact: every bfloat16 is a float32).

    Raises:
        InvalidArgument: ``x`` is not a bfloat16 array.
    """
    arr = np.asarray(x)
    if arr.dtype != BFLOAT16:
        raise InvalidArgument(f"from_bfloat16 needs a bfloat16 array, got {arr.dtype}")
    return (arr.view(np.uint16).astype(np.uint32) << _HALF).view(np.float32)


def dtype_to_proto(dtype: np.dtype | type) -> tensor_pb2.DType:
    """The proto enum value of a numpy dtype; :class:`InvalidArgument` if unsupported."""
    dt = np.dtype(dtype)
    try:
        return _TO_PROTO[dt.newbyteorder("=")]
    except KeyError:
        raise InvalidArgument(f"dtype {dt} cannot travel as a Tensor") from None


def dtype_from_proto(value: int) -> np.dtype:
    """The numpy dtype of a proto enum value; :class:`InvalidArgument` if unknown."""
    try:
        return _FROM_PROTO[value]
    except KeyError:
        name = DType.Name(value) if value in DType.values() else str(value)
        raise InvalidArgument(f"tensor dtype {name} is not a valid element type") from None


def encode(
    array: np.ndarray,
    out: tensor_pb2.Tensor | None = None,
    arena: Arena | None = None,
    layout: BulkLayout | None = None,
) -> tensor_pb2.Tensor:
    """Encodes an array (any supported dtype, any shape, empty included).

    Args:
        array: the array; made C-contiguous if it is not.
        out: an existing message field to fill (e.g. ``request.seeds``); a new Tensor if None.
        arena: the response's shared-memory arena: the bytes go there (copied when the arena
            is finished) and the message carries only the reference.
        layout: the message's bulk bytes: the array is written there when the message is sent
            (copied once, from where it lies). Neither: inline bytes.
    """
    arr = np.asarray(array)
    msg = tensor_pb2.Tensor() if out is None else out
    msg.dtype = dtype_to_proto(arr.dtype)
    del msg.shape[:]
    msg.shape.extend(arr.shape)
    if layout is not None:
        layout.add(arr, msg)
    elif arena is None:
        msg.data = np.ascontiguousarray(arr).tobytes()
    else:
        msg.shm.segment = arena.name
        msg.shm.offset = arena.put(arr)
        msg.shm.recycle = arena.recycle
    return msg


def encode_ref(
    shape: tuple[int, ...], dtype: np.dtype, segment: str, offset: int, out: tensor_pb2.Tensor, recycle: bool = False
) -> tensor_pb2.Tensor:
    """Describes an array that already lives in shared-memory ``segment`` at byte ``offset``
    (``recycle``: a pool's file, handed back rather than unlinked by the reader)."""
    out.dtype = dtype_to_proto(dtype)
    del out.shape[:]
    out.shape.extend(shape)
    out.shm.segment = segment
    out.shm.offset = offset
    out.shm.recycle = recycle
    return out


def decode(
    msg: tensor_pb2.Tensor, what: str = "tensor", segments: SegmentReader | None = None, bulk: Bulk | None = None
) -> np.ndarray:
    """Decodes a Tensor without copying its bytes.

    Args:
        msg: the message.
        what: name used in error messages (e.g. ``"seeds"``).
        segments: maps the shared-memory segments this message refers to (the arrays are then
            writable private mappings); None when this side offered no shared directory.
        bulk: the bulk bytes of the message that carries ``msg`` (:mod:`graphfeed.common.bulk`);
            a tensor there is a view of them.

    Raises:
        InvalidArgument: unknown dtype, more than :data:`~graphfeed.common.limits.MAX_TENSOR_DIMS` dims,
            negative dims, a size beyond what an array can hold, a byte count that does not match, or a shared-memory
            reference this side did not ask for.
        DataLoss: a bulk reference outside the message's bulk bytes.
    """
    dtype = dtype_from_proto(msg.dtype)
    shape = _checked_shape(msg, what, dtype)
    payload = msg.WhichOneof("payload")
    if payload == "bulk":
        if bulk is None:
            raise InvalidArgument(f"{what}: bytes in the bulk field of a message that has none")
        return view(bulk, msg.bulk.offset, shape, dtype, what)
    if payload == "shm":
        if segments is None:
            raise InvalidArgument(f"{what}: bytes in shared memory, but no shared directory was offered")
        return segments.array(msg.shm.segment, msg.shm.offset, shape, dtype, msg.shm.recycle)
    count = math.prod(shape)
    data = msg.data  # every access copies the bytes out of the message: read it once
    if count * dtype.itemsize != len(data):
        raise InvalidArgument(
            f"{what}: shape {shape} of {np.dtype(dtype).name} needs {count * dtype.itemsize} bytes, got {len(data)}"
        )
    return np.frombuffer(data, dtype=dtype, count=count).reshape(shape)


def _checked_shape(msg: tensor_pb2.Tensor, what: str, dtype: np.dtype) -> tuple[int, ...]:
    """The message's shape, checked before any array is sized by it (exact integer products:
    numpy's int64 ones wrap around silently)."""
    if len(msg.shape) > MAX_TENSOR_DIMS:
        raise InvalidArgument(
            f"{what}: shape has {len(msg.shape)} dimensions, more than the limit of {MAX_TENSOR_DIMS}"
        )
    shape = tuple(int(d) for d in msg.shape)
    if any(d < 0 for d in shape):
        raise InvalidArgument(f"{what}: negative dimension in shape {shape}")
    # numpy refuses a shape whose non-zero extents overflow, even when another one is 0.
    span = math.prod(d for d in shape if d) * dtype.itemsize
    if span > _MAX_BYTES:
        raise InvalidArgument(
            f"{what}: shape {shape} of {dtype.name} spans {span} bytes, more than the limit of {_MAX_BYTES}"
        )
    return shape


def decode_ids(
    msg: tensor_pb2.Tensor,
    what: str = "ids",
    allow_empty: bool = False,
    segments: SegmentReader | None = None,
    bulk: Bulk | None = None,
) -> np.ndarray:
    """Decodes a 1-D int64 id tensor, the common case for requests.

    Raises:
        InvalidArgument: wrong dtype or rank, or empty when ``allow_empty`` is False.
    """
    if msg.dtype != DType.DTYPE_INT64:
        got = DType.Name(msg.dtype) if msg.dtype in DType.values() else str(msg.dtype)
        raise InvalidArgument(f"{what} must be DTYPE_INT64, got {got}")
    ids = decode(msg, what, segments, bulk)
    if ids.ndim != 1:
        raise InvalidArgument(f"{what} must be 1-D, got shape {ids.shape}")
    if not allow_empty and ids.size == 0:
        raise InvalidArgument(f"{what} must not be empty")
    return ids


def encode_exclusion(exclude: tuple[np.ndarray, np.ndarray] | None, request: Any) -> None:
    """Sets a sampling request's ``exclude_dst``/``exclude_eids`` (SampleNeighbors, SampleBlocks)
    from ``(dst gids, edge ids)`` as given (the receiver checks them); None leaves them unset."""
    if exclude is not None:
        dst, eids = exclude
        encode(np.asarray(dst), request.exclude_dst)
        encode(np.asarray(eids), request.exclude_eids)


def decode_exclusion(request: Any) -> tuple[np.ndarray, np.ndarray] | None:
    """A sampling request's ``(exclude_dst, exclude_eids)``: None when neither is set; one unset
    decodes as empty, so the core reports the length mismatch (it checks the pairs).

    Raises:
        InvalidArgument: a set one not a 1-D int64 tensor (the message names the field).
    """
    fields = ("exclude_dst", "exclude_eids")
    if not any(request.HasField(f) for f in fields):
        return None
    dst, eids = (
        decode_ids(getattr(request, f), f, allow_empty=True) if request.HasField(f) else np.empty(0, np.int64)
        for f in fields
    )
    return dst, eids
