"""PyG's TGN example (``examples/tgn.py`` of torch_geometric 2.6.1) on graphfeed's event streams.

The model is the example's: ``TGNMemory`` with ``IdentityMessage`` and ``LastAggregator``,
``LastNeighborLoader(size=10)``, ``GraphAttentionEmbedding`` (one ``TransformerConv``, 2 heads,
dropout 0.1) sharing the memory's time encoder, the example's ``LinkPredictor``, Adam at 1e-4,
batches of 200, memory reset at the start of every epoch. What differs, so that both systems are
scored on the same thing:

- batches and negatives are graphfeed's: the same ``batch_bounds`` and, per batch, the first
  column of the negatives graphfeed's loop draws (``rng(seed, "neg", epoch, step)``, uniform
  destination ids in ``[min_dst, max_dst]``, the example's distribution), so both systems score
  identical (positive, negative) pairs;
- AP is graphfeed's: one average precision over the whole validation / test span (the example
  averages per-batch APs);
- streams without edge features get one all-zero feature column (``TGNMemory`` cannot store
  zero-width messages); the zero column carries nothing;
- the job seed fixes the initial weights and the dropout draws (``derive_seed``).

``device="cuda"`` runs it on a GPU (the example's own ``device`` choice), for the many-epoch
comparisons a 2-core machine cannot finish.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

import numpy as np

from graphfeed.common.seeds import derive_seed, rng
from graphfeed.trainer.temporal.events import TemporalEvents
from graphfeed.trainer.temporal.loop import batch_bounds
from graphfeed.trainer.temporal.metrics import average_precision

INSTALL_HINT = (
    "the PyG comparison needs torch_geometric 2.6.1 (pure Python; works with this venv's torch 2.2.1): "
    "pip install --no-deps torch_geometric==2.6.1 (and aiohttp, fsspec, jinja2, psutil, pyparsing, "
    "requests, tqdm if missing)"
)


def available() -> str | None:
    """None when torch_geometric's TGN imports, else how to install it."""
    try:
        from torch_geometric.nn import TransformerConv  # noqa: F401
        from torch_geometric.nn.models.tgn import LastNeighborLoader, TGNMemory  # noqa: F401
    except ImportError:
        return INSTALL_HINT
    return None


@dataclass(frozen=True)
class PygEpoch:
    epoch: int
    val_ap: float
    test_ap: float
    train_loss: float


