"""to_block: DGL's src-node numbering (dst prefix, then first appearance), on hand examples."""

from __future__ import annotations

import numpy as np
import pytest

from graphfeed.sampler.compact import compact_hop, to_block


def i64(*xs: int) -> np.ndarray:
    return np.array(xs, dtype=np.int64)


def test_dst_prefix_then_first_appearance_with_duplicates() -> None:
    # dst 10 <- {30, 20, 30}; dst 20 <- {}; dst 5 <- {40, 10, 50, 40}
    dst = i64(10, 20, 5)
    offsets = i64(0, 3, 3, 7)
    src = i64(30, 20, 30, 40, 10, 50, 40)
    eids = i64(100, 101, 102, 103, 104, 105, 106)

    src_nodes, b = to_block(dst, offsets, src, eids)

    np.testing.assert_array_equal(src_nodes, i64(10, 20, 5, 30, 40, 50))
    assert (b.num_src, b.num_dst) == (6, 3)
    np.testing.assert_array_equal(b.edge_src, i64(3, 1, 3, 4, 0, 5, 4))
    np.testing.assert_array_equal(b.edge_dst, i64(0, 0, 0, 2, 2, 2, 2))
    np.testing.assert_array_equal(b.edge_ids, eids)
    np.testing.assert_array_equal(src_nodes[b.edge_src], src)  # local ids map back to the gids
    for a in (src_nodes, b.edge_src, b.edge_dst, b.edge_ids):
        assert a.dtype == np.int64


def test_first_appearance_is_not_sorted_order() -> None:
    # New sources appear as 9, 1, 7: numbering follows appearance, not value.
    src_nodes, b = to_block(i64(4), i64(0, 4), i64(9, 1, 9, 7), i64(0, 1, 2, 3))
    np.testing.assert_array_equal(src_nodes, i64(4, 9, 1, 7))
    np.testing.assert_array_equal(b.edge_src, i64(1, 2, 1, 3))


def test_empty_src() -> None:
    src_nodes, b = to_block(i64(3, 1, 2), i64(0, 0, 0, 0), i64(), i64())
    np.testing.assert_array_equal(src_nodes, i64(3, 1, 2))
    assert (b.num_src, b.num_dst, b.num_edges) == (3, 3, 0)
    assert b.edge_src.dtype == b.edge_dst.dtype == np.int64


def test_all_src_already_dst() -> None:
    src_nodes, b = to_block(i64(7, 3, 5), i64(0, 2, 3, 4), i64(5, 3, 7, 7), i64(1, 2, 3, 4))
    np.testing.assert_array_equal(src_nodes, i64(7, 3, 5))
    assert b.num_src == b.num_dst == 3
    np.testing.assert_array_equal(b.edge_src, i64(2, 1, 0, 0))
    np.testing.assert_array_equal(b.edge_dst, i64(0, 0, 1, 2))


def test_matches_reference_loop_on_random_input() -> None:
    rng = np.random.default_rng(0)
    dst = rng.permutation(1000)[:50].astype(np.int64)
    counts = rng.integers(0, 6, size=50)
    offsets = np.concatenate([[0], np.cumsum(counts)]).astype(np.int64)
    src = rng.integers(0, 1000, size=offsets[-1]).astype(np.int64)
    src_nodes, b = to_block(dst, offsets, src, np.arange(len(src), dtype=np.int64))

    expect: dict[int, int] = {int(v): i for i, v in enumerate(dst)}
    for v in src:
        expect.setdefault(int(v), len(expect))
    np.testing.assert_array_equal(src_nodes, np.array(list(expect), dtype=np.int64))
    np.testing.assert_array_equal(b.edge_src, [expect[int(v)] for v in src])
    np.testing.assert_array_equal(b.edge_dst, np.repeat(np.arange(50), counts))


def test_rejects_inconsistent_csr_and_duplicate_dst() -> None:
    with pytest.raises(ValueError, match="CSR"):
        to_block(i64(1, 2), i64(0, 1), i64(3), i64(0))
    with pytest.raises(ValueError, match="unique"):
        to_block(i64(1, 1), i64(0, 0, 0), i64(), i64())


def test_answers_of_several_partitions_merge_into_frontier_order() -> None:
    """compact_hop reads each partition's answer in place; the result equals to_block of the
    answers concatenated in frontier order, whatever the arrays' origin (read-only or not)."""
    from graphfeed.sampler.compact import compact_hop

    dst = i64(10, 20, 5, 7)  # partition 0 owns 5 and 7, partition 1 owns 10 and 20
    order = i64(2, 3, 0, 1)  # grouped positions: 5, 7 | 10, 20
    part0 = (i64(0, 2, 3), i64(10, 99, 5), i64(1, 2, 3))  # 5 <- {10, 99}; 7 <- {5}
    part1 = (i64(0, 1, 1), i64(7), i64(4))  # 10 <- {7}; 20 <- {}
    readonly = np.frombuffer(part1[1].tobytes(), dtype=np.int64)  # as decoded from inline gRPC
    src_nodes, b = compact_hop(
        dst, order, i64(0, 2, 4), [part0, (part1[0], readonly, part1[2])], np.full(100, -1, np.int32)
    )
    ref_nodes, ref = to_block(dst, i64(0, 1, 1, 3, 4), i64(7, 10, 99, 5), i64(4, 1, 2, 3), num_nodes=100)
    np.testing.assert_array_equal(src_nodes, ref_nodes)
    for field in ("edge_src", "edge_dst", "edge_ids"):
        np.testing.assert_array_equal(getattr(b, field), getattr(ref, field))


