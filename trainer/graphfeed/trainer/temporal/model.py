"""A TGN-style model (Rossi et al. 2020): GRU memory, one TGAT attention layer, link predictor.

The module holds only weights; the per-node memory lives in :class:`graphfeed.trainer.temporal.
memory.NodeMemory`, owned by the training loop (so it can be checkpointed and reset per epoch).
Dropout (on the attention weights, as PyG's TransformerConv) draws from torch's global generator;
the loop seeds it per training step, which keeps resume exact.
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np
import torch
from torch import nn


@dataclass(frozen=True)
class TGNDims:
    """Widths of the model (defaults as in PyG's TGN example)."""

    memory: int = 100
    time: int = 100
    embed: int = 100
    edge: int = 0  # D of the edge features
    heads: int = 2
    dropout: float = 0.0  # on the attention weights, in training


class TimeEncoder(nn.Module):
    """``cos(w * dt + b)`` with TGAT's initialisation (frequencies ``10**-linspace(0, 9)``)."""

    def __init__(self, dim: int) -> None:
        super().__init__()
        self.lin = nn.Linear(1, dim)
        with torch.no_grad():
            self.lin.weight.copy_(
                torch.from_numpy(1.0 / 10 ** np.linspace(0, 9, dim, dtype=np.float32)).reshape(dim, 1)
            )
            self.lin.bias.zero_()

    def forward(self, dt: torch.Tensor) -> torch.Tensor:
        return torch.cos(self.lin(dt.reshape(-1, 1).float()))


class TemporalAttention(nn.Module):
    """One TGAT layer: a root attends over its sampled neighbours, then merges with its memory.

    Query ``[memory_root | time(0)]``, keys/values ``[memory_nbr | edge feature | time(t_root - t_nbr)]``.
    A root without neighbours gets a zero attention output (PyG's TransformerConv does the same).
    """

    def __init__(self, dims: TGNDims) -> None:
        super().__init__()
        q_dim = dims.memory + dims.time
        kv_dim = dims.memory + dims.edge + dims.time
        self.attn = nn.MultiheadAttention(
            q_dim, dims.heads, dropout=dims.dropout, kdim=kv_dim, vdim=kv_dim, batch_first=True
        )
        self.merge = nn.Sequential(
            nn.Linear(q_dim + dims.memory, dims.embed), nn.ReLU(), nn.Linear(dims.embed, dims.embed)
        )

    def forward(
        self, query: torch.Tensor, root_mem: torch.Tensor, keys: torch.Tensor, offsets: np.ndarray
    ) -> torch.Tensor:
        """Embeddings [R, embed] of R roots; ``keys`` [S, kv_dim] are the neighbours, root i's at
        rows ``offsets[i]:offsets[i+1]``."""
        counts = np.diff(offsets)
        width = max(1, int(counts.max(initial=0)))
        row = np.repeat(np.arange(len(counts)), counts)
        slot = np.arange(len(row)) - np.repeat(offsets[:-1], counts)
        dev = keys.device
        dense = keys.new_zeros((len(counts), width, keys.shape[1]))
        dense[torch.from_numpy(row).to(dev), torch.from_numpy(slot).to(dev)] = keys
        pad = np.arange(width)[None, :] >= np.maximum(counts, 1)[:, None]  # keep slot 0 of empty rows
        out, _ = self.attn(
            query.unsqueeze(1), dense, dense, key_padding_mask=torch.from_numpy(pad).to(dev), need_weights=False
        )
        out = out.squeeze(1) * torch.from_numpy(counts > 0).to(dev).unsqueeze(1).to(out.dtype)
        return self.merge(torch.cat([out, root_mem], dim=1))


class LinkPredictor(nn.Module):
    """Logit that ``src`` interacts with ``dst``: ``w . relu(A z_src + B z_dst)``."""

    def __init__(self, dim: int) -> None:
        super().__init__()
        self.lin_src, self.lin_dst, self.out = nn.Linear(dim, dim), nn.Linear(dim, dim), nn.Linear(dim, 1)

    def forward(self, z_src: torch.Tensor, z_dst: torch.Tensor) -> torch.Tensor:
        return self.out(torch.relu(self.lin_src(z_src) + self.lin_dst(z_dst))).squeeze(-1)


class TGN(nn.Module):
    """The weights of a TGN: time encoder, memory GRU, attention embedding, link predictor.

    Messages are ``[memory_self | memory_other | time(t - last_update_self) | edge feature]``.
    """

    def __init__(self, dims: TGNDims) -> None:
        super().__init__()
        self.dims = dims
        self.time_enc = TimeEncoder(dims.time)
        self.gru = nn.GRUCell(2 * dims.memory + dims.time + dims.edge, dims.memory)
        self.embedding = TemporalAttention(dims)
        self.link = LinkPredictor(dims.embed)

    def update_memory(
        self, mem: torch.Tensor, other: torch.Tensor, dt: torch.Tensor, efeat: torch.Tensor, has: torch.Tensor
    ) -> torch.Tensor:
        """New memory of nodes (``mem`` their memory, ``other`` the peer's of their pending
        message); a node without one (``has`` False) takes a GRU step with a zero message."""
        msg = torch.cat([mem, other, self.time_enc(dt), efeat], dim=1)
        return self.gru(msg * has.unsqueeze(1).to(msg.dtype), mem)

    def embed(
        self,
        root_mem: torch.Tensor,
        nbr_mem: torch.Tensor,
        nbr_dt: torch.Tensor,
        nbr_feat: torch.Tensor,
        offsets: np.ndarray,
    ) -> torch.Tensor:
        """Embeddings of roots from their memory and their sampled neighbours."""
        query = torch.cat([root_mem, self.time_enc(root_mem.new_zeros(len(root_mem)))], dim=1)
        keys = torch.cat([nbr_mem, nbr_feat, self.time_enc(nbr_dt)], dim=1)
        return self.embedding(query, root_mem, keys, offsets)
