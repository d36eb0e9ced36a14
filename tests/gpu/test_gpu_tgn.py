"""The TGN job on a real GPU: the edge-feature cache's rows from both tiers bit for bit, training
on the device replayed byte for byte, the cache giving the same weights as features sent up by
the host, and the GPU run's metrics beside the CPU run's.

Skipped without CUDA, CuPy and torch with CUDA. Needs the trainer's Python dependencies (the
wheels ``scripts/gpu_check.sh`` installs), not DGL.
"""

from __future__ import annotations

import dataclasses

import numpy as np
import pytest

from graphfeed.gpu_kernels._cuda import gpu_available, unavailable_reason

torch = pytest.importorskip("torch")
pytestmark = [
    pytest.mark.gpu,
    pytest.mark.skipif(not gpu_available(), reason=f"no CUDA GPU: {unavailable_reason()}"),
    pytest.mark.skipif(not torch.cuda.is_available(), reason="torch sees no CUDA GPU"),
]


def stream(n: int, nodes: int = 200, seed: int = 0):  # noqa: ANN201 - TemporalEvents (trainer imports stay lazy)
    from graphfeed.trainer.temporal.events import events_from_edges

    g = np.random.default_rng(seed)
    src, dst = g.integers(0, nodes, n), g.integers(0, nodes, n)
    return events_from_edges("stream", nodes, src, dst, np.arange(n) // 3, g.random((n, 16), np.float32))


def small(**change: object):  # noqa: ANN201 - TGNConfig
    from graphfeed.trainer.temporal.config import TGNConfig

    base = dict(batch_size=100, memory_dim=32, time_dim=32, embed_dim=32, mrr_negatives=4, lr=1e-3)
    return TGNConfig(**{**base, **change})  # type: ignore[arg-type]


def weights(trainer) -> dict:  # noqa: ANN001
    return {k: v.detach().cpu() for k, v in trainer.model.state_dict().items()}


def test_the_edge_cache_serves_exact_rows_from_both_tiers() -> None:
    from graphfeed.gpu_kernels.backend import cuda_backend
    from graphfeed.trainer.temporal.device import EdgeFeatureCache

    efeat = np.random.default_rng(1).random((200_000, 32), np.float32)
    cache = EdgeFeatureCache(efeat, 50_000, cuda_backend())
    cache.advance(150_000)
    ids = np.random.default_rng(2).integers(0, 150_000, 100_000)
    got = cache.gather(ids)
    assert got.is_cuda and torch.equal(got.cpu(), torch.from_numpy(efeat[ids]))
    assert cache.gpu_hits > 0 and cache.host_hits > 0
    cache.advance(10)  # a new epoch
    assert torch.equal(cache.gather(np.arange(10)).cpu(), torch.from_numpy(efeat[:10])) and cache.lo == 0


def test_training_on_the_gpu_replays_and_the_cache_changes_nothing() -> None:
    from graphfeed.trainer.temporal.loop import TGNTrainer
    from graphfeed.trainer.temporal.neighbors import InProcessNeighbors

    events = stream(3000)
    cfg = small(device="cuda", edge_cache_rows=500)
    runs = [TGNTrainer(events, cfg, report=lambda _: None) for _ in range(2)]
    host_feats = TGNTrainer(
        events, cfg, source=InProcessNeighbors(events.num_nodes, events.edge_feat_dim), report=lambda _: None
    )
    results = [t.run() for t in [*runs, host_feats]]
    assert runs[0].memory.mem.is_cuda and next(runs[0].model.parameters()).is_cuda
    assert runs[0].features is not None and runs[0].features.gpu_hits > 0 and runs[0].features.host_hits > 0
    assert host_feats.features is None
    ref = weights(runs[0])
    for other, result in zip([*runs[1:], host_feats], results[1:]):
        assert repr(result.epochs[0].metrics) == repr(results[0].epochs[0].metrics)
        assert all(torch.equal(v, weights(other)[k]) for k, v in ref.items())


def test_the_gpu_run_scores_as_the_cpu_run() -> None:
    """Float sums run in another order on the GPU, so the runs drift apart; their test AP stays close."""
    from graphfeed.trainer.temporal.loop import TGNTrainer

    events = stream(3000)
    gpu = TGNTrainer(events, small(device="cuda"), report=lambda _: None).run()
    cpu = TGNTrainer(events, dataclasses.replace(small(), device="cpu"), report=lambda _: None).run()
    print(f"test AP gpu {gpu.test_ap:.4f} cpu {cpu.test_ap:.4f}")
    assert abs(gpu.test_ap - cpu.test_ap) < 0.03