def _modules(num_nodes: int, msg_dim: int, dim: int, fanout: int, device: Any) -> dict[str, Any]:
    import torch
    from torch_geometric.nn import TransformerConv
    from torch_geometric.nn.models.tgn import (
        IdentityMessage,
        LastAggregator,
        LastNeighborLoader,
        TGNMemory,
    )

    class GraphAttentionEmbedding(torch.nn.Module):
        def __init__(self, in_channels: int, out_channels: int, msg_dim: int, time_enc: Any) -> None:
            super().__init__()
            self.time_enc = time_enc
            edge_dim = msg_dim + time_enc.out_channels
            self.conv = TransformerConv(in_channels, out_channels // 2, heads=2, dropout=0.1, edge_dim=edge_dim)

        def forward(self, x: Any, last_update: Any, edge_index: Any, t: Any, msg: Any) -> Any:
            rel_t = last_update[edge_index[0]] - t
            rel_t_enc = self.time_enc(rel_t.to(x.dtype))
            edge_attr = torch.cat([rel_t_enc, msg], dim=-1)
            return self.conv(x, edge_index, edge_attr)

    class LinkPredictor(torch.nn.Module):
        def __init__(self, in_channels: int) -> None:
            super().__init__()
            self.lin_src = torch.nn.Linear(in_channels, in_channels)
            self.lin_dst = torch.nn.Linear(in_channels, in_channels)
            self.lin_final = torch.nn.Linear(in_channels, 1)

        def forward(self, z_src: Any, z_dst: Any) -> Any:
            return self.lin_final((self.lin_src(z_src) + self.lin_dst(z_dst)).relu())

    memory = TGNMemory(
        num_nodes,
        msg_dim,
        dim,
        dim,
        message_module=IdentityMessage(msg_dim, dim, dim),
        aggregator_module=LastAggregator(),
    ).to(device)
    gnn = GraphAttentionEmbedding(dim, dim, msg_dim, memory.time_enc).to(device)
    link = LinkPredictor(dim).to(device)
    params = set(memory.parameters()) | set(gnn.parameters()) | set(link.parameters())
    return {
        "memory": memory,
        "gnn": gnn,
        "link": link,
        "loader": LastNeighborLoader(num_nodes, size=max(fanout, 1), device=device),
        "optimizer": torch.optim.Adam(params, lr=1e-4),
    }


def train_pyg(
    events: TemporalEvents,
    seed: int,
    epochs: int,
    fanout: int = 10,
    batch_size: int = 200,
    dim: int = 100,
    mrr_negatives: int = 19,
    device: str = "cpu",
) -> list[PygEpoch]:
    """The example's training on ``events``; val/test AP after every epoch (fanout 0: memory only,
    the attention layer gets no edge and reduces to its root weight)."""
    import torch

    dev = torch.device(device)
    msg = torch.from_numpy(events.efeat) if events.efeat is not None else torch.zeros(events.num_events, 1)
    msg = msg.to(dev)
    src_all, dst_all, t_all = (torch.from_numpy(a).to(dev) for a in (events.src, events.dst, events.t))
    with torch.random.fork_rng():
        torch.manual_seed(derive_seed(seed, "init") & (2**63 - 1))
        m = _modules(events.num_nodes, msg.shape[1], dim, fanout, dev)
    memory, gnn, link, loader, optimizer = (m[k] for k in ("memory", "gnn", "link", "loader", "optimizer"))
    lo, hi = events.dst_range
    assoc = torch.empty(events.num_nodes, dtype=torch.long, device=dev)
    out: list[PygEpoch] = []
    for epoch in range(epochs):
        memory.reset_state()
        loader.reset_state()
        scores: dict[str, list[tuple[np.ndarray, np.ndarray]]] = {"train": [], "val": [], "test": []}
        losses = []
        with torch.random.fork_rng():
            torch.manual_seed(derive_seed(seed, "dropout", epoch) & (2**63 - 1))
            for step, (first, stop, phase) in enumerate(batch_bounds(events, batch_size)):
                train = phase == "train"
                for module in (memory, gnn, link):
                    module.train(train)
                k = 1 if train else mrr_negatives  # the draw graphfeed's loop makes; AP uses column 0
                neg = rng(seed, "neg", epoch, step).integers(lo, hi + 1, size=(stop - first, k))[:, 0]
                src, dst, t = src_all[first:stop], dst_all[first:stop], t_all[first:stop]
                neg_dst = torch.from_numpy(neg).to(dev)
                with torch.set_grad_enabled(train):
                    n_id = torch.cat([src, dst, neg_dst]).unique()
                    if fanout > 0:
                        n_id, edge_index, e_id = loader(n_id)
                    else:
                        edge_index = torch.empty(2, 0, dtype=torch.long, device=dev)
                        e_id = torch.empty(0, dtype=torch.long, device=dev)
                    assoc[n_id] = torch.arange(n_id.size(0), device=dev)
                    z, last_update = memory(n_id)
                    z = gnn(z, last_update, edge_index, t_all[e_id], msg[e_id])
                    pos_out = link(z[assoc[src]], z[assoc[dst]]).squeeze(-1)
                    neg_out = link(z[assoc[src]], z[assoc[neg_dst]]).squeeze(-1)
                    bce = torch.nn.functional.binary_cross_entropy_with_logits
                    loss = bce(pos_out, torch.ones_like(pos_out)) + bce(neg_out, torch.zeros_like(neg_out))
                    memory.update_state(src, dst, t, msg[first:stop])
                    loader.insert(src, dst)
                    if train:
                        optimizer.zero_grad()
                        loss.backward()
                        optimizer.step()
                        memory.detach()
                scores[phase].append((pos_out.detach().cpu().numpy(), neg_out.detach().cpu().numpy()))
                losses.append(float(loss.detach())) if train else None
        ap = {p: average_precision(*(np.concatenate(c) for c in zip(*s))) for p, s in scores.items() if p != "train"}
        out.append(PygEpoch(epoch + 1, ap["val"], ap["test"], float(np.mean(losses))))
    return out
