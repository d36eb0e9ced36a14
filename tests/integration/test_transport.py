"""The shared-memory fast path and the inline gRPC path deliver identical minibatches.

Real service processes on loopback (the ``process_cluster`` fixture: graph-store x2, sampler,
loader over Cora). Every service offers and accepts /dev/shm by default; a trainer chooses per
RemoteDataLoader. The byte counters prove which path carried the tensors.
"""

from __future__ import annotations

import gc
import os
import time
import urllib.request
from collections.abc import Callable
from pathlib import Path
from typing import TypeVar

import dgl
import numpy as np
import pytest
import torch

from graphfeed.common import shm
from graphfeed.trainer import RemoteDataLoader

T = TypeVar("T")
SHM = shm.DEFAULT_DIR
POOL_FILES = 16  # handed-back files a server's pool keeps (ServerTransport's default)
pytestmark = pytest.mark.skipif(not os.access(SHM, os.W_OK), reason="needs a writable /dev/shm")


def _counters(cluster, prefix: str) -> dict[str, float]:  # noqa: ANN001
    out: dict[str, float] = {}
    for s in cluster.services:
        text = urllib.request.urlopen(f"http://{s.metrics_address}/metrics", timeout=10).read().decode()
        for line in text.splitlines():
            if line.startswith(prefix):
                key, value = line.rsplit(" ", 1)
                out[f"{s.name} {key}"] = float(value)
    return out


def _epoch(address: str, shm_dir: str | None, epoch: int) -> list[dict[str, np.ndarray]]:
    with RemoteDataLoader(
        address, "train", fanouts=[10, 5], batch_size=32, seed=7, job_id="transport", shm_dir=shm_dir
    ) as dl:
        dl.set_epoch(epoch)
        out = []
        for input_nodes, output_nodes, blocks in dl:
            mb = {"input_nodes": input_nodes.numpy(), "output_nodes": output_nodes.numpy()}
            for i, b in enumerate(blocks):
                src, dst = b.edges()
                mb[f"b{i}_src"], mb[f"b{i}_dst"] = src.numpy(), dst.numpy()
                mb[f"b{i}_eid"] = b.edata[dgl.EID].numpy()
                mb[f"b{i}_shape"] = np.array([b.num_src_nodes(), b.num_dst_nodes()])
            mb["feat"] = blocks[0].srcdata["feat"].numpy()
            mb["label"] = blocks[-1].dstdata["label"].numpy()
            assert isinstance(blocks[0].srcdata["feat"], torch.Tensor)
            out.append({k: v.copy() for k, v in mb.items()})
        return out


def _files_of(pids: set[int], suffix: str = "") -> list[str]:
    """Segment files of these processes in SHM: unclaimed ones (no suffix), or a pool's lent /
    handed-back ones (``shm.LENT_SUFFIX`` / ``shm.FREE_SUFFIX``)."""
    return [
        n
        for n in os.listdir(SHM)
        if n.startswith(shm.SEGMENT_PREFIX)
        and int(n.split("-")[2].split("o")[0]) in pids
        and (n.endswith(suffix) if suffix else "." not in n)
    ]


def _segments_of(pids: set[int]) -> list[str]:
    return _files_of(pids)


def _outstanding(pids: set[int]) -> set[str]:
    """Segments not claimed yet, and recycled ones a reader still maps."""
    return set(_segments_of(pids)) | set(_files_of(pids, shm.LENT_SUFFIX))


def _assert_all_claimed(pids: set[int], earlier: set[str], loader_pid: int) -> None:
    """Every segment was claimed, every recycled one handed back once the trainer let go of
    its minibatches, and the loader's pool holds no more files than it may. ``earlier``: what
    was outstanding before (e.g. the look-ahead of a stream another test left mid-epoch)."""
    gc.collect()
    deadline = time.monotonic() + 10
    while _outstanding(pids) - earlier and time.monotonic() < deadline:
        time.sleep(0.05)
    assert _outstanding(pids) - earlier == set()
    pooled = _files_of({loader_pid}, shm.FREE_SUFFIX)
    assert len(pooled) <= POOL_FILES, pooled


