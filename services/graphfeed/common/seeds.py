"""Every random choice derives from (job seed, epoch, step): see :func:`derive_seed`."""

from __future__ import annotations

import hashlib
import struct

import numpy as np


def derive_seed(job_seed: int, *path: int | str) -> int:
    """A 64-bit seed that depends only on ``job_seed`` and the path, e.g. (epoch, step, hop).

    Uses BLAKE2b so that nearby inputs give unrelated seeds and the value is the same on
    every platform and Python version (``hash()`` is not).
    """
    h = hashlib.blake2b(digest_size=8)
    h.update(struct.pack("<Q", job_seed & 0xFFFFFFFFFFFFFFFF))
    for part in path:
        if isinstance(part, str):
            h.update(b"s" + part.encode())
        else:
            h.update(b"i" + struct.pack("<q", int(part)))
    return struct.unpack("<Q", h.digest())[0]


def rng(job_seed: int, *path: int | str) -> np.random.Generator:
    """A numpy Generator (Philox, counter-based) seeded by :func:`derive_seed`."""
    return np.random.Generator(np.random.Philox(derive_seed(job_seed, *path)))
