"""Runs a sampler: ``serve`` starts one (non-blocking), ``main`` runs one until SIGTERM."""

from __future__ import annotations

import logging

from prometheus_client import CollectorRegistry

from graphfeed.common.rpc import RunningServer, run_service, start_service_server
from graphfeed.common.transport import ServerTransport
from graphfeed.graph_store.client import RemotePartitionSet
from graphfeed.sampler.config import SamplerSettings
from graphfeed.sampler.core import MultiHopSampler
from graphfeed.sampler.metrics import MeteredPartitionSet, SamplerMetrics
from graphfeed.sampler.servicer import SamplerServicer
from graphfeed.sampler.v1 import sampler_pb2 as pb
from graphfeed.sampler.v1 import sampler_pb2_grpc as pb_grpc

log = logging.getLogger(__name__)

SERVICE_NAME = pb.DESCRIPTOR.services_by_name["SamplerService"].full_name


def serve(settings: SamplerSettings, registry: CollectorRegistry | None = None) -> tuple[RunningServer, MultiHopSampler]:
    """Connects to the graph-stores and starts the gRPC server (and /metrics unless ``metrics_port == -1``).

    Args:
        settings: server settings and graph-store addresses.
        registry: where metrics are registered; a fresh registry if None.

    Returns:
        The running server (``.port``, ``.metrics_port`` bound) and the sampler it serves; the
        caller stops the server and then calls ``sampler.partitions.close()``.

    Raises:
        FailedPrecondition: the graph-stores do not cover each partition exactly once.
        Unavailable: a graph-store could not be reached.
    """
    registry = CollectorRegistry() if registry is None else registry
    metrics = SamplerMetrics.create(registry)
    partitions = MeteredPartitionSet(
        RemotePartitionSet(settings.graph_store_addresses, timeout_s=settings.rpc_timeout_s, shm_dir=settings.shm_dir), metrics
    )
    sampler = MultiHopSampler(
        partitions, max_seeds=settings.max_seeds_per_request, max_fanout=settings.max_fanout,
        max_ids_per_request=settings.max_ids_per_request,
    )  # fmt: skip
    servicer = SamplerServicer(sampler, metrics, ServerTransport(settings.shm_dir, "SamplerService", registry))
    running = start_service_server(
        settings,
        register=lambda server: pb_grpc.add_SamplerServiceServicer_to_server(servicer, server),
        service_names=[SERVICE_NAME],
        registry=registry,
        on_error=partitions.close,
    )
    log.info(
        "sampler serving on %s over %d partitions (%d nodes)",
        running.address, partitions.num_partitions, sampler.num_nodes,
    )
    return running, sampler


def main(settings: SamplerSettings) -> None:
    """Serves until SIGTERM/SIGINT, then drains calls for ``grace_s`` and closes the channels."""
    run_service("sampler", settings, serve, on_stop=lambda sampler: sampler.partitions.close())
