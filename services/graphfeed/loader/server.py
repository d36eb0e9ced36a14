"""Runs a loader: ``serve`` starts one (non-blocking), ``main`` runs one until SIGTERM."""

from __future__ import annotations

import logging
from pathlib import Path
from typing import Any, cast

from prometheus_client import CollectorRegistry, Counter

from graphfeed.common.readiness import GatedServicer, PeerGate, check_serving
from graphfeed.common.rpc import RunningServer
from graphfeed.common.service import run_service, server_transport, start_service_server
from graphfeed.graph_store.partitions import RemotePartitionSet
from graphfeed.graph_store.peers import connect_partitions, graph_changed
from graphfeed.loader.config import LoaderSettings, max_streams
from graphfeed.loader.core import Loader
from graphfeed.loader.metrics import LoaderMetrics
from graphfeed.loader.servicer import LoaderServicer, StreamSlots
from graphfeed.loader.stall import StallWatch
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
        raise TypeError(
            f"close_all() closes a loader built by serve(), over a SamplerClient, not over a {type(sampler).__name__}"
        )
    sampler.close()
    loader.partitions.close()


def _connect(settings: LoaderSettings, metrics: LoaderMetrics) -> Loader:
    """A loader over the graph-stores and the sampler; PeerNotReady while one of them is not SERVING."""
    partitions = connect_partitions(
        settings.graph_store_addresses, timeout_s=settings.rpc_timeout_s, shm_dir=settings.shm_dir
    )
    try:
        check_serving(settings.sampler_address, f"sampler {settings.sampler_address}", timeout_s=5.0)
        sampler = SamplerClient(settings.sampler_address, timeout_s=settings.rpc_timeout_s, shm_dir=settings.shm_dir)
    except BaseException:
        partitions.close()
        raise
    try:
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
            pack_reuse=settings.pack_reuse,
        )
    except BaseException:
        sampler.close()
        partitions.close()
        raise
    metrics.watch(loader)
    log.info(
        "loader connected: %d partitions (graph version %s), sampler %s, cache %s %d bytes",
        partitions.num_partitions,
        partitions.info.graph_version or "(none)",
        settings.sampler_address,
        settings.cache_policy,
        settings.cache_bytes,
    )
    return loader


def _graph_changed(loader: Loader) -> str | None:
    partitions = loader.partitions
    return graph_changed(partitions) if isinstance(partitions, RemotePartitionSet) else None


def start(
    settings: LoaderSettings, registry: CollectorRegistry | None = None
) -> tuple[RunningServer, PeerGate[Loader]]:
    """Starts the gRPC server (and /metrics unless ``metrics_port == -1``, health unless
    ``health_port == -1``) at once, NOT_SERVING; connects to the graph-stores and the sampler in
    the background (SERVING once every graph-store answers and the sampler is SERVING) and
    rebuilds the loader when the graph version changes.

    Returns:
        The running server (ports bound) and the gate holding the loader; stopping the server
        closes the gate, which closes the loader with :func:`close_all`.
    """
    registry = CollectorRegistry() if registry is None else registry
    metrics = LoaderMetrics.create(registry)
    transport = server_transport(settings, "LoaderService", registry)
    running: RunningServer | None = None
    gate = PeerGate(
        "loader",
        lambda: _connect(settings, metrics),
        on_serving=lambda ok: running.set_serving(ok) if running else None,
        check=_graph_changed,
        release=close_all,
        check_interval_s=settings.peer_check_interval_s,
        max_backoff_s=settings.peer_backoff_max_s,
    )
    slots = StreamSlots(max_streams(settings.max_workers), settings.max_streams_per_client)
    stalled = Counter(
        "graphfeed_loader_streams_stalled",
        "Minibatch streams ended because their client took nothing",
        registry=registry,
    )
    stalls = StallWatch(settings.stream_stall_timeout_s, on_stall=stalled.inc)
    servicer = GatedServicer(gate, lambda loader: LoaderServicer(loader, slots, transport, stalls=stalls))
    running = start_service_server(
        settings,
        transport=transport,
        register=lambda server: pb_grpc.add_LoaderServiceServicer_to_server(cast(Any, servicer), server),
        service_names=[SERVICE_NAME],
        registry=registry,
        serving=False,
    )
    running.on_stop.append(gate.close)
    gate.start()
    log.info(
        "loader listening on %s, waiting for the graph-stores and sampler %s", running.address, settings.sampler_address
    )
    return running, gate


def serve(settings: LoaderSettings, registry: CollectorRegistry | None = None) -> tuple[RunningServer, Loader]:
    """:func:`start`, then waits up to ``rpc_timeout_s`` for the peers (in-process use).

    Returns:
        The running server and its loader; stopping the server closes the loader (:func:`close_all`).

    Raises:
        Unavailable: the peers were not ready in time (the server is stopped).
    """
    running, gate = start(settings, registry)
    try:
        return running, gate.wait(settings.rpc_timeout_s)
    except BaseException:
        running.stop(0)
        raise


def main(settings: LoaderSettings) -> None:
    """Serves until SIGTERM/SIGINT, then drains calls for ``grace_s`` and closes everything."""
    run_service("loader", settings, start, on_stop=lambda gate: gate.close())
