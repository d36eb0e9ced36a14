"""Typed DGL blocks from graphfeed's homogeneous sampled blocks (issue 24).

graphfeed samples a heterogeneous graph homogenized (:mod:`graphfeed.common.schema`): a
:class:`~graphfeed.common.blocks.SampledBlocks` speaks global node ids and global edge ids, one
id space for every type. A trainer expects what ``dgl.dataloading.DataLoader`` yields on a
heterograph: ``{ntype: ids}`` input/output nodes and blocks with one relation per canonical edge
type. :func:`hetero_dgl_blocks` maps the one onto the other:

* **nodes.** Layer ``l``'s src nodes are ``input_nodes[:num_src]`` and its dst nodes the prefix
  ``input_nodes[:num_dst]``. Each type's nodes are taken out of that list by a *stable*
  partition (their order in ``input_nodes`` kept), so a type's dst nodes are again a prefix of
  that type's src nodes, which DGL's blocks require; every layer's src list is a prefix of
  ``input_nodes``, so a node keeps one local index within its type across all layers. The
  order is :meth:`GraphSchema.rank` of ``input_nodes`` (what :func:`split_by_ntype`
  gives the loader side for feature rows).
* **ids.** ``block.srcnodes[nt].data[dgl.NID]`` / ``dstnodes`` hold *type-wise* node ids
  (:meth:`GraphSchema.to_typed`), ``block.edges[etype].data[dgl.EID]`` type-wise edge ids (global
  id - ``etype_offsets[r]``), as DGL's DataLoader gives them on a heterograph. Partitioning
  renumbers nodes (a type's ids go partition by partition, DistDGL's numbering), so these node
  ids are not the ingested input's; ``orig_ids`` (the partitioned graph's ``orig_ids.npy``)
  reports the input's type-wise ids instead. Edge ids are the input's either way.
* **relations.** Every edge goes to its canonical edge type (:meth:`GraphSchema.etype_of`) with
  its endpoints' local indices within their types. Every block has all node types and all
  canonical edge types of the schema, empty ones too, so a model sees one fixed set of relations.
* **outputs.** ``input_nodes`` has every node type as a key (possibly empty), ``output_nodes``
  only the types with seeds in the minibatch: what DGL 2.1's DataLoader yields for a
  heterograph and ``{ntype: seeds}`` indices.
* **data.** ``features[nt]`` (rows of the input nodes of type ``nt``, in the stable order) go to
  ``blocks[0].srcnodes[nt].data[feature_name]``; ``labels[nt]`` (rows of the output nodes of type
  ``nt``) to ``blocks[-1].dstnodes[nt].data[label_name]``. Types left out of either dict have no
  such data (featureless types: a model embeds their ids); a type with no input nodes gets none
  either (:func:`split_by_ntype` leaves it out).
"""

from __future__ import annotations

from typing import Any, TypeVar

import dgl
import numba
import numpy as np
import torch

from graphfeed.common.blocks import Block, SampledBlocks
from graphfeed.common.errors import InvalidArgument
from graphfeed.common.schema import GraphSchema

__all__ = ["hetero_dgl_blocks", "split_by_ntype"]

Rows = TypeVar("Rows", np.ndarray, torch.Tensor)


def split_by_ntype(schema: GraphSchema, gids: np.ndarray, rows: Rows) -> dict[str, Rows]:
    """``{ntype: rows of the nodes of that type}``, where ``rows[i]`` belongs to node ``gids[i]``
    (a NumPy array or a tensor, any trailing shape); within a type the rows keep their order in
    ``gids``: the order :func:`hetero_dgl_blocks` expects of ``features`` (``gids`` = the input
    nodes) and ``labels`` (``gids`` = the output nodes). Types with no node are left out."""
    if len(rows) != len(gids):
        raise InvalidArgument(f"{len(rows)} rows for {len(gids)} nodes")
    groups = schema.group_by_ntype(np.asarray(gids))
    if isinstance(rows, torch.Tensor):
        return {nt: rows[torch.from_numpy(pos).to(rows.device)] for nt, pos in groups.items()}
    return {nt: rows[pos] for nt, pos in groups.items()}


