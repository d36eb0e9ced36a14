"""The PromQL of the dashboard and the alert rules, and the metric names it refers to."""

from __future__ import annotations

import json
import re

import yaml
from prometheus_client import CollectorRegistry

from tests.deploy.tools import REPO

DASHBOARD = REPO / "k8s/monitoring/dashboards/graphfeed.json"
PROMETHEUS_RULE = REPO / "k8s/monitoring/prometheusrule.yaml"

# Metrics the dashboard or the alerts use that the services do not export yet, each with the
# change that adds it (the per-pod CPU/memory panels and GraphfeedLoaderStreamStalled need
# them). The tests check these are still missing, so that whoever adds one must take it off
# this list, and from then on the tests require data for it.
PENDING_METRICS: dict[str, str] = {}
# Series (histogram quantiles, per-partition gauges) that need a feature the local cluster emulation
# (a static Cora graph) does not exercise: their panels must parse and their series exist, but may
# have no data there.
# test_temporal_server.py and test_graph_store_budget.py check the values behind them.
FEATURE_METRICS: dict[str, str] = {
    "graphfeed_graph_store_append_latency_seconds_bucket": "edge appends (--append-dir)",
    "graphfeed_graph_store_append_visible_seconds_bucket": "edge appends (--append-dir)",
    "graphfeed_graph_store_temporal_edges": "a temporal graph (edge timestamps or --append-dir)",
    **dict.fromkeys(
        (
            "graphfeed_graph_store_embedding_rows_total",
            "graphfeed_graph_store_embedding_bytes_total",
            "graphfeed_graph_store_embedding_pushes_total",
            "graphfeed_graph_store_embedding_push_latency_seconds_bucket",
        ),
        "trainable embeddings (graphfeed train --embeddings server)",
    ),
    **dict.fromkeys(
        (
            "graphfeed_loader_seed_edges_total",
            "graphfeed_loader_negative_pairs_total",
            "graphfeed_loader_excluded_edges_total",
        ),
        "edge minibatches (link prediction: seed_edges jobs)",
    ),
}
# Series that come from Prometheus itself or from kube-state-metrics, not from graphfeed.
EXTERNAL_METRICS = {"up", "kube_statefulset_replicas", "kube_statefulset_status_replicas_ready"}

_NAME = re.compile(r"\b((?:graphfeed|process|kube)_[a-z0-9_]+|up)\b(?!\s*\()")


def metric_names(expr: str) -> set[str]:
    """Series names referenced by a PromQL expression (graphfeed_*, process_*, kube_*, up)."""
    return set(_NAME.findall(expr))


def dashboard() -> dict:
    return json.loads(DASHBOARD.read_text())


def dashboard_queries() -> list[tuple[str, str]]:
    """(panel title, expr) of every panel target."""
    return [(p["title"], t["expr"]) for p in dashboard()["panels"] for t in p.get("targets", [])]


def rule_exprs() -> list[tuple[str, str]]:
    """(alert or record name, expr) of every rule in the PrometheusRule."""
    spec = yaml.safe_load(PROMETHEUS_RULE.read_text())["spec"]
    return [(r.get("alert") or r["record"], r["expr"]) for g in spec["groups"] for r in g["rules"]]


def exported_series() -> set[str]:
    """Series names graphfeed's metric classes export (RPC, the shared-memory transport,
    graph-store with its temporal graph and embedding tables, sampler, loader, trainer)."""
    from graphfeed.common.metrics import RpcMetrics
    from graphfeed.common.transport import ServerTransport
    from graphfeed.graph_store.metrics import EmbeddingMetrics, GraphStoreMetrics, RowTierCollector, TemporalMetrics
    from graphfeed.graph_store.rowstore import RowStats
    from graphfeed.loader.metrics import LoaderMetrics
    from graphfeed.sampler.metrics import SamplerMetrics
    from graphfeed.trainer.metrics import TrainerMetrics

    registry = CollectorRegistry()
    for cls in (RpcMetrics, GraphStoreMetrics, TemporalMetrics, EmbeddingMetrics, SamplerMetrics, LoaderMetrics):
        cls.create(registry)
    TrainerMetrics.create("job", 0, registry)
    ServerTransport(None, "metrics", registry)
    registry.register(RowTierCollector(lambda: RowStats(0, 0, 0, 0)))
    suffixes = {
        "counter": ("_total",),
        "histogram": ("_bucket", "_sum", "_count"),
        "gauge": ("",),
        "summary": ("_sum", "_count", ""),
    }
    return {fam.name + s for fam in registry.collect() for s in suffixes.get(fam.type, ("",))}