@pytest.mark.parametrize("ids_dtype", [np.int32, np.int64])
def test_narrow_writes_the_same_block_as_int32_where_it_fits(ids_dtype: type) -> None:
    """narrow=True (the sampler's gRPC answers) compacts the edge arrays as int32; edge ids stay
    as wide as the partitions sent them (int64 ids may not fit)."""
    rng = np.random.default_rng(3)
    dst = rng.permutation(5000)[:300].astype(np.int64)
    counts = rng.integers(0, 12, size=300)
    offsets = np.concatenate([[0], np.cumsum(counts)]).astype(np.int64)
    src = rng.integers(0, 5000, size=int(offsets[-1])).astype(np.int64)
    eids: np.ndarray = rng.integers(0, 2**31 - 1, size=len(src)).astype(ids_dtype)
    args = (dst, np.arange(300, dtype=np.int64), i64(0, 300), [(offsets, src, eids)])
    wide_nodes, wide = compact_hop(*args, np.full(5000, -1, np.int32))
    nodes, b = compact_hop(*args, np.full(5000, -1, np.int32), narrow=True)
    np.testing.assert_array_equal(nodes, wide_nodes)
    assert nodes.dtype == np.int64
    assert b.edge_src.dtype == b.edge_dst.dtype == np.int32
    assert b.edge_ids.dtype == ids_dtype
    for field in ("edge_src", "edge_dst", "edge_ids"):
        np.testing.assert_array_equal(getattr(b, field), getattr(wide, field))


def test_rejects_gids_outside_the_table_and_leaves_it_clean() -> None:
    from graphfeed.sampler.compact import compact_hop

    table = np.full(10, -1, np.int32)
    with pytest.raises(ValueError, match=r"gids must be in \[0, 10\), got 12"):
        compact_hop(i64(1, 2), i64(0, 1), i64(0, 2), [(i64(0, 1, 2), i64(3, 12), i64(0, 1))], table)
    with pytest.raises(ValueError, match="got -1"):
        compact_hop(i64(1, -1), i64(0, 1), i64(0, 2), [(i64(0, 0, 0), i64(), i64())], table)
    assert (table == -1).all()


def test_slot_tables_are_bounded_and_reused_warmest_first() -> None:
    import threading

    from graphfeed.sampler.compact import SlotTables

    tables = SlotTables(10, max_tables=2)
    got_one = threading.Event()

    def third() -> None:
        with tables.lease():
            got_one.set()

    with tables.lease() as a, tables.lease() as b:  # b goes back first, then a
        assert a is not b and (a == -1).all()
        waiter = threading.Thread(target=third)
        waiter.start()
        assert not got_one.wait(0.2)  # a third concurrent compaction waits
    assert got_one.wait(5)
    waiter.join(5)
    with tables.lease() as c:
        assert c is a or c is b  # no third table was ever made
        assert (c == -1).all()
    with tables.lease() as x, tables.lease() as y:
        assert x is not y  # y goes back first, then x
    with tables.lease() as z:
        assert z is x  # the last one returned (the warmest) is lent first


def test_alloc_hook_receives_the_output_and_is_checked() -> None:
    """A server's hook gets (max src nodes, edges) and the block lands in the arrays it returned."""
    dst, offsets, src, eids = i64(10, 20, 5), i64(0, 3, 3, 7), i64(30, 20, 30, 40, 10, 50, 40), i64(*range(100, 107))
    slab = np.full(64, -7, dtype=np.int64)  # one buffer standing in for a response segment
    asked = []

    def alloc(max_src: int, num_edges: int) -> tuple[np.ndarray, np.ndarray, np.ndarray, np.ndarray]:
        asked.append((max_src, num_edges))
        return slab[:max_src], slab[16 : 16 + num_edges], slab[32 : 32 + num_edges], slab[48 : 48 + num_edges]

    want_nodes, want = to_block(dst, offsets, src, eids)
    order = np.arange(3, dtype=np.int64)
    table = np.full(100, -1, dtype=np.int32)
    got_nodes, got = compact_hop(dst, order, i64(0, 3), [(offsets, src, eids)], table, alloc)
    assert asked == [(10, 7)] and (table == -1).all()
    np.testing.assert_array_equal(got_nodes, want_nodes)
    assert got_nodes.ctypes.data == slab.ctypes.data and got.edge_ids.ctypes.data == slab[48:].ctypes.data
    for a, b in ((got.edge_src, want.edge_src), (got.edge_dst, want.edge_dst), (got.edge_ids, want.edge_ids)):
        np.testing.assert_array_equal(a, b)
    np.testing.assert_array_equal(slab[16:23], want.edge_src)
    for bad in (
        lambda m, e: (slab[: m - 1], slab[:e], slab[:e], slab[:e]),  # too short
        lambda m, e: (slab[:m], slab[:e].astype(np.int32), slab[:e], slab[:e]),  # wrong dtype
        lambda m, e: (slab[:m], slab[: 2 * e : 2], slab[:e], slab[:e]),
    ):  # not contiguous
        with pytest.raises(ValueError, match="alloc must return"):
            compact_hop(dst, order, i64(0, 3), [(offsets, src, eids)], table, bad)
    assert (table == -1).all()
