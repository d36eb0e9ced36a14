"""``graphfeed train --task link``: the link-prediction half of the example job, through the services.

What the node-classification :class:`~graphfeed.trainer.train.Trainer` needs to train a link
predictor instead (the loop, DDP, checkpoints and exact resume are its own):

* the train loader is an edge job (``seed_edges``: DGL's ``(input_nodes, pair_graph,
  neg_pair_graph, blocks)``, :func:`edge_job`);
* the model is the example encoder with ``hidden`` outputs and a scorer (:func:`link_model`),
  its loss BCE or margin over the positive and negative scores (:func:`link_loss`);
* evaluation embeds every node *through the services*, layer by layer (DGL's ``inference``:
  the loader streams all nodes, split ``"*"``, with one-layer full-neighbour blocks;
  :func:`service_embeddings`), reads the split's edges from the loader too (an edge job with
  no sampling, :func:`split_pairs`), and ranks each edge against seeded negatives (MRR,
  Hits@K; Recall@K / NDCG@K for a user-item relation): :func:`evaluate_link_split`.

Ids stay graphfeed's (global ids in a one-type graph, the schema's type-wise ids per type),
so evaluation needs no id map; :mod:`graphfeed.bench.linkpred` maps to the input's ids when it
compares with in-process DGL on the same negatives.
"""

from __future__ import annotations

import hashlib
import logging
import os
import time
from collections.abc import Callable, Iterator
from contextlib import AbstractContextManager
from pathlib import Path
from typing import Any

import dgl
import numpy as np
import torch

from graphfeed.common.schema import GraphSchema
from graphfeed.loader.plan import ALL_NODES
from graphfeed.trainer.hetero_models import RGCN
from graphfeed.trainer.linkpred.config import LinkPredConfig
from graphfeed.trainer.linkpred.evaluate import evaluate_pairs
from graphfeed.trainer.linkpred.inference import LayerBatch, layerwise
from graphfeed.trainer.linkpred.models import LOSSES, DotScorer, Embeddings, LinkPredictor, MLPScorer
from graphfeed.trainer.models import GraphSAGE

__all__ = [
    "edge_job",
    "evaluate_link_split",
    "link_loss",
    "link_model",
    "service_embeddings",
    "split_pairs",
    "write_embeddings",
]

log = logging.getLogger(__name__)

MakeLoader = Callable[..., AbstractContextManager[Any]]
"""``make(split, fanouts, batch_size, **job) -> data loader`` (a context manager that iterates)."""


def edge_job(num_negatives: int, negative_sampler: str, exclude: str) -> dict[str, Any]:
    """The job keywords of a link-prediction train loader."""
    return {
        "seed_edges": True,
        "num_negatives": num_negatives,
        "negative_sampler": negative_sampler,
        "exclude": exclude,
    }


def link_model(encoder: GraphSAGE | RGCN, scorer: str, hidden: int, seed_etype: str) -> LinkPredictor:
    """``encoder`` (its last layer ``hidden`` wide) and a ``"dot"`` or ``"mlp"`` scorer of the
    relation ``seed_etype`` (``"src:rel:dst"``; ignored by a one-type encoder)."""
    etype = tuple(seed_etype.split(":")) if isinstance(encoder, RGCN) else None
    return LinkPredictor(encoder, DotScorer() if scorer == "dot" else MLPScorer(hidden), etype)  # type: ignore[arg-type]


def link_loss(model: torch.nn.Module, batch: tuple, loss: str) -> torch.Tensor:
    """The loss of one edge minibatch ``(input_nodes, pair_graph, neg_pair_graph, blocks)``."""
    _, pos_graph, neg_graph, blocks = batch
    pos, neg = model(blocks, pos_graph, neg_graph)
    return LOSSES[loss](pos, neg)