def test_shared_memory_and_inline_minibatches_are_identical(process_cluster) -> None:  # noqa: ANN001
    shm_bytes = "graphfeed_rpc_response_shm_bytes_total"
    pids = {s.proc.pid for s in process_cluster.services}
    earlier = _outstanding(pids)  # e.g. of a stream another test left mid-epoch
    before = _counters(process_cluster, shm_bytes)
    inline = _epoch(process_cluster.loader.address, None, 3)
    after_inline = _counters(process_cluster, shm_bytes)
    fast = _epoch(process_cluster.loader.address, str(SHM), 3)
    after_fast = _counters(process_cluster, shm_bytes)

    assert len(inline) == len(fast) > 1
    for step, (a, b) in enumerate(zip(inline, fast)):
        assert a.keys() == b.keys()
        for k in a:
            assert a[k].dtype == b[k].dtype and a[k].tobytes() == b[k].tobytes(), f"step {step}: {k} differs"

    def grew(x: dict[str, float], y: dict[str, float], needle: str) -> float:
        return sum(v - x.get(k, 0.0) for k, v in y.items() if needle in k)

    # The inline trainer got no shared memory from the loader; the loader itself still used it
    # with the sampler and graph-stores (its own clients offer /dev/shm).
    assert grew(before, after_inline, 'method="StreamMinibatches"') == 0
    assert grew(before, after_inline, 'method="GetNodeData"') > 0
    assert grew(before, after_inline, 'method="SampleBlocks"') > 0
    # The shm trainer received every minibatch tensor through shared memory: features alone
    # are input nodes x 1433 float32 per minibatch.
    feat_bytes = sum(mb["feat"].nbytes for mb in fast)
    sent = grew(after_inline, after_fast, 'method="StreamMinibatches"')
    assert sent >= feat_bytes
    # ... and the counter is what the messages carried (each array aligned to 64 bytes), not the
    # size of the recycled files they travelled in.
    arrays = [v for mb in fast for k, v in mb.items() if not k.endswith("_shape")]
    assert sent <= sum(a.nbytes for a in arrays) + shm.ALIGN * len(arrays)
    # Every segment of these two epochs was claimed by its reader (unlinked, or handed back
    # to the loader's pool).
    _assert_all_claimed(pids, earlier, process_cluster.loader.proc.pid)


def _wait_for(condition: Callable[[], T], what: str, timeout_s: float = 10.0) -> T:
    """Polls ``condition`` until it returns something truthy (returned); fails after ``timeout_s``."""
    deadline = time.monotonic() + timeout_s
    while not (value := condition()):
        assert time.monotonic() < deadline, f"timed out waiting for {what}"
        time.sleep(0.02)
    return value


def _open_streams(cluster) -> float:  # noqa: ANN001
    return sum(_counters(cluster, "graphfeed_loader_open_streams ").values())


def test_a_stream_cancelled_mid_epoch_leaves_no_segments(process_cluster) -> None:  # noqa: ANN001
    loader_pid = process_cluster.loader.proc.pid
    pids = {s.proc.pid for s in process_cluster.services}
    earlier = _outstanding(pids)
    streams = _open_streams(process_cluster)
    with RemoteDataLoader(
        process_cluster.loader.address,
        "train",
        fanouts=[10, 5],
        batch_size=16,
        seed=3,
        job_id="cancel",
        shm_dir=str(SHM),
    ) as dl:
        it = iter(dl)
        next(it)
        # The loader assembles and sends minibatches ahead in its segments; nobody claims them.
        ahead = _wait_for(lambda: set(_segments_of({loader_pid})) - earlier, "minibatches sent ahead")
        assert _open_streams(process_cluster) == streams + 1
        it.close()  # cancels the stream
    # The producer stops, and what it had sent or assembled goes at once, not after the TTL.
    _wait_for(lambda: _open_streams(process_cluster) == streams, "the loader to close the stream")
    _wait_for(lambda: not ahead & _outstanding({loader_pid}), "the unclaimed segments to be dropped")
    _assert_all_claimed(pids, earlier, loader_pid)


def test_a_directory_the_server_cannot_see_falls_back_to_inline(process_cluster, tmp_path: Path) -> None:  # noqa: ANN001
    """An offer for another directory (e.g. a trainer in another pod) is declined: same bytes, inline."""
    shm_bytes = "graphfeed_rpc_response_shm_bytes_total"
    before = _counters(process_cluster, shm_bytes)
    other = _epoch(process_cluster.loader.address, str(tmp_path), 4)
    after = _counters(process_cluster, shm_bytes)
    reference = _epoch(process_cluster.loader.address, None, 4)
    loader_shm = sum(v - before.get(k, 0.0) for k, v in after.items() if 'method="StreamMinibatches"' in k)
    assert loader_shm == 0
    assert [m["feat"].tobytes() for m in other] == [m["feat"].tobytes() for m in reference]
    assert not [n for n in os.listdir(tmp_path) if n.startswith(shm.SEGMENT_PREFIX)]
