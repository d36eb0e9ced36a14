"""What a sampler or loader asks the graph-stores before it serves, and to notice a re-ingest.

:func:`connect_partitions` fails fast with :class:`~graphfeed.common.readiness.PeerNotReady`
naming the first graph-store that does not answer (a :class:`~graphfeed.common.readiness.PeerGate`
retries it); :func:`graph_changed` says when a graph-store now serves another graph version
than the one a service connected to.
"""

from __future__ import annotations

from collections.abc import Sequence

import grpc

from graphfeed.common import security
from graphfeed.common.readiness import PeerNotReady
from graphfeed.graph_store.client import info_from_proto
from graphfeed.graph_store.partitions import PARTITION_PLACEHOLDER, RemotePartitionSet
from graphfeed.graph_store.types import PartitionInfo
from graphfeed.graph_store.v1 import graph_store_pb2 as pb
from graphfeed.graph_store.v1 import graph_store_pb2_grpc as pb_grpc


def partition_info(address: str, timeout_s: float) -> PartitionInfo:
    """GetPartitionInfo of the graph-store at ``address``; raises :class:`PeerNotReady` naming
    it at once when it refuses the connection, or after ``timeout_s`` when it does not answer."""
    with security.channel(address) as channel:
        try:
            resp = pb_grpc.GraphStoreServiceStub(channel).GetPartitionInfo(
                pb.GetPartitionInfoRequest(), timeout=timeout_s
            )
        except grpc.RpcError as err:
            detail = f"{err.code().name} {err.details()}" if isinstance(err, grpc.Call) else str(err)
            raise PeerNotReady(f"graph-store {address}", detail) from None
    return info_from_proto(resp)


def graph_store_addresses(addresses: Sequence[str], probe_timeout_s: float) -> list[str]:
    """``addresses``, a template expanded (see :func:`graphfeed.graph_store.client.expand_addresses`)."""
    if len(addresses) != 1 or PARTITION_PLACEHOLDER not in addresses[0]:
        return list(addresses)
    n = partition_info(addresses[0].replace(PARTITION_PLACEHOLDER, "0"), probe_timeout_s).num_partitions
    return [addresses[0].replace(PARTITION_PLACEHOLDER, str(p)) for p in range(n)]


def connect_partitions(
    addresses: Sequence[str], *, timeout_s: float, shm_dir: str | None, probe_timeout_s: float = 5.0
) -> RemotePartitionSet:
    """The partition set over ``addresses`` (or a template) once every graph-store answers
    GetPartitionInfo with the same graph version.

    Raises:
        PeerNotReady: a graph-store did not answer, or they serve different graph versions
            (a re-ingest rolling out).
        FailedPrecondition: they do not cover each partition exactly once.
    """
    expanded = graph_store_addresses(addresses, probe_timeout_s)
    versions = {a: partition_info(a, probe_timeout_s).graph_version for a in expanded}
    if len(set(versions.values())) > 1:
        raise PeerNotReady("graph-stores serving one graph version", f"they serve {versions}")
    return RemotePartitionSet(expanded, timeout_s=timeout_s, shm_dir=shm_dir)


def graph_changed(partitions: RemotePartitionSet, probe_timeout_s: float = 5.0) -> str | None:
    """Why ``partitions`` no longer matches its graph-stores (one serves another graph version
    or partition count), or None.

    Raises:
        PeerNotReady: a graph-store did not answer (it may be restarting).
    """
    want = partitions.info
    for client in partitions.clients:
        got = partition_info(client.address, probe_timeout_s)
        if got.graph_version != want.graph_version or got.num_partitions != want.num_partitions:
            return (
                f"graph-store {client.address} now serves graph version {got.graph_version or '(none)'} with "
                f"{got.num_partitions} partitions (was {want.graph_version or '(none)'} with {want.num_partitions})"
            )
    return None