@numba.njit(cache=True, nogil=True, boundscheck=False)
def _group_edges(edge_src, edge_dst, eids, etype_offsets, rank, r, local, u, v, typewise):  # noqa: ANN001, ANN202
    """Counting sort of a block's edges by edge type (stable) into ``u``, ``v`` and
    ``typewise`` (int64, ``len(eids)`` each): returns ``(bounds, first bad edge or -1)``; edge
    type ``r``'s edges are ``[bounds[r], bounds[r+1])``, ``u``/``v`` their endpoints' indices
    within their node types, ``typewise`` their type-wise edge ids. ``r`` and ``local`` are
    scratch of ``len(eids)`` (the narrowest ints that hold an edge type and an edge's index:
    uint8 and int32 take half the time of int32 and int64). The caller allocates every array:
    NumPy asks for huge pages for large ones and numba's allocator does not, and faulting in
    three 40 MB outputs 4 KiB at a time took 40 % of this kernel (5M edges: 167 -> 98 ms).

    The first pass finds each edge's type and its index within the type; each output is then
    written in a pass of its own (a few write streams at a time, not three per edge type: 30 %
    less time on a MAG-like block of 2.5M edges)."""
    num_etypes = len(etype_offsets) - 1
    n = len(eids)
    count = np.zeros(num_etypes, dtype=np.int64)
    bounds = np.zeros(num_etypes + 1, dtype=np.int64)
    last, lo_e, hi_e = 0, etype_offsets[0], etype_offsets[1]
    for i in range(n):
        e = eids[i]
        if not (lo_e <= e < hi_e):  # runs of one type: a seed's edges come type by type
            lo, hi = 0, num_etypes
            while lo < hi:  # the edge type whose range holds e
                mid = (lo + hi) // 2
                if etype_offsets[mid + 1] <= e:
                    lo = mid + 1
                else:
                    hi = mid
            if e < 0 or lo >= num_etypes:
                return bounds, i
            last, lo_e, hi_e = lo, etype_offsets[lo], etype_offsets[lo + 1]
        r[i] = last
        local[i] = count[last]
        count[last] += 1
    for k in range(num_etypes):
        bounds[k + 1] = bounds[k] + count[k]
    for i in range(n):
        u[bounds[r[i]] + local[i]] = rank[edge_src[i]]
    for i in range(n):
        v[bounds[r[i]] + local[i]] = rank[edge_dst[i]]
    for i in range(n):
        k = r[i]
        typewise[bounds[k] + local[i]] = eids[i] - etype_offsets[k]
    return bounds, -1


def _counts(types: np.ndarray, n: int, num_types: int) -> np.ndarray:
    return np.bincount(types[:n], minlength=num_types)


