"""Sampled message-flow-graph blocks as typed values, and their protobuf form.

Layout (as DGL): ``input_nodes`` lists every node the minibatch touches; layer ``l``'s src
nodes are ``input_nodes[:blocks[l].num_src]`` and its dst nodes the prefix
``input_nodes[:blocks[l].num_dst]``; the last block's dst nodes are the seeds.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass
from typing import TYPE_CHECKING

import numpy as np

from graphfeed.common import codec
from graphfeed.common.bulk import Bulk
from graphfeed.common.errors import InvalidArgument
from graphfeed.common.v1 import tensor_pb2

if TYPE_CHECKING:
    from graphfeed.common.shm import SegmentReader

Encode = Callable[[np.ndarray, tensor_pb2.Tensor], tensor_pb2.Tensor]  # fills a Tensor field with an array


@dataclass(frozen=True)
class Block:
    """Edges ``edge_src[i] -> edge_dst[i]`` as local indices into the layer's src/dst nodes."""

    num_src: int
    num_dst: int
    edge_src: np.ndarray  # int64 or int32 [E] (int32 as it came off the wire: see to_proto's narrow)
    edge_dst: np.ndarray  # int64 or int32 [E]
    edge_ids: np.ndarray  # int64 or int32 [E], global edge ids

    @property
    def num_edges(self) -> int:
        return len(self.edge_src)


@dataclass(frozen=True)
class SampledBlocks:
    """A sampled L-hop neighborhood: blocks ordered input layer first."""

    input_nodes: np.ndarray  # int64 [num_src of blocks[0]]
    output_nodes: np.ndarray  # int64 [num_dst of blocks[-1]] == input_nodes[:num_seeds]
    blocks: list[Block]

    @property
    def num_sampled_edges(self) -> int:
        return sum(b.num_edges for b in self.blocks)


def to_proto(
    sb: SampledBlocks,
    out: tensor_pb2.SampledBlocks | None = None,
    encode: Encode = codec.encode,
    narrow: bool = False,
) -> tensor_pb2.SampledBlocks:
    """Encodes blocks; ``encode(array, field)`` fills each tensor field (default: inline bytes;
    a server passes its response's :meth:`~graphfeed.common.transport.Response.encode`, which
    may put the arrays in shared memory or refer to them where they already lie).

    ``narrow``: the edge arrays go as int32 wherever their values fit (local indices always
    do; edge ids when the graph has fewer than 2**31 edges): half the bytes of a wire whose
    cost is per byte (gRPC: ~1.3 CPU s/GB over both ends, against one pass to narrow). Receivers
    take either type; leave it off where the arrays already lie in shared memory (narrowing
    would copy what is referred to in place)."""
    msg = tensor_pb2.SampledBlocks() if out is None else out
    encode(sb.input_nodes, msg.input_nodes)
    encode(sb.output_nodes, msg.output_nodes)
    for b in sb.blocks:
        pb = msg.blocks.add(num_src=b.num_src, num_dst=b.num_dst)
        encode(_narrowed(b.edge_src, b.num_src) if narrow else b.edge_src, pb.edge_src)
        encode(_narrowed(b.edge_dst, b.num_dst) if narrow else b.edge_dst, pb.edge_dst)
        encode(_narrowed(b.edge_ids) if narrow else b.edge_ids, pb.edge_ids)
    msg.num_sampled_edges = sb.num_sampled_edges
    return msg


INT32_LIMIT = 2**31  # values of int32 arrays lie in [-INT32_LIMIT, INT32_LIMIT)


def _narrowed(a: np.ndarray, bound: int | None = None) -> np.ndarray:
    """``a`` as int32 when every value fits (``bound``: a known exclusive upper bound of its
    non-negative values; else its extremes are read), else ``a`` itself."""
    if a.dtype != np.int64 or not len(a):
        return a
    fits = bound < INT32_LIMIT if bound is not None else int(a.min()) >= -INT32_LIMIT and int(a.max()) < INT32_LIMIT
    return a.astype(np.int32) if fits else a


def from_proto(
    msg: tensor_pb2.SampledBlocks, segments: SegmentReader | None = None, bulk: Bulk | None = None
) -> SampledBlocks:
    """Decodes (zero-copy; ``segments`` and ``bulk`` as :func:`~graphfeed.common.codec.decode`)
    and checks the invariants a trainer relies on."""
    blocks = [
        Block(
            num_src=int(b.num_src),
            num_dst=int(b.num_dst),
            edge_src=codec.decode(b.edge_src, "edge_src", segments, bulk),
            edge_dst=codec.decode(b.edge_dst, "edge_dst", segments, bulk),
            edge_ids=codec.decode(b.edge_ids, "edge_ids", segments, bulk),
        )
        for b in msg.blocks
    ]
    sb = SampledBlocks(
        input_nodes=codec.decode(msg.input_nodes, "input_nodes", segments, bulk),
        output_nodes=codec.decode(msg.output_nodes, "output_nodes", segments, bulk),
        blocks=blocks,
    )
    if blocks and (blocks[0].num_src != len(sb.input_nodes) or blocks[-1].num_dst != len(sb.output_nodes)):
        raise InvalidArgument("sampled blocks: node counts do not match input/output nodes")
    return sb
