"""Pack sizing on hand-made steps whose grouping is known: a pack closes once its distinct rows
per step fit the epoch's share of the blow-up target, a byte cap closes it earlier but never
splits a step, and the written rows stay under the target."""

from __future__ import annotations

import numpy as np
import pytest

from graphfeed.pack.sizing import PackSizing, group_steps

# 8 rows; steps 0 and 1 read rows 0-3, steps 2 and 3 read rows 4-7; nothing resident
STEPS = [np.arange(4), np.arange(4), np.arange(4, 8), np.arange(4, 8)]
NOT_RESIDENT = np.zeros(8, dtype=bool)


def packs(sizing: PackSizing) -> list[tuple[list[int], int]]:
    """(steps, distinct rows) of each pack."""
    share = sizing.step_share(table_rows=8, packed_rows=8, num_steps=len(STEPS))
    out = []
    for first, inputs, packed in group_steps(STEPS, NOT_RESIDENT, sizing, share, row_bytes=1):
        out.append((list(range(first, first + len(inputs))), len(np.unique(np.concatenate(packed)))))
    return out


@pytest.mark.parametrize(
    ("target", "expected"),
    [
        (1.5, [([0, 1, 2, 3], 8)]),  # share 1 row a step: never met, one pack (written once: 1x)
        (2.0, [([0, 1], 4), ([2, 3], 4)]),  # share 2: met once a pair shares its 4 rows
        (3.0, [([0], 4), ([1], 4), ([2], 4), ([3], 4)]),  # share 4: every step alone fits (2x)
    ],
)
def test_packs_close_once_their_rows_per_step_fit_the_share(target: float, expected: list) -> None:
    got = packs(PackSizing(max_blow_up=target))
    assert got == expected and sum(rows for _, rows in got) <= target * 8


def test_a_byte_cap_closes_a_pack_early_but_never_splits_a_step() -> None:
    assert packs(PackSizing(max_blow_up=1.5, max_pack_bytes=6)) == [([0, 1], 4), ([2, 3], 4)]
    assert packs(PackSizing(max_blow_up=1.5, max_pack_bytes=2)) == [([0], 4), ([1], 4), ([2], 4), ([3], 4)]
    assert packs(PackSizing(max_blow_up=1.5, steps_per_pack=3)) == [([0, 1, 2], 8), ([3], 4)]
