"""Reduced-precision feature wire: bfloat16 rounding bit for bit, the job field's validation, and
the loader converting features after its cache (which keeps full precision)."""

from __future__ import annotations

from collections.abc import Iterator
from typing import Any

import numpy as np
import pytest
import torch

from graphfeed.common import codec
from graphfeed.common.codec import BFLOAT16, from_bfloat16, to_bfloat16
from graphfeed.common.errors import InvalidArgument
from graphfeed.common.v1 import tensor_pb2
from graphfeed.graph_store.partitions import LocalPartitionSet
from graphfeed.loader.core import Loader
from graphfeed.loader.job import JobSpec
from graphfeed.loader.wire import to_wire
from graphfeed.sampler.core import MultiHopSampler
from tests.graphs import arithmetic_features

JOB = JobSpec(job_id="wire", job_seed=4, split="train", batch_size=8, fanouts=(3, 2), shuffle=True)


def bf16_bits(f32_bits: list[int]) -> list[int]:
    """to_bfloat16 of the float32s with these bit patterns, as bit patterns."""
    x = np.array(f32_bits, dtype=np.uint32).view(np.float32)
    return to_bfloat16(x).view(np.uint16).tolist()


@pytest.mark.parametrize(
    "f32, bf16",
    [
        (0x3F800000, 0x3F80),  # 1.0, exact
        (0x3F807FFF, 0x3F80),  # just below the tie: down
        (0x3F808000, 0x3F80),  # tie, kept half even: stays
        (0x3F808001, 0x3F81),  # just above the tie: up
        (0x3F818000, 0x3F82),  # tie, kept half odd: up to even
        (0xBF818000, 0xBF82),  # the same, negative
        (0x80000000, 0x8000),  # -0.0 keeps its sign
        (0x7F800000, 0x7F80),  # +inf
        (0xFF800000, 0xFF80),  # -inf
        (0x7F7F7FFF, 0x7F7F),  # rounds down to the largest finite bfloat16
        (0x7F7FFFFF, 0x7F80),  # float32's largest finite value rounds past bfloat16's: +inf
        (0x00000001, 0x0000),  # smallest subnormal: to zero
        (0x00008000, 0x0000),  # subnormal tie, even: zero
        (0x00018000, 0x0002),  # subnormal tie, odd: up
        (0x00010000, 0x0001),  # smallest bfloat16 subnormal, exact
        (0x007FFFFF, 0x0080),  # largest float32 subnormal rounds up to the smallest normal
        (0x7FC00000, 0x7FC0),  # quiet NaN
        (0x7F800001, 0x7FC0),  # NaN whose payload is all in the dropped half: still NaN, not inf
        (0xFFFFFFFF, 0xFFFF),  # negative NaN, all ones: no carry into the sign
    ],
)
def test_to_bfloat16_rounds_to_nearest_even(f32: int, bf16: int) -> None:
    assert bf16_bits([f32]) == [bf16]


def test_every_bfloat16_round_trips_and_nan_stays_nan() -> None:
    every = np.arange(1 << 16, dtype=np.uint16).view(BFLOAT16)
    wide = from_bfloat16(every)
    assert wide.dtype == np.float32
    assert np.array_equal(wide.view(np.uint32), every.view(np.uint16).astype(np.uint32) << 16), "widening is exact"
    back = to_bfloat16(wide).view(np.uint16)
    nan = np.isnan(wide)
    assert nan.sum() == 2 * (0x80 - 1)  # exponent all ones, mantissa not zero, either sign
    assert np.array_equal(back[~nan], every.view(np.uint16)[~nan])
    assert np.isnan(from_bfloat16(back[nan].view(BFLOAT16))).all()
    assert np.array_equal(back[nan] >> 15, every.view(np.uint16)[nan] >> 15), "NaN keeps its sign"


def test_to_bfloat16_agrees_with_torch_on_every_magnitude() -> None:
    rng = np.random.default_rng(0)
    x = rng.integers(0, 1 << 32, size=200_000, dtype=np.uint64).astype(np.uint32).view(np.float32)
    x = x[~np.isnan(x)]  # torch's NaN bits differ (any NaN is fine; checked above)
    want = torch.from_numpy(x.copy()).bfloat16().view(torch.int16).numpy().view(np.uint16)
    assert np.array_equal(to_bfloat16(x).view(np.uint16), want)


