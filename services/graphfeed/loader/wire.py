"""The element type a job's features travel in (loader.proto's ``JobSpec.feature_wire_dtype``).

A job may ask for its input features in float16 or bfloat16 instead of the stored float32 (or
float64): half the feature bytes on the loader -> trainer hop, and on the trainer's host ->
device copy, for a rounding error of about 2**-11 (float16, which also overflows past 65504
and loses precision below 6e-5) or 2**-8 (bfloat16, float32's range) relative to each value.

The loader converts in the stream's producer thread, after the gather, so the conversion of
one minibatch overlaps with sending the one before; the cache keeps full precision. Features
gathered on a GPU for a trainer in the same process (``Loader.stream(on_device=True)`` with a
GPU cache tier) cross no wire and stay at the stored precision: the loader drops the wire
dtype of such a stream. Labels and blocks are never converted.
"""

from __future__ import annotations

import numpy as np

from graphfeed.common.codec import to_bfloat16
from graphfeed.common.errors import InvalidArgument
from graphfeed.loader.job import JobSpec

__all__ = ["check_wire_dtype", "to_wire"]


def check_wire_dtype(job: JobSpec, stored: np.dtype) -> None:
    """Refuses a reduced-precision wire for features that are not floating point.

    Raises:
        InvalidArgument: ``job`` asks for a wire dtype and ``stored`` (the dtype of its
            ``feature_name``) is not a floating-point type.
    """
    if job.feature_wire_dtype and not np.issubdtype(stored, np.floating):
        raise InvalidArgument(
            f"feature_wire_dtype {job.feature_wire_dtype!r} needs floating-point features; "
            f"{job.feature_name!r} is {np.dtype(stored).name} (leave feature_wire_dtype empty)"
        )


def to_wire(features: np.ndarray, wire_dtype: str) -> np.ndarray:
    """Host ``features`` in ``wire_dtype`` ("" returns them as they are; float16 and bfloat16
    round to nearest, ties to even)."""
    if not wire_dtype:
        return features
    if wire_dtype == "float16":
        return features.astype(np.float16)
    if wire_dtype == "bfloat16":
        return to_bfloat16(features)
    raise InvalidArgument(f"feature_wire_dtype must be '', 'float16' or 'bfloat16', got {wire_dtype!r}")
