"""Runs a sampler: ``serve`` starts one (non-blocking), ``main`` runs one until SIGTERM."""

from __future__ import annotations

import logging

from prometheus_client import CollectorRegistry

from graphfeed.common.metrics import RpcMetrics, serve_metrics
from graphfeed.common.rpc import RunningServer, announce, start_server, wait_for_termination
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
        RemotePartitionSet(settings.graph_store_addresses, timeout_s=settings.rpc_timeout_s), metrics
    )
    sampler = MultiHopSampler(partitions, max_seeds=settings.max_seeds_per_request, max_fanout=settings.max_fanout)
    servicer = SamplerServicer(sampler, metrics)
    try:
        running = start_server(
            register=lambda server: pb_grpc.add_SamplerServiceServicer_to_server(servicer, server),
            service_names=[SERVICE_NAME],
            metrics=RpcMetrics.create(registry),
            host=settings.host,
            port=settings.port,
            max_workers=settings.max_workers,
        )
    except BaseException:
        partitions.close()
        raise
    if settings.metrics_port != -1:
        try:
            running.metrics_port = serve_metrics(registry, settings.metrics_host, settings.metrics_port)
        except BaseException:
            running.stop(0)
            partitions.close()
            raise
    log.info(
        "sampler serving on %s over %d partitions (%d nodes)",
        running.address, partitions.num_partitions, sampler.num_nodes,
    )
    return running, sampler


def main(settings: SamplerSettings) -> None:
    """Serves until SIGTERM/SIGINT, then drains calls for ``grace_s`` and closes the channels."""
    logging.basicConfig(level=settings.log_level, format="%(asctime)s %(levelname)s %(name)s: %(message)s")
    running, sampler = serve(settings)
    announce("sampler", running)
    wait_for_termination(running, settings.grace_s, on_stop=sampler.partitions.close)