def test_shapes_and_scalars_keep_their_shape() -> None:
    x = np.arange(24, dtype=np.float32).reshape(2, 3, 4) / 7
    assert to_bfloat16(x).shape == (2, 3, 4) and from_bfloat16(to_bfloat16(x)).shape == (2, 3, 4)
    assert from_bfloat16(to_bfloat16(np.array(1.5, np.float32))) == np.float32(1.5)
    assert to_bfloat16(np.zeros((0, 4), np.float32)).shape == (0, 4)
    with pytest.raises(InvalidArgument, match="bfloat16 array"):
        from_bfloat16(np.zeros(3, np.uint16))


def test_bfloat16_travels_as_its_own_dtype_not_uint16() -> None:
    x = to_bfloat16(np.array([[1.0, -2.5], [3.0e38, 1e-40]], np.float32))
    msg = codec.encode(x)
    assert msg.dtype == tensor_pb2.DType.DTYPE_BFLOAT16 and len(msg.data) == x.size * 2
    got = codec.decode(tensor_pb2.Tensor.FromString(msg.SerializeToString()))
    assert got.dtype == BFLOAT16 and np.array_equal(got.view(np.uint16), x.view(np.uint16))
    assert codec.encode(np.zeros(2, np.uint16)).dtype == tensor_pb2.DType.DTYPE_UINT16
    assert codec.dtype_from_proto(tensor_pb2.DType.DTYPE_UINT16) != BFLOAT16


@pytest.mark.parametrize("value", ["", "float16", "bfloat16"])
def test_job_accepts_the_documented_wire_dtypes(value: str) -> None:
    JobSpec(batch_size=8, fanouts=(2,), feature_wire_dtype=value).validate()


@pytest.mark.parametrize("value", ["float32", "half", "FLOAT16", "bf16"])
def test_job_refuses_any_other_wire_dtype(value: str) -> None:
    with pytest.raises(
        InvalidArgument, match=r"feature_wire_dtype must be '' \(the stored dtype\), 'float16' or 'bfloat16'"
    ):
        JobSpec(batch_size=8, fanouts=(2,), feature_wire_dtype=value).validate()


def test_to_wire_converts_only_when_asked() -> None:
    x = np.linspace(-3, 3, 40, dtype=np.float32).reshape(10, 4) / 3
    assert to_wire(x, "") is x
    half = to_wire(x, "float16")
    assert half.dtype == np.float16 and np.array_equal(half, x.astype(np.float16))
    assert np.array_equal(to_wire(x, "bfloat16").view(np.uint16), to_bfloat16(x).view(np.uint16))


@pytest.fixture
def loader(parts: LocalPartitionSet) -> Iterator[Loader]:
    made = Loader(parts, MultiHopSampler(parts), cache_policy="lru", cache_bytes=60 * 4 * 4)
    yield made
    made.close()


def _rounded(exact: np.ndarray, wire: str) -> np.ndarray:
    return exact.astype(np.float16) if wire == "float16" else to_bfloat16(exact)


@pytest.mark.parametrize("wire", ["float16", "bfloat16"])
def test_stream_sends_rounded_features_and_the_cache_keeps_full_precision(
    loader: Loader, orig: np.ndarray, wire: str
) -> None:
    job = JobSpec(**{**JOB.__dict__, "feature_wire_dtype": wire})
    assert loader.describe(job).feature_dtype == np.float32, "DescribeJob names the stored dtype"
    for epoch in (0, 1):  # the second epoch reads rows the first admitted
        for mb in loader.stream(job, epoch):
            exact = arithmetic_features(orig[mb.blocks.input_nodes])
            assert mb.features.dtype == _rounded(exact, wire).dtype
            assert np.array_equal(mb.features.view(np.uint16), _rounded(exact, wire).view(np.uint16))
            assert mb.labels.dtype == np.int64, "labels are never converted"
    hits = 0
    for mb in loader.stream(JOB, 1):  # full precision from the same (now warm) cache
        assert np.array_equal(mb.features, arithmetic_features(orig[mb.blocks.input_nodes]))
        hits += mb.stats.cache_hits
    assert hits > 0, "the full-precision job read rows the reduced-precision jobs cached"


