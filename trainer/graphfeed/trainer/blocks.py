"""Minibatches as DGL blocks: a Minibatch message's or an in-process minibatch's sampled blocks,
features and labels -> ``(input_nodes, output_nodes, blocks)`` as ``dgl.dataloading.DataLoader``
yields them (heterogeneous blocks for a graph of several types: :mod:`graphfeed.trainer.hetero`)."""

from __future__ import annotations

import warnings
from typing import TYPE_CHECKING, Any

import dgl
import numpy as np
import torch

from graphfeed.common import blocks as blocks_codec
from graphfeed.common import codec
from graphfeed.common.bulk import Bulk
from graphfeed.common.schema import GraphSchema
from graphfeed.common.shm import SegmentReader
from graphfeed.loader.v1 import loader_pb2 as pb
from graphfeed.trainer.hetero import hetero_dgl_blocks

if TYPE_CHECKING:
    from graphfeed.common.blocks import SampledBlocks

Batch = tuple[Any, Any, list]
"""``(input_nodes, output_nodes, blocks)``: the node ids are a tensor, or ``{ntype: tensor}`` in a
graph of several node types (as DGL's DataLoader yields them on a heterograph)."""


def as_tensor(arr: np.ndarray) -> torch.Tensor:
    """A tensor over ``arr`` without a copy. Inline arrays are read-only views of the received
    message (torch warns about those; training never writes minibatch inputs in place); shared-
    memory arrays are private writable mappings."""
    with warnings.catch_warnings():
        warnings.simplefilter("ignore", UserWarning)
        return torch.from_numpy(arr)


def feature_tensor(features: np.ndarray) -> torch.Tensor:
    """A tensor over minibatch features without a copy; bfloat16 (:data:`codec.BFLOAT16`, which
    torch cannot take from NumPy) is reinterpreted through its bits."""
    if features.dtype == codec.BFLOAT16:
        return as_tensor(features.view(np.int16)).view(torch.bfloat16)  # torch 2.2 has no uint16
    return as_tensor(features)


def dgl_blocks(
    sb: SampledBlocks,
    features: torch.Tensor,
    labels: torch.Tensor | None,
    feature_name: str,
    label_name: str,
    device: torch.device | None = None,
    feature_dtype: torch.dtype | None = None,
) -> tuple[torch.Tensor, torch.Tensor, list]:
    """DGL blocks on ``device`` (default: the CPU) from sampled blocks, with ``features``
    attached to the first block's src nodes and ``labels`` to the last block's dst nodes.
    Tensors already on ``device`` (features read on the GPU) are attached without a copy.
    ``feature_dtype``: the features are cast to it on ``device``, after the move (so reduced-
    precision features also halve the host -> device copy); None keeps their type."""
    device = device or torch.device("cpu")
    input_nodes = as_tensor(sb.input_nodes.astype(np.int64, copy=False))
    out = []
    for b in sb.blocks:
        block = dgl.create_block(
            (as_tensor(b.edge_src.astype(np.int64, copy=False)), as_tensor(b.edge_dst.astype(np.int64, copy=False))),
            num_src_nodes=b.num_src,
            num_dst_nodes=b.num_dst,
        )
        block.srcdata[dgl.NID] = input_nodes[: b.num_src]
        block.dstdata[dgl.NID] = input_nodes[: b.num_dst]
        block.edata[dgl.EID] = as_tensor(b.edge_ids.astype(np.int64, copy=False))
        out.append(block if device.type == "cpu" else block.to(device))
    input_nodes = input_nodes.to(device)
    if out and len(features):  # empty: a job with skip_features
        on_device = features.to(device)
        out[0].srcdata[feature_name] = on_device if feature_dtype is None else on_device.to(feature_dtype)
    if out and label_name and labels is not None:
        out[-1].dstdata[label_name] = labels.to(device)
    return input_nodes, input_nodes[: len(sb.output_nodes)], out


def to_dgl_blocks(
    mb: pb.Minibatch,
    feature_name: str,
    label_name: str,
    segments: SegmentReader | None = None,
    device: torch.device | None = None,
    bulk_bytes: Bulk | None = None,
    feature_dtype: torch.dtype | None = None,
    schema: GraphSchema | None = None,
) -> tuple[Any, Any, list]:
    """Builds DGL blocks from a Minibatch message (its tensors in ``segments`` or its
    ``bulk_bytes``), with features and labels attached (no copies on the CPU, unless
    ``feature_dtype`` asks for a cast: see :func:`dgl_blocks`). A graph of several types
    (``schema``) gives heterogeneous blocks and ``{ntype: ids}`` node dicts
    (:func:`graphfeed.trainer.hetero.hetero_dgl_blocks`)."""
    sb = blocks_codec.from_proto(mb.blocks, segments, bulk_bytes)
    if schema is not None and schema.is_hetero:
        typed = {
            t.ntype: feature_tensor(codec.decode(t.tensor, f"features of {t.ntype}", segments, bulk_bytes))
            for t in mb.typed_features
        }
        labels_by_type = {
            t.ntype: as_tensor(codec.decode(t.tensor, f"labels of {t.ntype}", segments, bulk_bytes))
            for t in mb.typed_labels
        }
        return hetero_dgl_blocks(sb, schema, typed, labels_by_type, feature_name, label_name, device, feature_dtype)
    features = feature_tensor(codec.decode(mb.input_features, "input_features", segments, bulk_bytes))
    labels = as_tensor(codec.decode(mb.labels, "labels", segments, bulk_bytes)) if label_name else None
    return dgl_blocks(sb, features, labels, feature_name, label_name, device, feature_dtype)