def _input_features(make: MakeLoader, schema: GraphSchema | None, batch_size: int) -> Embeddings:
    """Every node's ``feat`` (one pass of the loader over all nodes, no neighbours): [N, F], or
    per node type that has it."""
    feats: dict[str, torch.Tensor] = {}
    with make(ALL_NODES, [0], batch_size) as dl:
        for _, output_nodes, blocks in dl:
            src = blocks[0].srcdata if not isinstance(output_nodes, dict) else None
            items = {"": (output_nodes, src["feat"])} if src is not None else {}
            if src is None:
                items = {
                    nt: (ids, blocks[0].srcnodes[nt].data["feat"][: len(ids)])
                    for nt, ids in output_nodes.items()
                    if "feat" in blocks[0].srcnodes[nt].data
                }
            for nt, (ids, rows) in items.items():
                n = schema.num_nodes(nt) if nt else int(dl.info.num_nodes)  # type: ignore[union-attr]
                if nt not in feats:  # once: [n, F] is the whole graph's features
                    feats[nt] = torch.zeros(n, *rows.shape[1:], dtype=torch.float32)
                buf = feats[nt]
                buf[ids.cpu()] = rows.float().cpu()
    return feats.get("", feats)


class _OneLayer:
    """Layer ``i`` of an encoder as a one-layer encoder: :func:`layerwise` runs one layer at a
    time, so a layer's output can be kept before the next starts (resumable inference)."""

    def __init__(self, encoder: GraphSAGE | RGCN, i: int) -> None:
        self.encoder, self.i, self.num_layers = encoder, i, 1

    def layer(self, _i: int, block: dgl.DGLGraph, h: Any) -> Any:
        return self.encoder.layer(self.i, block, h)

    def train(self, mode: bool = True) -> Any:
        return self.encoder.train(mode)

    @property
    def training(self) -> bool:
        return self.encoder.training


@torch.no_grad()
def service_embeddings(
    make: MakeLoader,
    encoder: GraphSAGE | RGCN,
    schema: GraphSchema | None,
    batch_size: int,
    out_dir: Path | None = None,
) -> Embeddings:
    """Every node's output embedding, layer by layer through the loader (DGL's ``inference``):
    each layer is one pass over all nodes with one-layer full-neighbour blocks.

    ``out_dir``: keep each finished layer's output there (``layer-<i>.pt``, written atomically)
    and start from the last one kept, so an interrupted inference resumes at its layer; the
    result is written there too (:func:`write_embeddings`).

    Returns:
        [N, hidden] by global id, or per node type by type-wise id, on the CPU.
    """
    key = _model_key(encoder)
    done, h = _kept_layer(out_dir, key)
    if h is None:
        h = _input_features(make, schema, batch_size)
        if isinstance(encoder, RGCN) and schema is not None:
            was = encoder.training
            encoder.train(False)
            feats = h if isinstance(h, dict) else {}
            h = encoder.embed_all(feats, {nt: schema.num_nodes(nt) for nt in schema.ntypes})
            encoder.train(was)

    def batches(_layer: int) -> Iterator[LayerBatch]:
        with make(ALL_NODES, [-1], batch_size, skip_features=True) as dl:  # inputs come from h, not the loader
            for input_nodes, output_nodes, blocks in dl:
                yield input_nodes, output_nodes, blocks[0]

    for i in range(done + 1, encoder.num_layers):
        t0 = time.perf_counter()
        h = layerwise(_OneLayer(encoder, i), batches, h)
        log.info(
            "inference: layer %d of %d over every node in %.1f s", i + 1, encoder.num_layers, time.perf_counter() - t0
        )
        if out_dir is not None:
            _keep_layer(out_dir, i, h, key)
    if out_dir is not None:
        write_embeddings(out_dir, h)
    return h


def _model_key(encoder: torch.nn.Module) -> str:
    """A digest of the encoder's weights: kept layers of another model are not resumed from."""
    digest = hashlib.sha256()
    for name, tensor in sorted(encoder.state_dict().items()):
        digest.update(name.encode())
        digest.update(tensor.detach().cpu().contiguous().numpy().tobytes())
    return digest.hexdigest()[:16]


