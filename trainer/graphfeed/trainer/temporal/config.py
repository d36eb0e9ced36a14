"""The TGN job's settings (no torch: the ``graphfeed`` CLI builds its flags from them)."""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path


@dataclass(frozen=True)
class TGNConfig:
    """Hyper-parameters and run settings (defaults as in PyG's TGN example)."""

    seed: int = 0
    epochs: int = 1
    batch_size: int = 200  # events per batch
    fanout: int = 10  # most recent neighbours attended to
    memory_dim: int = 100
    time_dim: int = 100
    embed_dim: int = 100
    heads: int = 2
    lr: float = 1e-4
    mrr_negatives: int = (
        19  # val/test negatives per event: MRR ranks the positive among 1 + this many; AP uses the first
    )
    chunks: int = 10  # metric lines per epoch (one per 10 % of the events by default)
    checkpoint: Path | None = None
    checkpoint_every: int = 50  # batches
    crash_after_batches: int | None = None  # tests: SIGKILL this process after that many batches of this run
