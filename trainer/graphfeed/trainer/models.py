"""Example models. GraphSAGE for node classification over DGL blocks."""

from __future__ import annotations

import dgl
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

    @property
    def num_layers(self) -> int:
        return len(self.layers)

    def forward(self, blocks: list, x: torch.Tensor) -> torch.Tensor:
        h = x
        for i, block in enumerate(blocks):
            h = self.layer(i, block, h)
        return h

    def layer(self, i: int, block: dgl.DGLGraph, h: torch.Tensor) -> torch.Tensor:
        """Layer ``i`` on one block (activation and dropout after all but the last): the step
        layer-wise inference repeats over all nodes."""
        h = self.layers[i](block, h)
        return h if i == len(self.layers) - 1 else self.dropout(F.relu(h))
