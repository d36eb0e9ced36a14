"""Runs a graph-store: ``serve`` starts one (non-blocking), ``main`` runs one until SIGTERM."""

from __future__ import annotations

import logging
import time
from pathlib import Path

import numpy as np
from prometheus_client import CollectorRegistry

from graphfeed.common.errors import ResourceExhausted
from graphfeed.common.malloc import tune_malloc
from graphfeed.common.rpc import RunningServer
from graphfeed.common.service import run_service, server_transport, start_service_server
from graphfeed.graph_store.config import GraphStoreSettings
from graphfeed.graph_store.metrics import EmbeddingMetrics, GraphStoreMetrics, RowTierCollector, TemporalMetrics
from graphfeed.graph_store.servicer import GraphStoreServicer
from graphfeed.graph_store.store import GraphStore
from graphfeed.graph_store.v1 import graph_store_pb2 as pb
from graphfeed.graph_store.v1 import graph_store_pb2_grpc as pb_grpc

log = logging.getLogger(__name__)

SERVICE_NAME = pb.DESCRIPTOR.services_by_name["GraphStoreService"].full_name


def dir_bytes(path: Path) -> int:
    """Total size of the regular files under ``path`` (0 if it does not exist)."""
    return sum(f.stat().st_size for f in Path(path).rglob("*") if f.is_file())


WARM_SEEDS = 1024  # owned nodes sampled once at start: enough for one of them to have an in-edge


def warm_kernels(store: GraphStore) -> None:
    """Compiles the sampling kernels (or loads them from numba's cache) before the server
    listens, for the arrays a SampleNeighbors call passes (answers in new int64 arrays and in
    int32 ones). On a fresh image the first compile takes seconds of CPU, which a busy machine
    stretches past a caller's deadline (the sampler's, then the loader's): the first minibatch
    stream failed DEADLINE_EXCEEDED. Here it only delays readiness."""
    n = min(store.stop - store.start, WARM_SEEDS, store.max_ids_per_request)
    if n <= 0:
        return
    began = time.monotonic()
    seeds = np.arange(store.start, store.start + n, dtype=np.int64)
    for dtype in (np.int64, np.int32):

        def alloc(offsets: np.ndarray, dtype: type = dtype) -> tuple[np.ndarray, np.ndarray]:
            return np.empty(int(offsets[-1]), dtype), np.empty(int(offsets[-1]), dtype)

        try:
            store.sample_neighbors(seeds, 1, False, 0, alloc)
        except ResourceExhausted as exc:  # a store limited below this: the first call compiles
            log.info("graph-store partition %d: sampling kernels not warmed (%s)", store.partition_id, exc)
            return
    log.info("graph-store partition %d: sampling kernels ready in %.1fs", store.partition_id, time.monotonic() - began)


def serve(settings: GraphStoreSettings, registry: CollectorRegistry | None = None) -> tuple[RunningServer, GraphStore]:
    """Opens the partition and starts the gRPC server (and /metrics unless ``metrics_port == -1``).

    Args:
        settings: server and store settings.
        registry: where metrics are registered; a fresh registry if None.

    Returns:
        The running server (``.port``, ``.metrics_port`` bound) and the store it serves; the
        caller stops the server and then closes the store.
    """
    registry = CollectorRegistry() if registry is None else registry
    store = GraphStore.open(
        settings.part_dir,
        append_dir=settings.append_path(),
        embeddings_dir=settings.embeddings_path(),
        max_ids_per_request=settings.max_ids_per_request,
        max_fanout=settings.max_fanout,
        chunk_bytes=settings.chunk_bytes,
        memory_budget=int(settings.memory_budget),
        direct_io=settings.direct_io,
        io_threads=settings.io_threads,
        **settings.temporal_limits(),
    )
    try:
        warm_kernels(store)
    except BaseException:
        store.close()
        raise
    metrics = GraphStoreMetrics.create(registry)
    registry.register(RowTierCollector(store.row_stats))
    metrics.rocksdb_bytes.set(dir_bytes(Path(settings.part_dir) / "db"))
    metrics.partition_info.labels(str(store.partition_id)).set(1)
    # A store held to a memory budget parks no more than its budget on the bulk plane (which holds
    # each answer whole): beyond that its answers go inline, in bounded messages, as before.
    transport = server_transport(settings, "GraphStoreService", registry, int(settings.memory_budget))
    servicer = GraphStoreServicer(
        store, metrics, transport, TemporalMetrics.create(registry), EmbeddingMetrics.create(registry)
    )
    running = start_service_server(
        settings,
        transport=transport,
        register=lambda server: pb_grpc.add_GraphStoreServiceServicer_to_server(servicer, server),
        service_names=[SERVICE_NAME],
        registry=registry,
        on_error=store.close,
    )
    log.info("graph-store partition %d serving on %s", store.partition_id, running.address)
    return running, store


def main(settings: GraphStoreSettings) -> None:
    """Serves until SIGTERM/SIGINT, then drains calls for ``grace_s`` and closes the store.
    The process's malloc is set first (:mod:`graphfeed.common.malloc`: what it frees goes back)."""
    tune_malloc(settings.malloc_arena_max, settings.malloc_mmap_threshold_bytes)
    run_service("graph-store", settings, serve, on_stop=lambda store: store.close())
