"""A trainer's job as the loader sees it (:class:`JobSpec`, loader.proto's JobSpec) and the
static facts the loader reports about it (:class:`JobInfo`, DescribeJobResponse).

Plain values with no gRPC and no loader machinery, so the trainer's data loaders can build
them without importing the loader.
"""

from __future__ import annotations

from dataclasses import dataclass, field

import numpy as np

from graphfeed.common.errors import InvalidArgument
from graphfeed.common.limits import MAX_BATCH_SIZE, MAX_LAYERS, MAX_NEGATIVES, MAX_WORLD_SIZE
from graphfeed.common.schema import GraphSchema

__all__ = ["EXCLUDE_MODES", "FEATURE_WIRE_DTYPES", "NEGATIVE_SAMPLERS", "JobInfo", "JobSpec"]

FEATURE_WIRE_DTYPES = ("float16", "bfloat16")
"""Reduced-precision element types a job may ask its features to travel in (besides "", the
stored type); see :mod:`graphfeed.loader.wire`."""


NEGATIVE_SAMPLERS = ("uniform", "global_uniform")
EXCLUDE_MODES = ("reverse_id", "self", "none")


def _doc(description: str) -> dict[str, str]:
    return {"description": description}


@dataclass(frozen=True, kw_only=True)
class JobSpec:
    """A trainer's job, as loader.proto's JobSpec; the one declaration of its fields.

    Each field's default and ``metadata["description"]`` are what the data loaders
    (:func:`graphfeed.trainer.job.job_spec`), ``graphfeed train`` and ``graphfeed pack`` offer,
    and the proto mappings go over these fields by name (:mod:`graphfeed.loader.job_proto`).
    """

    job_id: str = field(default="graphfeed-job", metadata=_doc("Job name (loader logs and shared cache state)."))
    job_seed: int = field(
        default=0, metadata=_doc("Job seed: shuffling and every sampling choice derive from (seed, epoch, step).")
    )
    split: str = field(default="train", metadata=_doc('Seed nodes: "train", "val", "test", or "*" (every node).'))
    batch_size: int = field(default=1024, metadata=_doc("Seeds per minibatch."))
    fanouts: tuple[int, ...] = field(metadata=_doc("Neighbors per layer, input layer first (DGL order); -1 takes all."))
    replace: bool = field(default=False, metadata=_doc("Sample neighbors with replacement."))
    shuffle: bool = field(
        default=True, metadata=_doc("Reshuffle the split each epoch (seeded by the job seed and epoch).")
    )
    drop_last: bool = field(default=False, metadata=_doc("Drop the last partial minibatch."))
    rank: int = field(default=0, metadata=_doc("This trainer's rank, in [0, world_size)."))
    world_size: int = field(default=1, metadata=_doc("Number of trainers of the job."))
    feature_name: str = field(
        default="feat",
        metadata={**_doc("Node-data name of the input features."), "proto_empty_is_default": True},
    )
    label_name: str = field(default="label", metadata=_doc('Node-data name of the labels; "" attaches none.'))
    feature_wire_dtype: str = field(
        default="",
        metadata=_doc(
            'Type input features travel in from the loader: "" the stored one; float16 or bfloat16 halve the '
            "bytes (rounded by the loader; the data loaders upcast them to float32). See graphfeed.loader.wire."
        ),
    )

    etype_fanouts: tuple[tuple[int, str, int], ...] = field(
        default=(),
        metadata=_doc(
            "Fanouts per edge type as (layer, edge type, fanout): a layer named here samples each edge type "
            "with its own fanout and must name every edge type of the graph (DGL's {etype: k} per layer)."
        ),
    )

    skip_features: bool = field(
        default=False,
        metadata=_doc(
            "Minibatches carry no input features, blocks only (all-node inference's layers after the first, which "
            "read the previous layer's output instead)."
        ),
    )
    seed_edges: bool = field(
        default=False,
        metadata=_doc(
            "Link prediction: the seeds are the edges of edge split `split` (ingest --edge-split), each minibatch "
            "positive edges with negatives, as DGL's DataLoader with as_edge_prediction_sampler."
        ),
    )
    num_negatives: int = field(default=1, metadata=_doc("Edge minibatches: negative pairs per positive edge (>= 1)."))
    negative_sampler: str = field(
        default="uniform",
        metadata=_doc(
            'Edge minibatches: "uniform" corrupts each positive\'s destination with one drawn uniformly from its node '
            'type (DGL\'s Uniform(k)); "global_uniform" draws both ends uniformly from their types (GlobalUniform(k)).'
        ),
    )
    negatives_avoid_positives: bool = field(
        default=False,
        metadata=_doc("Edge minibatches: redraw a negative that is a known positive (an edge of any edge split)."),
    )
    exclude: str = field(
        default="reverse_id",
        metadata=_doc(
            'Edge minibatches: edges left out of the sampled neighbourhoods (DGL\'s exclude): "reverse_id" the seed '
            'edges and their reverse twins, "self" the seed edges, "none" nothing (the seed edges leak).'
        ),
    )

    def validate(self) -> None:
        """Checks what needs no graph, before anything is sized by these fields.

        Raises:
            InvalidArgument: naming the bad field, its value and the allowed range.
        """
        self._check_fanouts()
        _check_range("batch_size", self.batch_size, 1, MAX_BATCH_SIZE)
        _check_range("world_size", self.world_size, 1, MAX_WORLD_SIZE)
        if not 0 <= self.rank < self.world_size:
            raise InvalidArgument(f"rank must be in [0, world_size={self.world_size}), got {self.rank}")
        if not 0 <= self.job_seed < 2**64:
            raise InvalidArgument(f"job_seed must be a uint64, got {self.job_seed}")
        if not self.split:
            raise InvalidArgument("split must be named (train, val or test)")
        if not self.feature_name:
            raise InvalidArgument("feature_name must not be empty")
        if self.seed_edges:
            self._check_edge_fields()
        if self.feature_wire_dtype not in ("", *FEATURE_WIRE_DTYPES):
            raise InvalidArgument(
                "feature_wire_dtype must be '' (the stored dtype), 'float16' or 'bfloat16', "
                f"got {self.feature_wire_dtype!r}"
            )

    def _check_edge_fields(self) -> None:
        _check_range("num_negatives", self.num_negatives, 1, MAX_NEGATIVES)
        if self.negative_sampler not in NEGATIVE_SAMPLERS:
            raise InvalidArgument(
                f"negative_sampler must be one of {list(NEGATIVE_SAMPLERS)}, got {self.negative_sampler!r}"
            )
        if self.exclude not in EXCLUDE_MODES:
            raise InvalidArgument(f"exclude must be one of {list(EXCLUDE_MODES)}, got {self.exclude!r}")

    def _check_fanouts(self) -> None:
        # The upper bound of each fanout is the sampler's (a setting of the sampler service,
        # unknown here); the sampler answers INVALID_ARGUMENT for one above it.
        if not self.fanouts:
            raise InvalidArgument("fanouts must not be empty (one entry per layer)")
        if len(self.fanouts) > MAX_LAYERS:
            raise InvalidArgument(f"fanouts has {len(self.fanouts)} layers, more than the limit of {MAX_LAYERS}")
        bad = [f for f in self.fanouts if f < -1]
        if bad:
            raise InvalidArgument(f"each fanout must be -1 (all neighbors) or >= 0, got {list(self.fanouts)}")
        for layer, etype, fanout in self.etype_fanouts:
            if not 0 <= layer < len(self.fanouts) or fanout < -1 or not etype:
                raise InvalidArgument(
                    f"etype fanout ({layer}, {etype!r}, {fanout}) needs a layer in [0, {len(self.fanouts)}), "
                    "an edge type and a fanout of -1 or >= 0"
                )

    def sampler_fanouts(self, schema: GraphSchema) -> list[int | list[int]]:
        """Per layer, what the sampler takes: one fanout for every edge type, or (a layer with
        ``etype_fanouts``) one per edge type in the graph's order.

        Raises:
            InvalidArgument: an unknown edge type, one named twice in a layer, or a layer that
                leaves one out.
        """
        layers: list[int | list[int]] = list(self.fanouts)
        named: dict[int, dict[int, int]] = {}
        for layer, etype, fanout in self.etype_fanouts:
            r = schema.etype_id(etype)
            if r in named.setdefault(layer, {}):
                raise InvalidArgument(f"layer {layer} names edge type {etype!r} twice")
            named[layer][r] = fanout
        for layer, by_type in named.items():
            missing = [":".join(e) for r, e in enumerate(schema.etypes) if r not in by_type]
            if missing:
                raise InvalidArgument(
                    f"layer {layer} gives fanouts per edge type but leaves out {missing} (DGL needs every edge type)"
                )
            layers[layer] = [by_type[r] for r in range(len(schema.etypes))]
        return layers


def _check_range(field: str, value: int, low: int, high: int) -> None:
    """:class:`InvalidArgument` naming ``field`` unless ``low <= value <= high``."""
    if value < low:
        raise InvalidArgument(f"{field} must be >= {low}, got {value}")
    if value > high:
        raise InvalidArgument(f"{field} must be <= {high}, got {value}")


@dataclass(frozen=True)
class JobInfo:
    """Static facts about a job for one rank (DescribeJobResponse)."""

    steps_per_epoch: int
    seeds_per_epoch: int
    feature_row_shape: tuple[int, ...]
    feature_dtype: np.dtype
    num_classes: int
    num_nodes: int
    types: GraphSchema | None = None  # node/edge types (a typed graph streams typed features)
    typed_feature_shapes: dict[str, tuple[int, ...]] = field(default_factory=dict)  # by node type with the feature
    seed_etype: str = ""  # an edge job's predicted edge type, "src:rel:dst"