def hetero_dgl_blocks(
    sb: SampledBlocks,
    schema: GraphSchema,
    features: dict[str, torch.Tensor],
    labels: dict[str, torch.Tensor] | None,
    feature_name: str,
    label_name: str,
    device: torch.device | None = None,
    feature_dtype: torch.dtype | None = None,
    orig_ids: np.ndarray | None = None,
) -> tuple[dict[str, torch.Tensor], dict[str, torch.Tensor], list]:
    """``(input_nodes, output_nodes, blocks)`` as ``dgl.dataloading.DataLoader`` yields them on a
    heterograph, from homogeneous sampled blocks (see the module docstring for the mapping).

    Args:
        sb: sampled blocks over global ids.
        schema: the graph's types.
        features: per node type, the feature rows of the input nodes of that type in the stable
            order (:func:`split_by_ntype` of ``sb.input_nodes``); featureless types left out.
        labels: per node type, the labels of the output nodes of that type, likewise; None or
            an empty ``label_name`` attaches none.
        feature_name, label_name: the node-data names they get.
        device: where the blocks go (default: the CPU); tensors already there are not copied.
        feature_dtype: cast the features to it on ``device`` after the move; None keeps theirs.
        orig_ids: int64 [num_nodes], global id -> the node id to report instead of the schema's
            type-wise id (the partitioned graph's ``orig_ids.npy``: each node's type-wise id in
            the ingested input, which partitioning renumbers); None: the schema's (DistDGL's)
            type-wise ids. The ids also index featureless types' embeddings, so they must lie in
            ``[0, num_nodes(ntype))``, as input ids do unless the source gave its own.
    """
    device = device or torch.device("cpu")
    num_types = len(schema.ntypes)
    input_gids = np.asarray(sb.input_nodes, dtype=np.int64)
    types, bounds, rank, order, typed = schema.rank(input_gids, "sampled blocks: input nodes")
    if orig_ids is not None:
        typed = np.asarray(orig_ids, dtype=np.int64)[input_gids[order]]
    typed_by_type = [torch.from_numpy(typed[bounds[t] : bounds[t + 1]]) for t in range(num_types)]
    out = []
    for b in sb.blocks:
        n_src, n_dst = _counts(types, b.num_src, num_types), _counts(types, b.num_dst, num_types)
        block = _typed_block(b, schema, rank, (n_src, n_dst))
        for t, nt in enumerate(schema.ntypes):
            block.srcnodes[nt].data[dgl.NID] = typed_by_type[t][: n_src[t]]
            block.dstnodes[nt].data[dgl.NID] = typed_by_type[t][: n_dst[t]]
        out.append(block if device.type == "cpu" else block.to(device))
    n_out = _counts(types, len(sb.output_nodes), num_types)
    input_nodes = {nt: typed_by_type[t].to(device) for t, nt in enumerate(schema.ntypes)}
    output_nodes = {nt: input_nodes[nt][: n_out[t]] for t, nt in enumerate(schema.ntypes) if n_out[t]}
    if out:
        _attach(out[0].srcnodes, features, feature_name, device, feature_dtype)
        if label_name and labels is not None:
            _attach(out[-1].dstnodes, labels, label_name, device, None)
    return input_nodes, output_nodes, out


def _ints(a: np.ndarray) -> np.ndarray:
    """``a`` as the compiled grouping takes it: int32 (as it came off the wire) or int64."""
    return a if a.dtype in (np.int32, np.int64) else np.asarray(a, dtype=np.int64)


def _typed_block(
    b: Block, schema: GraphSchema, rank: np.ndarray, num_nodes: tuple[np.ndarray, np.ndarray]
) -> dgl.DGLGraph:
    """One DGL block with every canonical edge type of ``schema`` (``rank``: each input node's
    index within its type; ``num_nodes``: src and dst nodes per type); only the edge ids attached."""
    n = len(b.edge_ids)
    r = np.empty(n, np.uint8 if len(schema.etypes) < 256 else np.int32)
    local = np.empty(n, np.int32 if n < 2**31 else np.int64)
    u, v, typewise_eids = (np.empty(n, np.int64) for _ in range(3))
    edges = _ints(b.edge_src), _ints(b.edge_dst), _ints(b.edge_ids)
    bounds, bad = _group_edges(*edges, schema.etype_offsets, rank, r, local, u, v, typewise_eids)
    if bad >= 0:
        raise InvalidArgument(
            f"sampled blocks: edge id {int(b.edge_ids[bad])} is of no edge type "
            f"(edge ids are [0, {int(schema.etype_offsets[-1])}))"
        )
    data, eid_data = {}, {}
    for i, etype in enumerate(schema.etypes):
        lo, hi = bounds[i], bounds[i + 1]
        data[etype] = (torch.from_numpy(u[lo:hi]), torch.from_numpy(v[lo:hi]))
        eid_data[etype] = torch.from_numpy(typewise_eids[lo:hi])
    block = dgl.create_block(
        data,
        num_src_nodes=dict(zip(schema.ntypes, num_nodes[0].tolist())),
        num_dst_nodes=dict(zip(schema.ntypes, num_nodes[1].tolist())),
    )
    for etype, ids in eid_data.items():
        block.edges[etype].data[dgl.EID] = ids
    return block


def _attach(
    nodes: Any,
    tables: dict[str, torch.Tensor],
    name: str,
    device: torch.device,
    dtype: torch.dtype | None,
) -> None:
    for nt, table in tables.items():
        on_device = table.to(device)
        try:
            nodes[nt].data[name] = on_device if dtype is None else on_device.to(dtype)
        except dgl.DGLError as e:  # wrong row count: say which type
            raise InvalidArgument(f"{name} of node type {nt!r}: {e}") from e
