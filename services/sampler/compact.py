"""Compaction of one sampled hop into a DGL block (``dgl.to_block`` semantics), vectorized.

DGL numbers a block's src nodes as: the dst nodes first (so that ``h_dst = h[:num_dst]``),
then every other sampled source in order of first appearance in the edge list. We get the
same numbering without a hash table or a per-node loop: one ``np.unique`` over
``concat(dst, src)`` gives each distinct gid its first position; ranking the distinct gids
by that position is exactly "order of first appearance", and dst node ``i`` (first seen at
position ``i``) gets rank ``i``.
"""

from __future__ import annotations

import numpy as np

from graphfeed.common.blocks import Block


def to_block(
    dst_nodes: np.ndarray, offsets: np.ndarray, src: np.ndarray, edge_ids: np.ndarray
) -> tuple[np.ndarray, Block]:
    """Compacts per-dst sampled in-neighbors into a block with local node indices.

    Args:
        dst_nodes: unique gids of the dst nodes (the frontier), int64 [D].
        offsets: CSR offsets over ``dst_nodes``, int64 [D+1]: dst ``i``'s sampled in-neighbors
            are ``src[offsets[i]:offsets[i+1]]``.
        src: gids of the sampled in-neighbors, int64 [E]; may repeat and may contain dst nodes.
        edge_ids: global edge id of each sampled edge, int64 [E]; passed through.

    Returns:
        ``(src_nodes, block)``: ``src_nodes`` (int64) is ``dst_nodes`` followed by the distinct
        gids of ``src`` not in ``dst_nodes``, in order of first appearance; ``block`` has
        ``edge_src`` indexing ``src_nodes`` and ``edge_dst`` indexing ``dst_nodes``.

    Raises:
        ValueError: the arrays do not describe a CSR over ``dst_nodes``.
    """
    dst_nodes = np.asarray(dst_nodes, dtype=np.int64)
    offsets = np.asarray(offsets, dtype=np.int64)
    src = np.asarray(src, dtype=np.int64)
    edge_ids = np.asarray(edge_ids, dtype=np.int64)
    num_dst = len(dst_nodes)
    if len(offsets) != num_dst + 1 or offsets[0] != 0 or offsets[-1] != len(src) or len(edge_ids) != len(src):
        raise ValueError(
            f"to_block: offsets [{len(offsets)}] / src [{len(src)}] / edge_ids [{len(edge_ids)}] "
            f"do not form a CSR over {num_dst} dst nodes"
        )
    counts = np.diff(offsets)
    if (counts < 0).any():
        raise ValueError("to_block: offsets must be non-decreasing")

    everything = np.concatenate([dst_nodes, src])
    uniq, first, inverse = np.unique(everything, return_index=True, return_inverse=True)
    # Distinct gids ranked by first appearance. First positions are distinct, so a scatter
    # into position order replaces a second sort: by_first[r] = the distinct gid seen r-th.
    slot = np.full(len(everything), -1, dtype=np.int64)
    slot[first] = np.arange(len(uniq), dtype=np.int64)
    by_first = slot[slot >= 0]
    rank = np.empty(len(uniq), dtype=np.int64)
    rank[by_first] = np.arange(len(uniq), dtype=np.int64)
    src_nodes = uniq[by_first]
    if len(src_nodes) < num_dst or not np.array_equal(src_nodes[:num_dst], dst_nodes):
        raise ValueError("to_block: dst_nodes must be unique")

    block = Block(
        num_src=int(len(src_nodes)),
        num_dst=num_dst,
        edge_src=rank[inverse[num_dst:]].astype(np.int64, copy=False),
        edge_dst=np.repeat(np.arange(num_dst, dtype=np.int64), counts),
        edge_ids=edge_ids.copy(),
    )
    return src_nodes, block
