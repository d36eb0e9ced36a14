"""What a loader stream delivers: a minibatch ready for training and its counters."""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any

import numpy as np

from graphfeed.common.blocks import SampledBlocks
from graphfeed.common.placement import Placed

if TYPE_CHECKING:
    from graphfeed.loader.edges import EdgePairs


@dataclass(frozen=True)
class MinibatchStats:
    """Counters of one minibatch; remote bytes count feature and label rows received."""

    cache_hits: int
    cache_misses: int
    remote_feature_bytes: int
    sample_seconds: float
    gather_seconds: float
    remote_bytes_by_partition: dict[int, int] = field(default_factory=dict)
    pack_rows: int = 0  # of the cache misses, rows read from the step's pack (not the graph-stores)


@dataclass(frozen=True, kw_only=True)
class ReadyMinibatch:
    """One minibatch ready for training: blocks, input features and seed labels."""

    job_seed: int
    epoch: int
    step: int
    steps_per_epoch: int
    blocks: SampledBlocks
    features: Any  # [len(blocks.input_nodes), *row_shape]: np.ndarray, or a device array (stream ``on_device``)
    labels: np.ndarray  # [len(blocks.output_nodes), *label_shape]; empty without label_name
    stats: MinibatchStats
    placed: Placed | None = None  # where ``features`` were assembled (None: a converted or device copy)
    # a graph of several node types: per node type, instead of ``features`` / ``labels`` (empty)
    typed_features: dict[str, np.ndarray] = field(default_factory=dict)
    typed_labels: dict[str, np.ndarray] = field(default_factory=dict)
    typed_placed: dict[str, Placed] = field(default_factory=dict)  # where each type's features were assembled
    pairs: EdgePairs | None = None  # an edge minibatch's positive and negative pairs (link prediction)
