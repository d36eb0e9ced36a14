"""A TGN job's device placement and its GPU edge-feature cache, with the kernels on the CPU
emulator: the cache's window and tiers traced by hand, event numbers of sampled edges, and
training through the cache giving the same weights, bit for bit, as training without it."""

from __future__ import annotations

import numpy as np
import pytest
import torch

from graphfeed.common.errors import InvalidArgument
from graphfeed.gpu_kernels.emulator import EmulatorBackend, compiler
from graphfeed.trainer.temporal.config import TGNConfig
from graphfeed.trainer.temporal.device import EdgeFeatureCache, resolve_device
from graphfeed.trainer.temporal.events import TemporalEvents, events_from_edges
from graphfeed.trainer.temporal.loop import TGNTrainer
from graphfeed.trainer.temporal.neighbors import InProcessNeighbors

needs_emulator = pytest.mark.skipif(compiler() is None, reason="no C++20 compiler for the kernel emulator")


@pytest.fixture(scope="module")
def emu() -> EmulatorBackend:
    return EmulatorBackend(block=64, max_blocks=2)


def feats(n: int, d: int = 3) -> np.ndarray:
    return (np.arange(n)[:, None] * 10 + np.arange(d)[None, :]).astype(np.float32)


@needs_emulator
def test_the_cache_keeps_the_latest_events_on_the_device(emu: EmulatorBackend) -> None:
    efeat = feats(8)
    c = EdgeFeatureCache(efeat, 3, emu)
    c.advance(2)
    assert c.slot_of.tolist() == [0, 1, -1, -1, -1, -1, -1, -1]
    c.advance(6)  # window [3, 6): events 3, 4, 5 in slots 0, 1, 2 (event % 3)
    assert c.slot_of.tolist() == [-1, -1, -1, 0, 1, 2, -1, -1] and (c.lo, c.hi) == (3, 6)
    got = c.gather(np.array([5, 0, 3, 7]))
    assert torch.equal(got, torch.from_numpy(efeat[[5, 0, 3, 7]]))  # 0 and 7 zero-copy from the host table
    assert (c.gpu_hits, c.host_hits) == (2, 2)
    c.advance(7)
    assert c.slot_of.tolist() == [-1, -1, -1, -1, 1, 2, 0, -1]
    c.advance(1)  # a new epoch starts over
    assert c.slot_of.tolist() == [0, -1, -1, -1, -1, -1, -1, -1] and (c.lo, c.hi) == (0, 1)
    c.advance(8)
    assert torch.equal(c.gather(np.arange(8)), torch.from_numpy(efeat)) and c.nbytes == 3 * 3 * 4 + 8 * 4
    with pytest.raises(InvalidArgument):
        c.advance(9)
    empty = EdgeFeatureCache(efeat, 0, emu)  # no device rows: every read is zero-copy
    empty.advance(8)
    assert torch.equal(empty.gather(np.array([7, 1])), torch.from_numpy(efeat[[7, 1]])) and empty.gpu_hits == 0


def feature_stream(n: int, nodes: int = 60, seed: int = 0) -> TemporalEvents:
    """``n`` events between ``nodes`` nodes at rising times, with random 8-wide features."""
    g = np.random.default_rng(seed)
    src, dst = g.integers(0, nodes, n), g.integers(0, nodes, n)
    return events_from_edges("stream", nodes, src, dst, np.arange(n) // 2, g.random((n, 8), np.float32))


def test_sampled_edges_know_their_event() -> None:
    source = InProcessNeighbors(6, edge_feat_dim=3)
    efeat = feats(5)
    source.append(np.array([0, 1]), np.array([1, 2]), np.array([1, 2]), efeat[:2])
    source.append(np.array([2, 3, 0]), np.array([3, 4, 2]), np.array([3, 4, 4]), efeat[2:])
    smp = source.sample(np.arange(6), np.full(6, 10), -1)
    assert len(smp.eid) == 10 and smp.efeat is not None
    assert np.array_equal(smp.efeat, efeat[source.event_of(smp.eid)])


def test_devices_are_checked() -> None:
    assert resolve_device("cpu") == torch.device("cpu")
    with pytest.raises(InvalidArgument, match="choose from"):
        TGNConfig(device="gpu")
    if not torch.cuda.is_available():
        assert resolve_device("auto") == torch.device("cpu")
        with pytest.raises(InvalidArgument, match="no CUDA GPU"):
            resolve_device("cuda")


@needs_emulator
def test_training_through_the_cache_gives_the_same_weights(emu: EmulatorBackend) -> None:
    """A stream with 8-wide edge features; a 100-event device window makes the samples read both
    tiers. Weights, memory and every metric equal those of the neighbour source's features."""
    events = feature_stream(800)
    cfg = TGNConfig(
        batch_size=50, memory_dim=16, time_dim=16, embed_dim=16, mrr_negatives=3, lr=1e-3, edge_cache_rows=100
    )
    plain = TGNTrainer(events, cfg, report=lambda _: None)
    cached = TGNTrainer(events, cfg, report=lambda _: None, backend=emu)
    assert plain.features is None and cached.features is not None and cached._local is not None
    assert cached._local._dim == 0  # the features live in the cache only
    a, b = plain.run(), cached.run()
    assert repr(a.chunks) == repr(b.chunks) and repr(a.epochs[0].metrics) == repr(b.epochs[0].metrics)
    for k, v in plain.model.state_dict().items():
        assert torch.equal(v, cached.model.state_dict()[k]), k
    assert torch.equal(plain.memory.mem, cached.memory.mem)
    assert cached.features.gpu_hits > 0 and cached.features.host_hits > 0
