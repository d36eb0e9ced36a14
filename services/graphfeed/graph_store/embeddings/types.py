"""Typed values of trainable embeddings (no protobuf, no files): a table's parameters, a
training step's identity and the answer to a push."""

from __future__ import annotations

import re
from dataclasses import asdict, dataclass
from typing import Literal

from graphfeed.common.errors import InvalidArgument

OptimizerName = Literal["adagrad", "adam"]
OPTIMIZERS: tuple[str, ...] = ("adagrad", "adam")
MAX_DIM = 65536
_NAME = re.compile(r"^[A-Za-z0-9][A-Za-z0-9._:/-]{0,199}$")


@dataclass(frozen=True, order=True)
class StepKey:
    """A training step of a job: ``(epoch, step)``, ordered; :data:`NO_STEP` is before any."""

    epoch: int
    step: int

    def __str__(self) -> str:
        return "no step" if self == NO_STEP else f"epoch {self.epoch} step {self.step}"


NO_STEP = StepKey(-1, -1)
"""The version of a table to which no step was applied (its seeded initial rows)."""


@dataclass(frozen=True)
class EmbeddingSpec:
    """What a table is, fixed at creation; a second creation must name the same.

    Attributes:
        name: the table's name (1 to 200 characters ``[A-Za-z0-9._:/-]``, not starting with
            punctuation), e.g. ``"job-1:author"``.
        ntype: the node type whose rows the table holds (every node of it owned here).
        dim: width of a row (float32).
        job: the training job whose pushes the table takes.
        optimizer: ``"adagrad"`` (DGL's ``SparseAdagrad``) or ``"adam"`` (DGL's ``SparseAdam``).
        lr: learning rate.
        eps: added to the denominator (DGL's defaults: 1e-10 for Adagrad, 1e-8 for Adam).
        beta1, beta2: Adam's decay rates (unused by Adagrad).
        init_low, init_high: rows start uniform in ``[init_low, init_high)``.
        seed: the initializer's seed: a row is a pure function of ``(seed, global id)``.
    """

    name: str
    ntype: str
    dim: int
    job: str
    optimizer: OptimizerName = "adam"
    lr: float = 0.01
    eps: float = 1e-8
    beta1: float = 0.9
    beta2: float = 0.999
    init_low: float = -1.0
    init_high: float = 1.0
    seed: int = 0

    def check(self) -> EmbeddingSpec:
        """``self`` after checking every field (InvalidArgument saying which is wrong)."""
        if not _NAME.match(self.name):
            raise InvalidArgument(
                f"embedding name {self.name!r} must be 1 to 200 characters of [A-Za-z0-9._:/-], starting alphanumeric"
            )
        if not 1 <= self.dim <= MAX_DIM:
            raise InvalidArgument(f"embedding {self.name!r}: dim must be in [1, {MAX_DIM}], got {self.dim}")
        if self.optimizer not in OPTIMIZERS:
            raise InvalidArgument(
                f"embedding {self.name!r}: optimizer must be one of {OPTIMIZERS}, got {self.optimizer!r}"
            )
        if not (self.lr > 0 and self.eps > 0 and 0 <= self.beta1 < 1 and 0 <= self.beta2 < 1):
            raise InvalidArgument(
                f"embedding {self.name!r}: need lr > 0, eps > 0 and betas in [0, 1); got lr={self.lr}, "
                f"eps={self.eps}, beta1={self.beta1}, beta2={self.beta2}"
            )
        if not self.init_low <= self.init_high:
            raise InvalidArgument(f"embedding {self.name!r}: init_low {self.init_low} > init_high {self.init_high}")
        if not 0 <= self.seed < 1 << 64:
            raise InvalidArgument(f"embedding {self.name!r}: seed must be in [0, 2**64), got {self.seed}")
        if not self.job or not self.ntype:
            raise InvalidArgument(f"embedding {self.name!r}: job and ntype must be given")
        return self

    def to_dict(self) -> dict:
        return asdict(self)


@dataclass(frozen=True)
class StepPush:
    """One rank's gradients of one step for the rows of one partition (maybe none of them)."""

    key: StepKey
    rank: int
    world_size: int
    digest: str  # of ids and grads: a replay must carry the same


@dataclass(frozen=True)
class PushAck:
    """The answer to a push.

    Attributes:
        duplicate: this rank's push of this step had already been taken (nothing taken again).
        applied: the table's last applied step after the push (the step itself once every
            rank's push arrived).
        pending_ranks: ranks whose push of this step is still awaited (empty once applied).
    """

    duplicate: bool
    applied: StepKey
    pending_ranks: tuple[int, ...]
