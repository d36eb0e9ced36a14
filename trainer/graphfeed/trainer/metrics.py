"""Trainer metrics (``/metrics`` of ``graphfeed train``), labelled with the job and the rank.

Minibatches/s per trainer is ``rate(graphfeed_trainer_minibatches_total[1m])``; the data-stall
fraction is ``rate(graphfeed_trainer_data_wait_seconds_total[1m])`` (seconds waited per second).
"""

from __future__ import annotations

from dataclasses import dataclass

from prometheus_client import CollectorRegistry, Counter, Histogram

from graphfeed.common.metrics import serve_metrics

# A training step spans sub-millisecond toy models to multi-second large ones.
STEP_BUCKETS = (0.001, 0.0025, 0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1, 2.5, 5, 10, 30)


@dataclass
class TrainerMetrics:
    """What one trainer process exports; each metric bound to its ``job`` and ``rank`` labels."""

    registry: CollectorRegistry
    minibatches: Counter
    data_wait_seconds: Counter
    step_seconds: Histogram

    @classmethod
    def create(cls, job: str, rank: int, registry: CollectorRegistry | None = None) -> TrainerMetrics:
        """Metrics of trainer ``rank`` of ``job`` in ``registry`` (a fresh one if None)."""
        registry = CollectorRegistry() if registry is None else registry
        labels = ("job", "rank")
        minibatches = Counter(
            "graphfeed_trainer_minibatches", "Minibatches trained on (optimizer steps).", labels, registry=registry
        )
        wait = Counter(
            "graphfeed_trainer_data_wait_seconds",
            "Time the training loop waited for its next minibatch (data stall), in seconds.",
            labels,
            registry=registry,
        )
        step = Histogram(
            "graphfeed_trainer_step_seconds",
            "Time of one training step (forward, backward, optimizer), in seconds.",
            labels,
            buckets=STEP_BUCKETS,
            registry=registry,
        )
        values = (job, str(rank))
        return cls(registry, minibatches.labels(*values), wait.labels(*values), step.labels(*values))

    def record(self, wait_s: float, step_s: float) -> None:
        """One trained minibatch: ``wait_s`` waiting for it, ``step_s`` training on it."""
        self.minibatches.inc()
        self.data_wait_seconds.inc(wait_s)
        self.step_seconds.observe(step_s)

    def serve(self, host: str, port: int) -> int:
        """Serves ``/metrics`` (and the process's CPU and memory) at ``host:port``; returns the bound port."""
        return serve_metrics(self.registry, host, port)
