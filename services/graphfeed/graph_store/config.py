"""Settings of a graph-store server (env prefix ``GRAPHFEED_GRAPH_STORE_``)."""

from __future__ import annotations

from pathlib import Path

from pydantic import Field
from pydantic_settings import SettingsConfigDict

from graphfeed.common.config import ServiceSettings


class GraphStoreSettings(ServiceSettings):
    """One graph-store serves one partition directory written by ``graphfeed ingest``."""

    model_config = SettingsConfigDict(env_prefix="GRAPHFEED_GRAPH_STORE_", extra="forbid")

    part_dir: Path = Field(..., description="Partition directory to serve, e.g. <graph root>/part-00000.")
    max_ids_per_request: int = Field(
        default=4_000_000, ge=1, description="Most seeds or ids accepted in one request (RESOURCE_EXHAUSTED beyond)."
    )
    max_fanout: int = Field(default=1000, ge=0, description="Largest fanout accepted by SampleNeighbors besides -1 (all).")
    chunk_bytes: int = Field(
        default=4 << 20, ge=1, description="Most bytes of rows per GetNodeData response message (at least one row is sent)."
    )
    append_dir: str | None = Field(
        default=None,
        description="Directory of the durable edge-append log (RocksDB); unset: <part_dir>/appends; empty: appends "
        "disabled (a static graph; SampleTemporal still serves ingest-time timestamps).",
    )

    def append_path(self) -> Path | None:
        """Where the append log lives, or None when appends are disabled."""
        if self.append_dir is None:
            return Path(self.part_dir) / "appends"
        return Path(self.append_dir) if self.append_dir else None
