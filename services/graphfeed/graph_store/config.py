"""Settings of a graph-store server (env prefix ``GRAPHFEED_GRAPH_STORE_``)."""

from __future__ import annotations

from pathlib import Path

from pydantic import ByteSize, Field
from pydantic_settings import SettingsConfigDict

from graphfeed.common.config import ServiceSettings
from graphfeed.common.limits import GRAPH_STORE_MAX_IDS_PER_REQUEST, MAX_FANOUT, NODE_DATA_CHUNK_BYTES


class GraphStoreSettings(ServiceSettings):
    """One graph-store serves one partition directory written by ``graphfeed ingest``."""

    model_config = SettingsConfigDict(env_prefix="GRAPHFEED_GRAPH_STORE_", extra="forbid")

    part_dir: Path = Field(..., description="Partition directory to serve, e.g. <graph root>/part-00000.")
    max_ids_per_request: int = Field(
        default=GRAPH_STORE_MAX_IDS_PER_REQUEST,
        ge=1,
        description="Most seeds or ids accepted in one request (RESOURCE_EXHAUSTED beyond).",
    )
    max_fanout: int = Field(
        default=MAX_FANOUT, ge=0, description="Largest fanout accepted by SampleNeighbors besides -1 (all)."
    )
    chunk_bytes: int = Field(
        default=NODE_DATA_CHUNK_BYTES,
        ge=1,
        description="Most bytes of rows per GetNodeData response message (at least one row is sent).",
    )
    memory_budget: ByteSize = Field(
        default=ByteSize(0),
        description="Bytes of node data kept in memory (e.g. 134217728 or 128MiB); the rows of the highest in-degree "
        "nodes stay in memory, the others are read from a flat copy on disk on demand. "
        "0 keeps all node data in memory.",
    )
    direct_io: bool = Field(
        default=False,
        description="With a memory budget, read rows from disk with O_DIRECT, bypassing the page cache "
        "(which a pod's memory limit would otherwise be charged for).",
    )
    io_threads: int = Field(
        default=8, ge=1, description="With a memory budget, threads reading rows from disk (several reads in flight)."
    )
    malloc_arena_max: int = Field(
        default=0,
        ge=0,
        description="glibc malloc arenas of the process (0: glibc's default, up to 8 per core, one grown per gRPC "
        "handler thread; 2 bounds a budgeted store's heap).",
    )
    malloc_mmap_threshold_bytes: int = Field(
        default=0,
        ge=0,
        le=32 << 20,
        description="Allocations of at least this many bytes (answers) are mapped on their own and given back to "
        "the kernel when freed: RSS that stays flat while serving, at the price of fresh pages for every answer "
        "(1 MiB doubled a graph-store's CPU per minibatch on the MAG-like job: 0.43 -> 0.82 s). 0: glibc's sliding "
        "threshold, which keeps large answers in the heap and reuses them (the default: throughput); set it "
        "(e.g. 1048576, with --malloc-arena-max 2) where a memory budget matters more.",
    )
    append_dir: str = Field(
        default="",
        description="Directory of the durable edge-append log (RocksDB), e.g. <part_dir>/appends: AppendEdges takes "
        "edges while serving. Empty (default): appends disabled, a static graph (SampleTemporal still serves "
        "ingest-time timestamps). Opt-in: the log holds a lock, so two graph-stores cannot share it.",
    )
    embeddings_dir: str = Field(
        default="",
        description="Directory of the trainable embedding tables (rows, optimizer state, push log, snapshots); "
        "empty (default): <part_dir>/embeddings. Tables survive a restart (kill -9 included) as long as it does.",
    )

    temporal_max_blocks: int = Field(
        default=256,
        ge=1,
        description="With appends, compact the temporal graph in the background once this many append "
        "batches are pending; appends wait when 4x as many pile up while a compaction runs.",
    )
    temporal_compact_min_edges: int = Field(
        default=1_000_000,
        ge=1,
        description="Also compact once the pending batches hold more than max(this, base edges) edges "
        "(amortized O(1) per appended edge).",
    )
    temporal_snapshot_min_edges: int = Field(
        default=1_000_000,
        ge=0,
        description="With appends, persist the appended edges of the compacted temporal graph into the append dir once "
        "max(this, E / 4) edges were appended since the last snapshot (of E appended edges); the log's older batches "
        "are then deleted and a restart replays only the later ones. 0: never (the log keeps every batch).",
    )

    def temporal_limits(self) -> dict[str, int]:
        """The :class:`~graphfeed.graph_store.temporal.store.TemporalStore` settings, by its keyword names."""
        return {
            "max_blocks": self.temporal_max_blocks,
            "compact_min_edges": self.temporal_compact_min_edges,
            "snapshot_min_edges": self.temporal_snapshot_min_edges,
        }

    def embeddings_path(self) -> Path | None:
        """Where embedding tables live, or None for the default under the partition directory."""
        return Path(self.embeddings_dir) if self.embeddings_dir else None

    def append_path(self) -> Path | None:
        """Where the append log lives, or None when appends are disabled."""
        return Path(self.append_dir) if self.append_dir else None
