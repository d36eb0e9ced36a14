"""Clients that open minibatch streams, read one message and stop (issue 28, item 1): each
used to hold a loader stream (a thread, buffered minibatches, a slot) for as long as its
connection stayed open, and enough of them refused every trainer. Now a stream whose client
takes nothing for ``stream_stall_timeout_s`` is ended, opening more connections does not
pass the per-client limit (anonymous clients count per host), and a trainer refused for
capacity waits and retries: its epoch is exact. The process's memory grows by no more than
what the streams it admits may hold by construction (``graphfeed.bench.stalled``): a bound
from the loader's settings and the graph's size, times the admitted streams, not the clients.
``graphfeed bench stalled`` runs the same with real processes and measures the loader alone."""

from __future__ import annotations

import hashlib
import math
import os
import time
from pathlib import Path

import grpc
import pytest

from graphfeed.bench.harness import split_gids
from graphfeed.bench.stalled import KIB, RssWatch, loader_defaults, minibatch_bound_bytes, stream_bound_bytes
from graphfeed.loader.v1 import loader_pb2 as pb
from graphfeed.loader.v1 import loader_pb2_grpc as pb_grpc
from graphfeed.trainer.dataloader import RemoteDataLoader
from graphfeed.trainer.job import job_spec, job_to_proto
from tests.integration.inprocess import InProcessCluster

pytestmark = pytest.mark.integration

STALLED = 100
PER_CLIENT = 3
STALL_S = 3.0
# What each stalled client asks for: its split's epoch (Cora's 1000 test nodes, 16 minibatches of
# whole 2-hop neighbourhoods) is far more than a connection's receive buffers take, so the
# loader has to end the stream. With the 3-minibatch train split gRPC's grown window took the
# whole epoch on a fast machine and every stalled stream simply finished.
STALLED_SPLIT = "test"
SLACK = 128 << 20  # threads, channels and allocator slack of the process, beyond what streams hold


def _memory_bound(root: Path, stalled: int) -> int:
    """Growth this process may show while ``stalled`` streams and the trainer's are open:
    loader, graph-stores, sampler and clients all live here. Per stream: what the loader holds
    (:func:`stream_bound_bytes`), the graph-stores' reply to its gather with its serialized copy
    (2 minibatches) and, on the client side, at most its whole epoch (a stalled connection's
    receive buffers can take a whole epoch: some stalled streams end OK)."""
    feat, blocks = minibatch_bound_bytes(root, 2)
    max_inflight, lookahead, _ = loader_defaults()
    epoch = max(math.ceil(len(split_gids(root, s)) / 64) for s in ("train", STALLED_SPLIT))
    per_stream = stream_bound_bytes(feat, blocks, max_inflight, lookahead) + (2 + epoch) * (feat + blocks)
    return (stalled + 1) * per_stream + SLACK


def _epoch(address: str) -> list[str]:
    """A trainer's epoch, counted against this host like the stalled clients (no shared-memory
    offer: an offer would make it a client of its own, never refused for their slots)."""
    with RemoteDataLoader(
        address, "train", fanouts=[5, 5], batch_size=64, seed=3, job_id="legit", shm_dir=None
    ) as loader:
        return [hashlib.sha256(b[2][0].srcdata["feat"].numpy().tobytes()).hexdigest() for b in loader]


def _end(call: grpc.Call) -> grpc.StatusCode:
    """How a stream ended, once what it buffered is read."""
    try:
        for _ in call:
            pass
    except grpc.RpcError as e:
        return e.code()
    return call.code()


def test_stalled_readers_are_ended_and_a_trainer_still_gets_its_epoch(cora_root: Path) -> None:
    cluster = InProcessCluster.start(
        cora_root, max_streams_per_client=PER_CLIENT, stream_stall_timeout_s=STALL_S, max_workers=12
    )
    address = cluster.loader.address
    channels, calls = [], []
    try:
        alone = _epoch(address)
        watch = RssWatch(os.getpid())
        for i in range(STALLED):  # one connection each: a new connection is not a new client
            ch = grpc.insecure_channel(address, options=[("grpc.use_local_subchannel_pool", 1)])
            # large minibatches (the whole graph's features each): no epoch fits in the connection's buffers
            job = job_to_proto(job_spec(STALLED_SPLIT, fanouts=[-1, -1], batch_size=64, seed=i, job_id=f"stall{i}"))
            call = pb_grpc.LoaderServiceStub(ch).StreamMinibatches(pb.StreamMinibatchesRequest(job=job))
            channels.append(ch)
            calls.append(call)
        admitted, first_read = [], 0.0
        for call in calls:  # each reads one message (or is refused at once) and then stops reading
            try:
                next(call)
                admitted.append(call)
                first_read = first_read or time.monotonic()
            except grpc.RpcError as e:
                assert e.code() == grpc.StatusCode.RESOURCE_EXHAUSTED, e
                assert "minibatch streams open" in (e.details() or "")
        assert len(admitted) == PER_CLIENT  # 20 connections from one host count as one client
        assert _epoch(address) == alone  # refused while the stalled streams hold the host's slots, then exact
        # It did wait for one to be ended: none can be before STALL_S after its client last read.
        assert time.monotonic() - first_read >= STALL_S
        ends = [_end(call) for call in admitted]
        # Each stalled stream was ended by the loader, unless its whole epoch fitted in the
        # client's own receive buffers (gRPC grows a fast connection's window): then it finished.
        assert set(ends) <= {grpc.StatusCode.CANCELLED, grpc.StatusCode.OK}
        assert grpc.StatusCode.CANCELLED in ends, ends
        growth = (watch.stop() - watch.start_kib) * KIB  # the stalled streams' and the trainer's
        bound = _memory_bound(cora_root, len(admitted))
        assert growth <= bound, f"grew {growth / 2**20:.0f} MiB, bound {bound / 2**20:.0f} MiB"
    finally:
        for call in calls:
            call.cancel()
        for ch in channels:
            ch.close()
        cluster.stop()
