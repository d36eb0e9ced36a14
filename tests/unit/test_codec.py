"""Tensor codec: every dtype, empty and large arrays round-trip; bad messages are rejected."""

from __future__ import annotations

from typing import cast

import numpy as np
import pytest

from graphfeed.common import codec
from graphfeed.common.errors import InvalidArgument
from graphfeed.common.v1 import tensor_pb2

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


@pytest.mark.parametrize("dtype", DTYPES)
@pytest.mark.parametrize("shape", [(), (0,), (5,), (3, 4), (2, 0, 3), (2, 3, 4)])
def test_round_trip_every_dtype_and_shape(dtype: type[np.generic], shape: tuple[int, ...]) -> None:
    rng = np.random.default_rng(0)
    arr = (rng.random(shape) * 100).astype(dtype)
    msg = tensor_pb2.Tensor.FromString(codec.encode(arr).SerializeToString())
    out = codec.decode(msg)
    assert out.dtype == np.dtype(dtype)
    assert out.shape == shape
    assert out.tobytes() == arr.tobytes()


def test_large_array_is_decoded_without_copy() -> None:
    arr = np.arange(20_000_000, dtype=np.float32).reshape(-1, 100)  # 80 MB
    msg = codec.encode(arr)
    out = codec.decode(msg)
    assert np.array_equal(out, arr)
    assert not out.flags.writeable  # a view over the message's bytes, not a copy
    assert not out.flags.owndata


def test_non_contiguous_input_is_encoded_in_c_order() -> None:
    arr = np.arange(12, dtype=np.int64).reshape(3, 4).T
    assert np.array_equal(codec.decode(codec.encode(arr)), arr)


def test_encode_into_existing_field() -> None:
    req = tensor_pb2.SampledBlocks()
    codec.encode(np.array([7, 8], dtype=np.int64), req.input_nodes)
    assert codec.decode(req.input_nodes).tolist() == [7, 8]


@pytest.mark.parametrize(
    "msg, match",
    [
        (tensor_pb2.Tensor(dtype=tensor_pb2.DTYPE_UNSPECIFIED, shape=[1], data=b"\0" * 8), "not a valid element type"),
        # 99 is no DType (the stubs admit only named ones); protobuf keeps it, as from a newer peer.
        (tensor_pb2.Tensor(dtype=cast(tensor_pb2.DType, 99), shape=[1], data=b"\0" * 8), "not a valid element type"),
        (tensor_pb2.Tensor(dtype=tensor_pb2.DTYPE_INT64, shape=[2], data=b"\0" * 8), "needs 16 bytes, got 8"),
        (tensor_pb2.Tensor(dtype=tensor_pb2.DTYPE_INT64, shape=[-1], data=b""), "negative dimension"),
        (
            tensor_pb2.Tensor(dtype=tensor_pb2.DTYPE_INT64, shape=[1] * 33, data=b"\0" * 8),
            "33 dimensions, more than the limit of 32",
        ),
        # 2**64 elements wrap to 0 in an int64 product, which the empty payload would match.
        (
            tensor_pb2.Tensor(dtype=tensor_pb2.DTYPE_INT8, shape=[2**32, 2**32], data=b""),
            f"18446744073709551616 bytes, more than the limit of {2**63 - 1}",
        ),
        # numpy refuses these extents even though the 0 makes the array empty.
        (tensor_pb2.Tensor(dtype=tensor_pb2.DTYPE_INT64, shape=[0, 2**31, 2**31], data=b""), "more than the limit"),
        (tensor_pb2.Tensor(dtype=tensor_pb2.DTYPE_INT64, shape=[2**62], data=b""), "more than the limit"),
    ],
)
def test_malformed_tensors_are_invalid_arguments(msg: tensor_pb2.Tensor, match: str) -> None:
    with pytest.raises(InvalidArgument, match=match):
        codec.decode(msg, "x")


def test_decode_ids_checks_dtype_rank_and_emptiness() -> None:
    with pytest.raises(InvalidArgument, match="must be DTYPE_INT64, got DTYPE_FLOAT32"):
        codec.decode_ids(codec.encode(np.zeros(3, np.float32)), "seeds")
    with pytest.raises(InvalidArgument, match="must be 1-D"):
        codec.decode_ids(codec.encode(np.zeros((2, 2), np.int64)), "seeds")
    with pytest.raises(InvalidArgument, match="must not be empty"):
        codec.decode_ids(codec.encode(np.zeros(0, np.int64)), "seeds")
    assert codec.decode_ids(codec.encode(np.zeros(0, np.int64)), "ids", allow_empty=True).shape == (0,)


def test_unsupported_dtype_is_rejected_on_encode() -> None:
    with pytest.raises(InvalidArgument, match="cannot travel"):
        codec.encode(np.zeros(2, dtype=np.complex64))


def test_shapes_at_the_limits_decode() -> None:
    deep = codec.decode(tensor_pb2.Tensor(dtype=tensor_pb2.DTYPE_INT64, shape=[1] * 32, data=b"\0" * 8))
    assert deep.shape == (1,) * 32
    empty = codec.decode(tensor_pb2.Tensor(dtype=tensor_pb2.DTYPE_INT8, shape=[0, 2**31, 2**31], data=b""))
    assert empty.shape == (0, 2**31, 2**31) and empty.size == 0