def test_bfloat16_rounding_shows_in_the_arithmetic_features(loader: Loader, orig: np.ndarray) -> None:
    """Features above 256 are not all bfloat16 values: the stream really rounds them."""
    job = JobSpec(**{**JOB.__dict__, "feature_wire_dtype": "bfloat16"})
    diffs = [
        from_bfloat16(mb.features) - arithmetic_features(orig[mb.blocks.input_nodes]) for mb in loader.stream(job, 0)
    ]
    assert any(np.any(d != 0) for d in diffs)
    assert all(np.all(np.abs(d) <= 1.0) for d in diffs)  # half a unit in the last place below 400 is 1


def test_a_wire_dtype_for_integer_features_is_refused(loader: Loader) -> None:
    job = JobSpec(**{**JOB.__dict__, "feature_name": "label", "feature_wire_dtype": "float16"})
    with pytest.raises(
        InvalidArgument, match="feature_wire_dtype 'float16' needs floating-point features; 'label' is int64"
    ):
        loader.describe(job)
    with pytest.raises(InvalidArgument, match="needs floating-point features"):
        loader.stream(job, 0)


@pytest.mark.parametrize("wire", ["float16", "bfloat16"])
def test_embedded_data_loader_upcasts_to_float32(loader: Loader, orig: np.ndarray, wire: str) -> None:
    from graphfeed.trainer.dataloader import EmbeddedDataLoader

    job: dict[str, Any] = dict(fanouts=[3, 2], batch_size=8, seed=4, job_id="wire-embedded")
    dl = EmbeddedDataLoader(loader, "train", feature_wire_dtype=wire, **job)
    steps = 0
    for input_nodes, _out, blocks in dl:
        feat = blocks[0].srcdata["feat"]
        exact = arithmetic_features(orig[input_nodes.numpy()])
        want = exact.astype(np.float16).astype(np.float32) if wire == "float16" else from_bfloat16(to_bfloat16(exact))
        assert feat.dtype == torch.float32 and np.array_equal(feat.numpy(), want)
        steps += 1
    assert steps == len(dl) == 8
    full = EmbeddedDataLoader(loader, "train", **job)
    _i, _o, blocks = next(iter(full))
    assert blocks[0].srcdata["feat"].dtype == torch.float32, "no wire dtype: the stored type, as before"


def test_device_features_stay_at_the_stored_precision(
    parts: LocalPartitionSet, orig: np.ndarray, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Features gathered on the GPU (here the kernel emulator) cross no wire: not converted."""
    from graphfeed.gpu_kernels.emulator import EmulatorBackend, compiler
    from graphfeed.gpu_kernels.memory import to_torch
    from graphfeed.loader.cache import gpu_tier as gpu_tier

    if compiler() is None:
        pytest.skip("no C++20 compiler for the kernel emulator")
    monkeypatch.setattr(gpu_tier, "gpu_available", lambda: True)
    monkeypatch.setattr(gpu_tier, "cuda_backend", lambda: EmulatorBackend(block=64, max_blocks=2))
    loader = Loader(parts, MultiHopSampler(parts), cache_policy="lru", cache_bytes=20 * 16, gpu_cache_bytes=14 * 16)
    job = JobSpec(**{**JOB.__dict__, "feature_wire_dtype": "bfloat16"})
    try:
        assert loader.gpu_features("feat")
        for on_device, host in zip(loader.stream(job, 0, on_device=True), loader.stream(job, 0)):
            exact = arithmetic_features(orig[host.blocks.input_nodes])
            assert np.array_equal(to_torch(on_device.features).numpy(), exact), "device features: float32, exact"
            assert host.features.dtype == BFLOAT16 and np.array_equal(
                from_bfloat16(host.features), from_bfloat16(to_bfloat16(exact))
            )
    finally:
        loader.close()
