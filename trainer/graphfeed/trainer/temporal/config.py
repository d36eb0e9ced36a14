"""The TGN job's settings (no torch: the ``graphfeed`` CLI builds its flags from them).

:class:`TGNConfig` is what the trainer reads, each field with its default and description;
:class:`TGNSettings` is the command line and environment (``GRAPHFEED_TRAIN_TEMPORAL_*``) of
``graphfeed train-temporal`` / ``python -m graphfeed.trainer.temporal``, its model fields taken
from TGNConfig.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from pathlib import Path

from pydantic import Field
from pydantic_settings import BaseSettings, SettingsConfigDict

from graphfeed.common.config import field_from
from graphfeed.common.errors import InvalidArgument

__all__ = ["DEVICES", "VISIBILITIES", "TGNConfig", "TGNSettings"]

VISIBILITIES = ("same-batch", "previous-batches")
"""What an event's neighbour lookup may see: every event strictly before its time, earlier events
of its own batch included (the TGN paper's code), or the events of earlier batches only (PyG's
``LastNeighborLoader``, which also sees earlier batches' events at the event's own time)."""

DEVICES = ("cpu", "cuda", "auto")
"""Where the weights and node memory live (``auto``: cuda where PyTorch sees a GPU)."""


def _doc(description: str) -> dict[str, str]:
    return {"description": description}


@dataclass(frozen=True)
class TGNConfig:
    """Hyper-parameters and run settings (defaults as in PyG's TGN example)."""

    seed: int = field(default=0, metadata=_doc("Job seed: initial weights and every negative."))
    epochs: int = field(default=1, metadata=_doc("Passes over the stream."))
    batch_size: int = field(default=200, metadata=_doc("Events per batch."))
    fanout: int = field(default=10, metadata=_doc("Most recent neighbours attended to (0: memory only)."))
    visibility: str = field(
        default="same-batch",
        metadata=_doc(
            "Neighbours an event may see: same-batch (every event strictly before its time, the TGN paper's "
            "code; a function of the data alone) or previous-batches (earlier batches only, as PyG's "
            "LastNeighborLoader; depends on the batch size; graph-stores answer it as of each batch's append)."
        ),
    )
    memory_dim: int = field(default=100, metadata=_doc("Width of the memory."))
    time_dim: int = field(default=100, metadata=_doc("Width of the time encoding."))
    embed_dim: int = field(default=100, metadata=_doc("Width of the embedding."))
    heads: int = field(default=2, metadata=_doc("Attention heads."))
    lr: float = field(default=1e-4, metadata=_doc("Adam learning rate."))
    dropout: float = field(
        default=0.1, metadata=_doc("Dropout on the attention weights in training (PyG's TGN example: 0.1).")
    )
    patience: int | None = field(
        default=None,
        metadata=_doc("Stop after this many epochs without a better validation AP (default: run every epoch)."),
    )
    keep_best: bool = field(
        default=True,
        metadata=_doc(
            "At the end, restore the weights and memory of the epoch with the best validation AP "
            "(false: keep the last epoch's)."
        ),
    )
    mrr_negatives: int = field(
        default=19,
        metadata=_doc("Val/test negatives per event: MRR ranks the positive among 1 + this many; AP uses the first."),
    )
    chunks: int = field(default=10, metadata=_doc("Metric lines per epoch (one per 10 % of the events by default)."))
    device: str = field(
        default="cpu",
        metadata=_doc(
            "cpu, cuda or auto: where the weights, the node memory and (in-process neighbours) the edge "
            "feature cache live."
        ),
    )
    edge_cache_rows: int = field(
        default=1 << 20,
        metadata=_doc(
            "On a GPU: the features of this many most recent events are kept in device memory; older ones "
            "are read zero-copy from pinned host memory."
        ),
    )
    checkpoint: Path | None = field(default=None, metadata=_doc("Checkpoint file; resumed from when present."))
    checkpoint_every: int = field(default=50, metadata=_doc("Batches between checkpoints."))
    crash_after_batches: int | None = field(
        default=None, metadata=_doc("Tests: SIGKILL this process after that many batches of this run.")
    )

    def __post_init__(self) -> None:
        if not 0 <= self.dropout < 1 or (self.patience is not None and self.patience < 1):
            raise InvalidArgument(f"dropout {self.dropout} must be in [0, 1), patience {self.patience} >= 1")
        if self.visibility not in VISIBILITIES:
            raise InvalidArgument(f"visibility {self.visibility!r}: choose from {VISIBILITIES}")
        if self.device not in DEVICES or self.edge_cache_rows < 0:
            raise InvalidArgument(
                f"device {self.device!r} (choose from {DEVICES}), edge cache rows {self.edge_cache_rows} >= 0"
            )


class TGNSettings(BaseSettings):
    """The TGN command: a dataset, the model (defaults: :class:`TGNConfig`'s) and where its
    neighbours live (in process, or graph-stores that take the events as appends)."""

    model_config = SettingsConfigDict(env_prefix="GRAPHFEED_TRAIN_TEMPORAL_", extra="forbid")

    dataset: str = Field(
        default="collegemsg",
        description="Event stream: collegemsg, lastfm, pubmed, the root directory of a graph written by "
        "`graphfeed ingest` with edge timestamps, or an edge-list CSV with a time column.",
    )
    columns: str | None = Field(
        default=None, description="A CSV dataset's columns, as `graphfeed ingest --columns` (e.g. src,dst,ts)."
    )
    split: str | None = Field(
        default=None,
        description="Chronological train,val,test fractions of the events (default: the dataset's own split, "
        "else 0.7,0.15,0.15).",
    )
    events: int | None = Field(default=None, description="Use only the first N events (re-split chronologically).")
    epochs: int = field_from(TGNConfig, "epochs")
    batch_size: int = field_from(TGNConfig, "batch_size")
    fanout: int = field_from(TGNConfig, "fanout")
    visibility: str = field_from(TGNConfig, "visibility")
    lr: float = field_from(TGNConfig, "lr")
    dropout: float = field_from(TGNConfig, "dropout")
    patience: int | None = field_from(TGNConfig, "patience")
    keep_best: bool = field_from(TGNConfig, "keep_best")
    dim: int = field_from(
        TGNConfig, "memory_dim", description="Width of the memory, time encoding and embedding (all three)."
    )
    mrr_negatives: int = field_from(TGNConfig, "mrr_negatives")
    seed: int = field_from(TGNConfig, "seed")
    device: str = field_from(TGNConfig, "device")
    edge_cache_rows: int = field_from(TGNConfig, "edge_cache_rows")
    checkpoint: Path | None = field_from(TGNConfig, "checkpoint")
    checkpoint_every: int = field_from(TGNConfig, "checkpoint_every")
    threads: int | None = Field(default=None, description="Torch CPU threads (default: torch's choice).")
    mmap_threshold_kib: int = Field(
        default=1024,
        description="Fix glibc's mmap threshold (KiB) so memory stays bounded; 0: glibc's dynamic one, up to 2x "
        "faster, but resident memory grows by GBs over a LastFM epoch.",
    )
    graph_stores: str = Field(
        default="",
        description="host:port of every graph-store started with --append-dir, comma-separated (or one {p} "
        "template): the events are appended there, durably, and neighbours sampled there; default: an "
        "in-process neighbour source.",
    )
    job_id: str = Field(
        default="tgn", description="Names the job's append batches (unique per job; a resumed job reuses it)."
    )
    json_path: Path | None = Field(default=None, description="Write the metrics and wall time here.")
    save_weights: Path | None = Field(default=None, description="Write the final model state_dict here.")
    crash_after_batches: int | None = field_from(TGNConfig, "crash_after_batches")

    def tgn_config(self) -> TGNConfig:
        """The :class:`TGNConfig` these settings describe."""
        return TGNConfig(
            seed=self.seed,
            epochs=self.epochs,
            batch_size=self.batch_size,
            fanout=self.fanout,
            visibility=self.visibility,
            lr=self.lr,
            dropout=self.dropout,
            patience=self.patience,
            keep_best=self.keep_best,
            memory_dim=self.dim,
            time_dim=self.dim,
            embed_dim=self.dim,
            mrr_negatives=self.mrr_negatives,
            device=self.device,
            edge_cache_rows=self.edge_cache_rows,
            checkpoint=self.checkpoint,
            checkpoint_every=self.checkpoint_every,
            crash_after_batches=self.crash_after_batches,
        )
