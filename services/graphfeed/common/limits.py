"""Every size limit of graphfeed, in one place, each named with (or documented in) its unit.

Two kinds, never sharing a name:

* **Refusal limits** (``MAX_*``): the most one request may carry. A server answers
  INVALID_ARGUMENT or RESOURCE_EXHAUSTED beyond them, so that no request makes it hold unbounded
  memory. The services' settings use these as defaults (``max_ids_per_request``, ...).
* **Chunk sizes** (``*_PER_CALL``, ``*_CHUNK_BYTES``): how much a client or server puts in one
  call, message or read of its own. Work beyond them goes out in several pieces with the same
  result; each must stay within the refusal limit of whoever receives it.

Plain constants: importing this module reads nothing and starts nothing.
"""

from __future__ import annotations

# --- A job (loader.proto's JobSpec), checked by JobSpec.validate before anything is sized by it.
MAX_WORLD_SIZE = 1 << 16
"""Ranks in one job (an epoch plan is padded to a multiple of world_size)."""
MAX_BATCH_SIZE = 1 << 20
"""Seeds per minibatch (a sampler refuses more than its ``max_seeds_per_request`` anyway)."""
MAX_NEGATIVES = 1024
"""Negative pairs per positive edge of an edge minibatch (each is a seed pair: they multiply the seeds)."""
MAX_LAYERS = 16
"""Sampling layers (fanouts) per job; every layer is a hop whose frontier can grow by its fanout."""

# --- Refusal limits of the services (their settings' defaults).
GRAPH_STORE_MAX_IDS_PER_REQUEST = 4_000_000
"""Seeds or node ids a graph-store accepts in one request (GraphStoreSettings.max_ids_per_request)."""
MAX_FANOUT = 1000
"""Neighbors per seed and layer a graph-store or sampler accepts, besides -1 (all neighbors)."""
MAX_APPEND_EDGES_PER_REQUEST = 1_000_000
"""Edges a graph-store accepts in one AppendEdges batch."""
EMBEDDING_WAIT_SLICE_S = 1.0
"""Seconds a graph-store holds one PullEmbedding/SnapshotEmbedding that waits for a step; the
client then asks again, within its deadline. Waiting calls occupy handler threads: bounded, they
cannot keep the pushes they wait for from getting one."""
EMBEDDING_DEDUP_STEPS = 4096
"""Applied steps whose pushes' digests an embedding table keeps, to recognize a retried or
replayed push (older steps are refused as before the last applied one)."""
SAMPLER_MAX_SEEDS_PER_REQUEST = 1_000_000
"""Seeds a sampler accepts in one SampleBlocks request (SamplerSettings.max_seeds_per_request)."""
MAX_MESSAGE_BYTES = 1 << 30
"""Bytes of one gRPC message, sent or received (a minibatch of the 1M-node preset is ~114 MB of
features); requests are bounded separately by the limits above."""
MAX_ANSWER_BYTES = MAX_MESSAGE_BYTES
"""Bytes of sampled edges one SampleNeighbors or SampleTemporal answer may hold: a request
whose answer would be larger is refused (RESOURCE_EXHAUSTED, before anything is allocated)
instead of building it, since ids per request alone do not bound it (fanout -1 on a hub)."""
MAX_TENSOR_DIMS = 32
"""Dimensions of one tensor on the wire."""

# --- Chunk sizes: ids per call a client sends (each within the receiver's refusal limit).
SAMPLE_SEEDS_PER_CALL = 1 << 20
"""Seeds a sampler sends a graph-store in one SampleNeighbors call (8 MiB of ids); a larger share
of a hop's frontier goes out in several concurrent calls (SamplerSettings.max_ids_per_request)."""
FETCH_IDS_PER_CALL = 1 << 16
"""Node ids a loader (or ``graphfeed pack``) sends a graph-store in one GetNodeData call."""
TEMPORAL_ROOTS_PER_CALL = 1_000_000
"""Roots a TemporalClient sends a graph-store in one SampleTemporal call."""

# --- Chunk sizes: bytes per message or read.
STREAM_CHUNK_BYTES = 1 << 20
"""Bulk bytes per message of a stream that travels without shared memory."""
NODE_DATA_CHUNK_BYTES = 4 << 20
"""Bytes of rows per GetNodeData response message of a graph-store (at least one row is sent)."""
PACK_READ_CHUNK_BYTES = 8 << 20
"""Bytes per pread of a pack file: large enough to stream, small enough to spread over threads."""
DISK_ROWS_READ_BYTES = 256 << 10
"""Bytes per pread of a graph-store's on-disk rows; longer runs of wanted rows are split."""
ROCKSDB_VALUE_BYTES = 1 << 20
"""Target bytes of one RocksDB value holding node-data rows of a partition."""