def _kept_layer(out_dir: Path | None, key: str) -> tuple[int, Embeddings | None]:
    """The last layer this model kept in ``out_dir`` and its output, or ``(-1, None)``."""
    if out_dir is None or not out_dir.exists():
        return -1, None
    kept = sorted(out_dir.glob(f"layer-*-{key}.pt"), key=lambda f: int(f.stem.split("-")[1]))
    if not kept:
        return -1, None
    log.info("inference: resuming after %s", kept[-1].name)
    return int(kept[-1].stem.split("-")[1]), torch.load(kept[-1])


def _keep_layer(out_dir: Path, i: int, h: Embeddings, key: str) -> None:
    out_dir.mkdir(parents=True, exist_ok=True)
    tmp = out_dir / f".layer-{i}-{key}.pt.tmp"
    torch.save(h, tmp)
    os.replace(tmp, out_dir / f"layer-{i}-{key}.pt")


def write_embeddings(out_dir: Path, h: Embeddings) -> list[Path]:
    """Every node's embedding as ``.npy`` files in ``out_dir``: ``embeddings.npy`` ([N, hidden],
    row = global id) or ``embeddings-<ntype>.npy`` (row = the schema's type-wise id); the graph
    root's ``orig_ids.npy`` maps either to the input's own ids. Written atomically."""
    out_dir.mkdir(parents=True, exist_ok=True)
    tables = h if isinstance(h, dict) else {"": h}
    written = []
    for nt, rows in tables.items():
        path = out_dir / (f"embeddings-{nt}.npy" if nt else "embeddings.npy")
        tmp = path.with_suffix(".tmp.npy")
        np.save(tmp, rows.cpu().numpy())
        os.replace(tmp, path)
        written.append(path)
    return written


def split_pairs(make: MakeLoader, split: str, relation: str, batch_size: int) -> np.ndarray:
    """int64 [n, 2]: the ``(src, dst)`` of edge split ``split``, in graphfeed's ids of their
    types, read through the loader (an edge job that samples no neighbours)."""
    etype = tuple(relation.split(":"))
    out = []
    job = edge_job(1, "uniform", "none")
    with make(split, [0], batch_size, **job) as dl:
        for _, pos, _, _ in dl:
            if pos.is_homogeneous:
                nid_u = nid_v = pos.ndata[dgl.NID]
                u, v = pos.edges()
            else:
                nid_u, nid_v = pos.nodes[etype[0]].data[dgl.NID], pos.nodes[etype[2]].data[dgl.NID]
                u, v = pos.edges(etype=etype)
            out.append(torch.stack([nid_u[u.cpu()], nid_v[v.cpu()]], 1).numpy())
    return np.concatenate(out) if out else np.empty((0, 2), np.int64)


def evaluate_link_split(
    make: MakeLoader,
    model: LinkPredictor,
    schema: GraphSchema | None,
    relation: str,
    split: str,
    cfg: LinkPredConfig,
    h: Embeddings | None = None,
) -> dict[str, float]:
    """MRR / Hits@K of ``split``'s edges against ``cfg.eval_negatives`` seeded negatives each (and
    Recall@K / NDCG@K for a user-item relation, the earlier splits' pairs masked), every node
    embedded through the services."""
    batch = cfg.eval_batch_size
    if h is None:  # the caller may already hold every node's embedding (e.g. written out)
        h = service_embeddings(make, model.encoder, schema, batch)
    s, _, d = relation.split(":")
    h_src, h_dst = (h[s], h[d]) if isinstance(h, dict) else (h, h)
    pairs = split_pairs(make, split, relation, batch)
    known = [split_pairs(make, k, relation, batch) for k in ("train", "val") if k != split and split != "train"]
    return evaluate_pairs(pairs, np.concatenate(known) if known else None, h_src, h_dst, model.scorer, cfg, s != d)
