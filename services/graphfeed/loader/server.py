"""Runs a loader: ``serve`` starts one (non-blocking), ``main`` runs one until SIGTERM."""

from __future__ import annotations

import logging
from pathlib import Path

from prometheus_client import CollectorRegistry

from graphfeed.common.rpc import RunningServer, run_service, start_service_server
from graphfeed.common.transport import ServerTransport
from graphfeed.graph_store.client import RemotePartitionSet
from graphfeed.loader.config import LoaderSettings
from graphfeed.loader.core import Loader
from graphfeed.loader.metrics import LoaderMetrics
from graphfeed.loader.servicer import LoaderServicer
from graphfeed.loader.v1 import loader_pb2 as pb
from graphfeed.loader.v1 import loader_pb2_grpc as pb_grpc
from graphfeed.sampler.client import SamplerClient

log = logging.getLogger(__name__)

SERVICE_NAME = pb.DESCRIPTOR.services_by_name["LoaderService"].full_name


def close_all(loader: Loader) -> None:
    """Stops the loader's streams, then closes the sampler and graph-store channels ``serve`` opened."""
    loader.close()
    sampler = loader.sampler
    if not isinstance(sampler, SamplerClient):
        raise TypeError(f"close_all() closes a loader built by serve(), over a SamplerClient, not over a {type(sampler).__name__}")
    sampler.close()
    loader.partitions.close()


def serve(settings: LoaderSettings, registry: CollectorRegistry | None = None) -> tuple[RunningServer, Loader]:
    """Connects to the graph-stores and the sampler and starts the gRPC server (and /metrics
    unless ``metrics_port == -1``).

    Args:
        settings: server settings, peer addresses, cache and pipeline sizes.
        registry: where metrics are registered; a fresh registry if None.

    Returns:
        The running server (``.port``, ``.metrics_port`` bound) and its loader; the caller
        stops the server and then calls :func:`close_all` on the loader.

    Raises:
        FailedPrecondition: the graph-stores do not cover each partition exactly once.
        Unavailable: a graph-store could not be reached.
    """
    registry = CollectorRegistry() if registry is None else registry
    metrics = LoaderMetrics.create(registry)
    partitions = RemotePartitionSet(settings.graph_store_addresses, timeout_s=settings.rpc_timeout_s, shm_dir=settings.shm_dir)
    sampler = SamplerClient(settings.sampler_address, timeout_s=settings.rpc_timeout_s, shm_dir=settings.shm_dir)
    loader = Loader(
        partitions,
        sampler,
        cache_policy=settings.cache_policy,
        cache_bytes=settings.cache_bytes,
        cache_options=settings.cache_options(),
        gpu_cache_bytes=settings.gpu_cache_bytes,
        lookahead_steps=settings.lookahead_steps,
        max_inflight=settings.max_inflight,
        sample_workers=settings.sample_workers,
        on_minibatch=metrics.record_minibatch,
        pack_root=Path(settings.pack_root) if settings.pack_root else None,
        pack_read_threads=settings.pack_read_threads,
        pack_direct_io=settings.pack_direct_io,
    )
    metrics.watch(loader)
    running = start_service_server(
        settings,
        register=lambda server: pb_grpc.add_LoaderServiceServicer_to_server(
            LoaderServicer(loader, ServerTransport(settings.shm_dir, "LoaderService", registry)), server
        ),
        service_names=[SERVICE_NAME],
        registry=registry,
        on_error=lambda: close_all(loader),
    )
    log.info(
        "loader serving on %s: %d partitions, sampler %s, cache %s %d bytes",
        running.address, partitions.num_partitions, settings.sampler_address, settings.cache_policy, settings.cache_bytes,
    )  # fmt: skip
    return running, loader


def main(settings: LoaderSettings) -> None:
    """Serves until SIGTERM/SIGINT, then drains calls for ``grace_s`` and closes everything."""
    run_service("loader", settings, serve, on_stop=close_all)
