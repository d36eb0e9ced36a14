"""Checkpoint files of the training jobs (GraphSAGE in ``train.py``, TGN in ``temporal/loop.py``)."""

from __future__ import annotations

import os
from pathlib import Path

import torch


def save_checkpoint(path: Path, state: dict) -> None:
    """Writes atomically: a crash leaves either the old or the new checkpoint, never half."""
    tmp = path.with_suffix(path.suffix + ".tmp")
    with open(tmp, "wb") as f:
        torch.save(state, f)
        f.flush()
        os.fsync(f.fileno())
    os.replace(tmp, path)
