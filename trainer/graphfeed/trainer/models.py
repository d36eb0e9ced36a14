"""Example models. GraphSAGE for node classification over DGL blocks."""

from __future__ import annotations

import torch
import torch.nn.functional as F
from dgl.nn import SAGEConv
from torch import nn


class GraphSAGE(nn.Module):
    """L-layer GraphSAGE (mean aggregator) over a list of DGL blocks, input layer first."""

    def __init__(self, in_feats: int, hidden: int, num_classes: int, num_layers: int = 2, dropout: float = 0.5) -> None:
        super().__init__()
        dims = [in_feats] + [hidden] * (num_layers - 1) + [num_classes]
        self.layers = nn.ModuleList(SAGEConv(dims[i], dims[i + 1], "mean") for i in range(num_layers))
        self.dropout = nn.Dropout(dropout)

    def forward(self, blocks: list, x: torch.Tensor) -> torch.Tensor:
        h = x
        for i, (layer, block) in enumerate(zip(self.layers, blocks)):
            h = layer(block, h)
            if i != len(self.layers) - 1:
                h = self.dropout(F.relu(h))
        return h
