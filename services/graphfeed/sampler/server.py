"""Runs a sampler: ``serve`` starts one (non-blocking), ``main`` runs one until SIGTERM."""

from __future__ import annotations

import logging
from dataclasses import dataclass
from typing import Any, cast

from prometheus_client import CollectorRegistry

from graphfeed.common.readiness import GatedServicer, PeerGate
from graphfeed.common.rpc import RunningServer
from graphfeed.common.service import run_service, server_transport, start_service_server
from graphfeed.graph_store.partitions import RemotePartitionSet
from graphfeed.graph_store.peers import connect_partitions, graph_changed
from graphfeed.sampler.config import SamplerSettings
from graphfeed.sampler.core import MultiHopSampler
from graphfeed.sampler.metrics import MeteredPartitionSet, SamplerMetrics
from graphfeed.sampler.servicer import SamplerServicer
from graphfeed.sampler.v1 import sampler_pb2 as pb
from graphfeed.sampler.v1 import sampler_pb2_grpc as pb_grpc

log = logging.getLogger(__name__)

SERVICE_NAME = pb.DESCRIPTOR.services_by_name["SamplerService"].full_name


@dataclass
class _Connected:
    """What the sampler serves with once its graph-stores answer."""

    sampler: MultiHopSampler
    remote: RemotePartitionSet

    def close(self) -> None:
        self.sampler.partitions.close()


def start(
    settings: SamplerSettings, registry: CollectorRegistry | None = None
) -> tuple[RunningServer, PeerGate[_Connected]]:
    """Starts the gRPC server (and /metrics unless ``metrics_port == -1``, health unless
    ``health_port == -1``) at once, NOT_SERVING; connects to the graph-stores in the background
    (SERVING once every one answers GetPartitionInfo) and reconnects when their graph version changes.

    Returns:
        The running server (ports bound) and the gate holding the connected sampler; stopping
        the server closes the gate and the graph-store channels.
    """
    registry = CollectorRegistry() if registry is None else registry
    metrics = SamplerMetrics.create(registry)
    transport = server_transport(settings, "SamplerService", registry)

    def connect() -> _Connected:
        remote = connect_partitions(
            settings.graph_store_addresses, timeout_s=settings.rpc_timeout_s, shm_dir=settings.shm_dir
        )
        sampler = MultiHopSampler(
            MeteredPartitionSet(remote, metrics),
            max_seeds=settings.max_seeds_per_request,
            max_fanout=settings.max_fanout,
            max_ids_per_request=settings.max_ids_per_request,
        )
        log.info(
            "sampler connected to %d partitions (%d nodes, graph version %s)",
            remote.num_partitions,
            sampler.num_nodes,
            remote.info.graph_version or "(none)",
        )
        return _Connected(sampler, remote)

    running: RunningServer | None = None
    gate = PeerGate(
        "sampler",
        connect,
        on_serving=lambda ok: running.set_serving(ok) if running else None,
        check=lambda c: graph_changed(c.remote),
        release=_Connected.close,
        check_interval_s=settings.peer_check_interval_s,
        max_backoff_s=settings.peer_backoff_max_s,
    )
    servicer = GatedServicer(gate, lambda c: SamplerServicer(c.sampler, metrics, transport))
    running = start_service_server(
        settings,
        transport=transport,
        register=lambda server: pb_grpc.add_SamplerServiceServicer_to_server(cast(Any, servicer), server),
        service_names=[SERVICE_NAME],
        registry=registry,
        serving=False,
    )
    running.on_stop.append(gate.close)
    gate.start()
    log.info(
        "sampler listening on %s, waiting for %d graph-store address(es)",
        running.address,
        len(settings.graph_store_addresses),
    )
    return running, gate


def serve(
    settings: SamplerSettings, registry: CollectorRegistry | None = None
) -> tuple[RunningServer, MultiHopSampler]:
    """:func:`start`, then waits up to ``rpc_timeout_s`` for the graph-stores (in-process use).

    Returns:
        The running server and the sampler it serves; stopping the server releases the sampler.

    Raises:
        Unavailable: the graph-stores did not all answer in time (the server is stopped).
    """
    running, gate = start(settings, registry)
    try:
        return running, gate.wait(settings.rpc_timeout_s).sampler
    except BaseException:
        running.stop(0)
        raise


def main(settings: SamplerSettings) -> None:
    """Serves until SIGTERM/SIGINT, then drains calls for ``grace_s`` and closes the channels."""
    run_service("sampler", settings, start, on_stop=lambda gate: gate.close())
