"""How many consecutive steps one pack holds: sized from the steps, not from a constant.

A pack holds the union of its steps' non-resident rows, each row once, so the bytes written
for an epoch are the sum of its packs' unions; the blow-up is that over the table's bytes. A
pack of one step writes every row the step reads (the rows of two steps are never shared); a
pack of the whole epoch writes each row at most once but must be held in memory whole by a
reader. :func:`group_steps` closes a pack as soon as its rows per step fall within the epoch's
share of a blow-up target (``max_blow_up``): packs stay as small as the target allows.

The bound is exact: with ``R`` non-resident rows of the table (``N`` rows), ``S`` steps and
the target ``B``, each step's share is ``a = (B * N - R) / S`` rows. A pack closed by the rule
holds at most ``k * a`` rows for its ``k`` steps; the epoch's last pack, which may end before
its rows per step fall that low, holds at most ``R`` rows (each non-resident row once). So the
epoch writes at most ``S * a + R = B * N`` rows, unless ``max_pack_bytes`` or
``steps_per_pack`` closed a pack first (they bound a reader's memory; the manifest's stats then
say whether the target was met). A target below ``R / N`` gives one pack for the epoch.
"""

from __future__ import annotations

from collections.abc import Iterable, Iterator
from dataclasses import dataclass

import numpy as np

from graphfeed.common.errors import InvalidArgument

__all__ = ["PackSizing", "group_steps"]


@dataclass(frozen=True)
class PackSizing:
    """The limits :func:`group_steps` sizes packs by.

    Attributes:
        max_blow_up: bytes of packs written per epoch / bytes of the table, at most (> 0).
        max_pack_bytes: a pack closes before its distinct rows pass this many bytes (what a
            reader holds per pack; 0: no limit). Never less than one step: a step that alone
            passes it gets a pack of its own.
        steps_per_pack: most steps in one pack (0: no limit).
    """

    max_blow_up: float = 3.0
    max_pack_bytes: int = 0
    steps_per_pack: int = 0

    def check(self) -> None:
        """Raises InvalidArgument naming the first bad limit."""
        if not self.max_blow_up > 0:
            raise InvalidArgument(
                f"max_blow_up must be > 0 (bytes written per epoch / table bytes), got {self.max_blow_up}"
            )
        if self.max_pack_bytes < 0:
            raise InvalidArgument(f"max_pack_bytes must be >= 0 (0: no limit), got {self.max_pack_bytes}")
        if self.steps_per_pack < 0:
            raise InvalidArgument(f"steps_per_pack must be >= 0 (0: no limit), got {self.steps_per_pack}")

    def step_share(self, table_rows: int, packed_rows: int, num_steps: int) -> float:
        """Rows a pack may hold per step of it (``a`` of the module docstring): the target's rows
        less one pack's worth for the epoch's last pack, spread over the steps."""
        return max(0.0, self.max_blow_up * table_rows - packed_rows) / max(1, num_steps)


def group_steps(
    steps: Iterable[np.ndarray],
    is_resident: np.ndarray,
    sizing: PackSizing,
    share_rows: float,
    row_bytes: int,
) -> Iterator[tuple[int, list[np.ndarray], list[np.ndarray]]]:
    """``(first step, input nodes, non-resident input nodes)`` of consecutive steps, one pack's
    worth at a time (see the module docstring; ``share_rows`` from :meth:`PackSizing.step_share`).

    Args:
        steps: each step's input nodes (gids), in step order.
        is_resident: bool per gid: left out of the packs.
    """
    seen = np.zeros(len(is_resident), dtype=bool)  # rows already in the open pack
    first, union = 0, 0
    inputs: list[np.ndarray] = []
    packed: list[np.ndarray] = []
    for step, ids in enumerate(steps):
        mine = ids[~is_resident[ids]]
        new = np.unique(mine[~seen[mine]])
        over_cap = sizing.max_pack_bytes and (union + len(new)) * row_bytes > sizing.max_pack_bytes
        if inputs and over_cap:
            yield first, inputs, packed
            seen[np.concatenate(packed)] = False
            first, inputs, packed, union = step, [], [], 0
            new = np.unique(mine)
        seen[new] = True
        union += len(new)
        inputs.append(ids)
        packed.append(mine)
        full = sizing.steps_per_pack and len(inputs) >= sizing.steps_per_pack
        if full or union <= len(inputs) * share_rows:
            yield first, inputs, packed
            seen[np.concatenate(packed)] = False
            first, inputs, packed, union = step + 1, [], [], 0
    if inputs:
        yield first, inputs, packed
