"""An edge minibatch's pair graphs, as DGL's edge-prediction DataLoader yields them (issue 26).

DGL's ``as_edge_prediction_sampler`` yields ``(input_nodes, pair_graph, neg_pair_graph,
blocks)``: ``pair_graph`` holds the minibatch's positive edges and ``neg_pair_graph`` its
negative pairs, both over one node set, the last block's dst nodes (so a model's output ``h``
for those nodes scores either with ``apply_edges``). graphfeed's loader sends the pairs as
positions in the output nodes (:class:`~graphfeed.loader.edges.EdgePairs`); this module builds
the two graphs: one-type graphs with ``ndata[dgl.NID]`` = the output nodes' ids and
``edata[dgl.EID]`` = the positive edges' ids, and on a graph of several types heterographs with
every node and edge type of the schema (the predicted relation the only non-empty one, as
DGL's ``edge_subgraph`` + ``compact_graphs`` give) over the typed output nodes, in the order of
:func:`graphfeed.trainer.hetero.hetero_dgl_blocks`.
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

import dgl
import numpy as np
import torch

from graphfeed.common import codec
from graphfeed.common.bulk import Bulk
from graphfeed.common.schema import GraphSchema
from graphfeed.common.shm import SegmentReader
from graphfeed.loader.edges import EdgePairs

if TYPE_CHECKING:
    from graphfeed.loader.v1 import loader_pb2 as pb

__all__ = ["pair_graphs", "pairs_from_proto"]


def pairs_from_proto(msg: pb.EdgePairs, segments: SegmentReader | None, bulk_bytes: Bulk | None) -> EdgePairs:
    """The pairs of a Minibatch message (its ``pairs`` field)."""
    arrays = {
        name: np.asarray(codec.decode(getattr(msg, name), f"pairs.{name}", segments, bulk_bytes), dtype=np.int64)
        for name in ("src", "dst", "eids", "neg_src", "neg_dst")
    }
    return EdgePairs(etype=int(msg.etype), excluded_edges=int(msg.excluded_edges), **arrays)


def pair_graphs(
    pairs: EdgePairs,
    output_gids: np.ndarray,
    output_nodes: Any,
    schema: GraphSchema | None,
    device: torch.device,
) -> tuple[dgl.DGLGraph, dgl.DGLGraph]:
    """``(pair_graph, neg_pair_graph)`` on ``device``.

    Args:
        pairs: the minibatch's pairs (positions in ``output_gids``).
        output_gids: the minibatch's output nodes as global ids (``blocks.output_nodes``).
        output_nodes: the data loader's output nodes (a tensor, or ``{ntype: tensor}``): the
            pair graphs' ``dgl.NID``.
        schema: the graph's types; None or one type: homogeneous graphs.
        device: where the graphs go.
    """
    pos, neg = (pairs.src, pairs.dst), (pairs.neg_src, pairs.neg_dst)
    if schema is None or not schema.is_hetero:
        n = len(output_gids)
        graphs = [dgl.graph((torch.from_numpy(u), torch.from_numpy(v)), num_nodes=n) for u, v in (pos, neg)]
        for g in graphs:
            g.ndata[dgl.NID] = output_nodes.cpu()
        graphs[0].edata[dgl.EID] = torch.from_numpy(pairs.eids)
        return graphs[0].to(device), graphs[1].to(device)
    _, bounds, rank, *_ = schema.rank(output_gids, "pair graphs: output nodes")
    counts = dict(zip(schema.ntypes, np.diff(bounds).tolist()))
    relation = schema.etypes[pairs.etype]
    graphs = []
    for u, v in (pos, neg):
        edges = {e: (torch.zeros(0, dtype=torch.int64),) * 2 for e in schema.etypes}
        edges[relation] = (torch.from_numpy(rank[u].astype(np.int64)), torch.from_numpy(rank[v].astype(np.int64)))
        g = dgl.heterograph(edges, num_nodes_dict=counts)
        for nt, ids in output_nodes.items():
            g.nodes[nt].data[dgl.NID] = ids.cpu()
        graphs.append(g)
    typewise = np.where(pairs.eids >= 0, pairs.eids - schema.etype_offsets[pairs.etype], -1)
    graphs[0].edges[relation].data[dgl.EID] = torch.from_numpy(typewise.astype(np.int64))
    return graphs[0].to(device), graphs[1].to(device)
