"""Settings of ``graphfeed pack`` (env prefix ``GRAPHFEED_PACK_``): its flags are generated from them.

The job fields are :class:`~graphfeed.loader.job.JobSpec`'s (default and description from there,
so a pack is keyed as the trainer's loader will look it up); the packing ones default to
:class:`~graphfeed.pack.writer.PackOptions`'.
"""

from __future__ import annotations

from pathlib import Path
from typing import Annotated, Literal

from pydantic import BeforeValidator, Field, field_validator
from pydantic_settings import BaseSettings, SettingsConfigDict

from graphfeed.common.config import field_from, split_commas
from graphfeed.loader.job import JobSpec
from graphfeed.pack.writer import PackOptions

__all__ = ["PACK_JOB_FIELDS", "PackSettings"]

PACK_JOB_FIELDS = (
    "job_seed",
    "split",
    "batch_size",
    "fanouts",
    "replace",
    "shuffle",
    "drop_last",
    "rank",
    "world_size",
    "feature_name",
    "seed_edges",
    "num_negatives",
    "negative_sampler",
    "negatives_avoid_positives",
    "exclude",
)
"""The JobSpec fields a pack depends on (:class:`~graphfeed.loader.packs.format.PackedJob`), each a setting."""


class PackSettings(BaseSettings):
    """Where the graph is (``data`` or ``graph_stores``), where packs go, which job and epochs."""

    model_config = SettingsConfigDict(env_prefix="GRAPHFEED_PACK_", extra="forbid")

    data: Path | None = Field(default=None, description="Partition root (opened in this process).")
    graph_stores: str = Field(default="", description="host:port of every graph-store, comma-separated.")
    out: Path = Field(..., description="Pack root (a loader's --pack-root).")
    token_file: str = Field(
        default="", description="With --graph-stores, a file whose first line is the bearer token sent with every call."
    )
    wait_s: float = Field(
        default=0.0,
        ge=0,
        description="With --graph-stores, seconds to wait for every graph-store to answer SERVING before packing "
        "(a pack Job started beside graph-stores that are still staging); 0: fail at once.",
    )
    epochs: str = Field(
        default="0:1", description="Epochs to pack, START:END (end exclusive): packed ahead of the trainer."
    )
    job_seed: int = field_from(JobSpec, "job_seed")
    split: str = field_from(JobSpec, "split")
    batch_size: int = field_from(JobSpec, "batch_size")
    fanouts: Annotated[list[int], BeforeValidator(split_commas)] = field_from(
        JobSpec, "fanouts", min_length=1, description="Neighbors per layer, comma-separated, input layer first."
    )
    replace: bool = field_from(JobSpec, "replace")
    shuffle: bool = field_from(JobSpec, "shuffle", description="Reshuffle the split each epoch, as the trainer's.")
    drop_last: bool = field_from(JobSpec, "drop_last")
    rank: int = field_from(JobSpec, "rank")
    world_size: int = field_from(JobSpec, "world_size")
    feature_name: str = field_from(JobSpec, "feature_name")
    seed_edges: bool = field_from(JobSpec, "seed_edges")
    num_negatives: int = field_from(JobSpec, "num_negatives")
    negative_sampler: str = field_from(JobSpec, "negative_sampler")
    negatives_avoid_positives: bool = field_from(JobSpec, "negatives_avoid_positives")
    exclude: str = field_from(JobSpec, "exclude")
    max_blow_up: float = field_from(
        PackOptions,
        "max_blow_up",
        gt=0,
        description="Bytes of packs written per epoch / bytes of the feature table, at most: consecutive steps "
        "share a pack (each row once) until its rows per step fit the epoch's share of this.",
    )
    max_pack_bytes: int = field_from(
        PackOptions,
        "max_pack_bytes",
        ge=0,
        description="A pack closes before its distinct rows pass this many bytes (what a loader holds per pack; "
        "0: no limit but the blow-up target).",
    )
    steps_per_pack: int = field_from(
        PackOptions, "steps_per_pack", ge=0, description="Most consecutive steps in one pack (0: no limit)."
    )
    resident: Literal["reuse", "degree"] = field_from(
        PackOptions,
        "resident",
        description="Which rows stay out of the packs: reuse (most reused) or degree (highest in-degree, "
        "as static_degree).",
    )
    resident_bytes: int = field_from(
        PackOptions,
        "resident_bytes",
        ge=0,
        description="Bytes of rows left to the memory tiers (the loader's cache_bytes).",
    )
    sample_workers: int = field_from(PackOptions, "sample_workers", ge=1, description="Threads sampling ahead.")

    @field_validator("epochs")
    @classmethod
    def _epochs_are_a_range(cls, text: str) -> str:
        start, sep, end = text.partition(":")
        try:
            first, stop = int(start), int(end) if sep else int(start) + 1
        except ValueError:
            raise ValueError(f"give START:END (end exclusive) or one epoch, got {text!r}") from None
        if not 0 <= first < stop:
            raise ValueError(f"need 0 <= START < END, got {text!r}")
        return text

    def epoch_range(self) -> range:
        """The epochs to pack (``epochs`` START:END, end exclusive; or one epoch)."""
        start, sep, end = self.epochs.partition(":")
        return range(int(start), int(end) if sep else int(start) + 1)

    def job(self) -> JobSpec:
        """The job to pack."""
        values = {name: getattr(self, name) for name in PACK_JOB_FIELDS}
        return JobSpec(**{**values, "fanouts": tuple(self.fanouts)})

    def options(self) -> PackOptions:
        """How to pack."""
        return PackOptions(
            max_blow_up=self.max_blow_up,
            max_pack_bytes=self.max_pack_bytes,
            steps_per_pack=self.steps_per_pack,
            resident=self.resident,
            resident_bytes=self.resident_bytes,
            sample_workers=self.sample_workers,
        )
