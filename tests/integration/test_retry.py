"""The clients' one retry policy against a real gRPC server: idempotent reads are retried on
UNAVAILABLE (a bounded number of times, within the deadline), nothing else is, and a server
stream is never retried once its first message arrived."""

from __future__ import annotations

import threading
from collections import Counter
from collections.abc import Iterator

import grpc
import numpy as np
import pytest
from prometheus_client import CollectorRegistry

from graphfeed.common import codec
from graphfeed.common.errors import DeadlineExceeded, GraphfeedError, InvalidArgument, Unavailable
from graphfeed.common.metrics import RpcMetrics
from graphfeed.common.rpc import RETRY_MAX_ATTEMPTS, RunningServer, client_channel, retry_service_config, start_server
from graphfeed.graph_store.client import IDEMPOTENT_METHODS, GraphStoreClient
from graphfeed.graph_store.v1 import graph_store_pb2 as pb
from graphfeed.graph_store.v1 import graph_store_pb2_grpc as pb_grpc

pytestmark = pytest.mark.integration

SERVICE = pb.DESCRIPTOR.services_by_name["GraphStoreService"]
ROWS = np.arange(12, dtype=np.float32).reshape(4, 3)


class FlakyGraphStore(pb_grpc.GraphStoreServiceServicer):
    """Answers a fixed tiny graph, but first fails each method as ``failures[method]`` says:
    a list of errors raised by the first attempts, in order. Counts every attempt."""

    def __init__(self) -> None:
        self.failures: dict[str, list[GraphfeedError]] = {}
        self.calls: Counter[str] = Counter()
        self.break_stream_after_first = False
        self._lock = threading.Lock()

    def _attempt(self, method: str) -> None:
        with self._lock:
            self.calls[method] += 1
            pending = self.failures.get(method, [])
            err = pending.pop(0) if pending else None
        if err is not None:
            raise err

    def GetPartitionInfo(  # noqa: N802 (the proto's RPC name)
        self, request: pb.GetPartitionInfoRequest, context: grpc.ServicerContext
    ) -> pb.GetPartitionInfoResponse:
        self._attempt("GetPartitionInfo")
        return pb.GetPartitionInfoResponse(
            partition_id=0, num_partitions=1, num_nodes=4, node_offsets=[0, 4], dataset="tiny"
        )

    def GetSplit(self, request: pb.GetSplitRequest, context: grpc.ServicerContext) -> pb.GetSplitResponse:  # noqa: N802 (the proto's RPC name)
        self._attempt("GetSplit")
        return pb.GetSplitResponse(ids=codec.encode(np.arange(4, dtype=np.int64)))

    def GetNodeData(  # noqa: N802 (the proto's RPC name)
        self, request: pb.GetNodeDataRequest, context: grpc.ServicerContext
    ) -> Iterator[pb.GetNodeDataResponse]:
        self._attempt("GetNodeData")
        ids = codec.decode(request.ids)
        yield pb.GetNodeDataResponse(start=0, rows=codec.encode(ROWS[ids[:1]]))
        if self.break_stream_after_first:
            raise Unavailable("stream broke after its first message")
        yield pb.GetNodeDataResponse(start=1, rows=codec.encode(ROWS[ids[1:]]))


def _serve(servicer: FlakyGraphStore) -> RunningServer:
    """A real server (with graphfeed's interceptor, which maps the errors) on 127.0.0.1:0."""
    return start_server(
        register=lambda server: pb_grpc.add_GraphStoreServiceServicer_to_server(servicer, server),
        service_names=[SERVICE.full_name],
        metrics=RpcMetrics.create(CollectorRegistry()),
    )


@pytest.fixture
def store() -> Iterator[tuple[FlakyGraphStore, GraphStoreClient]]:
    servicer = FlakyGraphStore()
    running = _serve(servicer)
    client = GraphStoreClient(running.address, timeout_s=20.0)
    try:
        yield servicer, client
    finally:
        client.close()
        running.stop(0)


def test_unary_read_is_retried_after_unavailable(store: tuple[FlakyGraphStore, GraphStoreClient]) -> None:
    servicer, client = store
    servicer.failures["GetPartitionInfo"] = [Unavailable("restarting"), Unavailable("still restarting")]
    assert client.info().num_nodes == 4
    assert servicer.calls["GetPartitionInfo"] == 3


def test_stream_is_retried_when_it_failed_before_its_first_message(
    store: tuple[FlakyGraphStore, GraphStoreClient],
) -> None:
    servicer, client = store
    servicer.failures["GetNodeData"] = [Unavailable("restarting")]
    np.testing.assert_array_equal(client.get_node_data("feat", np.array([2, 0, 3])), ROWS[[2, 0, 3]])
    assert servicer.calls["GetNodeData"] == 2


def test_stream_is_not_retried_after_its_first_message(store: tuple[FlakyGraphStore, GraphStoreClient]) -> None:
    servicer, client = store
    servicer.break_stream_after_first = True
    with pytest.raises(Unavailable, match="after its first message"):
        client.get_node_data("feat", np.array([2, 0, 3]))
    assert servicer.calls["GetNodeData"] == 1


def test_attempts_are_bounded(store: tuple[FlakyGraphStore, GraphStoreClient]) -> None:
    servicer, client = store
    servicer.failures["GetSplit"] = [Unavailable(f"down ({i})") for i in range(RETRY_MAX_ATTEMPTS + 1)]
    with pytest.raises(Unavailable, match=rf"down \({RETRY_MAX_ATTEMPTS - 1}\)"):
        client.get_split("train")
    assert servicer.calls["GetSplit"] == RETRY_MAX_ATTEMPTS


@pytest.mark.parametrize("error", [InvalidArgument("no split named 'x'"), DeadlineExceeded("graph-store too slow")])
def test_other_errors_are_not_retried(store: tuple[FlakyGraphStore, GraphStoreClient], error: GraphfeedError) -> None:
    servicer, client = store
    servicer.failures["GetSplit"] = [error]
    with pytest.raises(type(error), match=str(error)):
        client.get_split("x")
    assert servicer.calls["GetSplit"] == 1


def test_policy_names_only_methods_of_the_service() -> None:
    assert '"retryableStatusCodes": ["UNAVAILABLE"]' in retry_service_config(SERVICE, IDEMPOTENT_METHODS)
    with pytest.raises(KeyError):
        retry_service_config(SERVICE, ["GetSplits"])


def test_non_idempotent_methods_are_not_retried() -> None:
    """A method left out of ``idempotent`` (as edge appends will be) fails on the first UNAVAILABLE."""
    servicer = FlakyGraphStore()
    servicer.failures["GetSplit"] = [Unavailable("restarting")]
    running = _serve(servicer)
    try:
        with (
            client_channel(running.address, SERVICE, ["GetPartitionInfo"]) as channel,
            pytest.raises(grpc.RpcError) as info,
        ):
            pb_grpc.GraphStoreServiceStub(channel).GetSplit(pb.GetSplitRequest(name="train"), timeout=20.0)
    finally:
        running.stop(0)
    assert info.value.code() == grpc.StatusCode.UNAVAILABLE
    assert servicer.calls["GetSplit"] == 1
