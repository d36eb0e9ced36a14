"""k8s/monitoring: alert rules (promtool), the Grafana dashboard (tsc against @grafana/schema),
the PodMonitor and the dashboard ConfigMap. The queries against live services are in
test_local_cluster.py."""

from __future__ import annotations

import json
import shutil
from pathlib import Path

from tests.deploy.manifests import Rendered, container_ports, containers, selector_matches, write_rules_file
from tests.deploy.promql import (
    DASHBOARD,
    EXTERNAL_METRICS,
    PENDING_METRICS,
    dashboard,
    dashboard_queries,
    exported_series,
    metric_names,
    rule_exprs,
)
from tests.deploy.tools import REPO, check, node_modules, run, tool

ALERTS = {
    "GraphfeedLoaderStreamStalled",
    "GraphfeedCacheHitRateCollapsed",
    "GraphfeedRPCErrorRate",
    "GraphfeedTrainerDataStall",
    "GraphfeedGraphStoreDown",
    "GraphfeedGraphStoreReplicasMissing",
    "GraphfeedSharedMemoryRefused",
    "GraphfeedLoaderEpochWithoutPacks",
}


def test_alert_rules_pass_promtool_check_and_their_unit_tests(tmp_path: Path) -> None:
    rules = write_rules_file(tmp_path)
    out = check([tool("promtool"), "check", "rules", str(rules)], timeout_s=60)
    assert f"SUCCESS: {len(rule_exprs())} rules found" in out
    shutil.copy(REPO / "k8s/monitoring/rules.test.yaml", tmp_path)
    check([tool("promtool"), "test", "rules", "rules.test.yaml"], timeout_s=120, cwd=tmp_path)
    assert {name for name, _ in rule_exprs()} == ALERTS
    tested = (REPO / "k8s/monitoring/rules.test.yaml").read_text()
    for alert in ALERTS:  # every alert has a unit test that expects it to fire
        assert f"alertname: {alert}\n        exp_alerts:\n          - exp_labels:" in tested, alert


def test_promtool_test_fails_when_an_alert_does_not_behave(tmp_path: Path) -> None:
    """The unit tests can fail: with the stall alert made impossible, promtool says so."""
    rules = write_rules_file(tmp_path)
    rules.write_text(rules.read_text().replace("== 0\n", "== -1\n", 1))
    shutil.copy(REPO / "k8s/monitoring/rules.test.yaml", tmp_path)
    res = run([tool("promtool"), "test", "rules", "rules.test.yaml"], timeout_s=120, cwd=tmp_path)
    assert res.returncode != 0 and "GraphfeedLoaderStreamStalled" in res.stdout + res.stderr


def test_queries_use_only_metrics_graphfeed_exports() -> None:
    """Every graphfeed_* series the dashboard and the alerts use is defined by a service's
    metrics class. (process_* come from prometheus_client's ProcessCollector when the server
    registers it: test_local_cluster.py checks those against the live /metrics.)"""
    exported = exported_series()
    for what, expr in [*dashboard_queries(), *rule_exprs()]:
        for name in {n for n in metric_names(expr) - EXTERNAL_METRICS if not n.startswith("process_")}:
            assert name in exported or name in PENDING_METRICS, (
                f"{what}: {name} is not exported by any graphfeed service"
            )
    for name in PENDING_METRICS:
        assert name not in exported, f"{name} is exported now: take it off PENDING_METRICS in tests/deploy/promql.py"


def _typecheck(json_text: str, work: Path) -> tuple[int, str]:
    work.mkdir(parents=True, exist_ok=True)
    (work / "node_modules").symlink_to(node_modules(), target_is_directory=True)
    shutil.copy(REPO / "tests/deploy/dashboard_types.ts", work)
    (work / "dashboard.ts").write_text(
        'import type { GraphfeedDashboard } from "./dashboard_types";\n'
        f"export const dashboard: GraphfeedDashboard = {json_text};\n"
    )
    config = {
        "compilerOptions": {
            "strict": True,
            "noEmit": True,
            "target": "es2022",
            "module": "esnext",
            "moduleResolution": "bundler",
            "skipLibCheck": True,
            "types": [],
        },
        "files": ["dashboard.ts"],
    }
    (work / "tsconfig.json").write_text(json.dumps(config))
    res = run([tool("tsc"), "-p", "tsconfig.json"], timeout_s=180, cwd=work)
    return res.returncode, res.stdout + res.stderr


def test_dashboard_typechecks_against_grafana_schema(tmp_path: Path) -> None:
    code, out = _typecheck(DASHBOARD.read_text(), tmp_path / "ok")
    assert code == 0, out
    # The check is strict enough to fail: an unknown key and a wrong enum value are caught.
    broken = DASHBOARD.read_text().replace('"legendFormat"', '"legendFormatt"', 1)
    broken = broken.replace('"displayMode": "list"', '"displayMode": "lists"', 1)
    code, out = _typecheck(broken, tmp_path / "broken")
    assert code != 0 and "legendFormatt" in out and '"lists"' in out, out


def test_dashboard_has_the_panels_operators_need() -> None:
    d = dashboard()
    titles = [p["title"] for p in d["panels"] if p["type"] != "row"]
    for words in (
        "Minibatches/s",
        "Sampling latency p50 / p99",
        "Remote feature bytes/s by partition",
        "Cache hit rate per tier",
        "Prefetch",
        "evictions",
        "queue depth",
        "RPC errors by code",
        "RocksDB bytes",
        "CPU per pod",
        "Memory per pod",
        "RPC rate by service and method",
        "RPC latency p50 / p99 by service and method",
        "Bytes/s per service and hop",
        "Minibatches/s per trainer",
        "Data-stall fraction per trainer",
        "Trainer step time",
        "Appended edges/s",
        "Append latency",
        "Temporal sampling roots/s",
        "Disk bytes/s",
        "rows/s by tier",
        "Embedding rows/s pulled and pushed",
        "Embedding push latency",
        "Embedding bytes/s",
        "Seed edges/s",
        "Negatives per edge minibatch",
    ):
        assert any(words.lower() in t.lower() for t in titles), words
    assert len({p["id"] for p in d["panels"]}) == len(d["panels"])
    assert [p["title"] for p in d["panels"] if p["type"] == "row"] == [
        "Overview",
        "Trainers",
        "RPC per service and method",
        "Feature cache and loader",
        "Dynamic graphs and out of core",
        "Graph-stores and pods",
        "Trainable embeddings",
        "Link prediction",
    ]
    for p in d["panels"]:
        if p["type"] == "row":
            continue
        assert p["targets"] and p["datasource"]["uid"] == "${datasource}", p["title"]
        for t in p["targets"]:
            for scope in ('namespace="$namespace"', 'job=~"$job"', 'pod=~"$pod"'):
                assert scope in t["expr"], f"{p['title']}: query not scoped by {scope}"
    assert [v["name"] for v in d["templating"]["list"]] == ["datasource", "namespace", "job", "pod"]


def test_monitoring_objects_match_the_services(rendered: dict[str, Rendered]) -> None:
    mon, cpu = rendered["monitoring"], rendered["cpu"]
    cm = mon.get("ConfigMap", "graphfeed-dashboard")
    assert cm["metadata"]["labels"]["grafana_dashboard"] == "1"
    assert json.loads(cm["data"]["graphfeed.json"]) == dashboard()
    (pm,) = mon.of_kind("PodMonitor")
    endpoints = [e["port"] for e in pm["spec"]["podMetricsEndpoints"]]
    scraped = {
        (w["metadata"]["name"], port)
        for w in cpu.workloads()
        if selector_matches(pm["spec"]["selector"], w["spec"]["template"]["metadata"]["labels"])
        for port in endpoints
        if any(port in container_ports(c) for c in containers(w))
    }
    # The trainer pod: its loader sidecar's metrics and the trainer's own.
    assert scraped == {
        ("graph-store", "metrics"),
        ("sampler", "metrics"),
        ("trainer", "metrics"),
        ("trainer", "trainer-metrics"),
    }
    # The alerts select graph-stores by this target label.
    assert "app.kubernetes.io/component" in pm["spec"]["podTargetLabels"]
    (rule,) = mon.of_kind("PrometheusRule")
    assert rule["spec"]["groups"]


def test_the_scrape_config_without_the_operator_is_valid_and_keeps_every_metrics_port(
    rendered: dict[str, Rendered], tmp_path: Path
) -> None:
    """k8s/monitoring/scrape-config.yaml passes `promtool check config`, and its port-name rule
    keeps the same (pod, port) pairs as the PodMonitor: the loader sidecar's too."""
    import re

    import yaml

    config = REPO / "k8s/monitoring/scrape-config.yaml"
    (job,) = yaml.safe_load(config.read_text())["scrape_configs"]
    # Debian's Prometheus is built without Kubernetes service discovery, so promtool checks the
    # job (its relabelling included) with the discovery swapped for a static target.
    checked = {k: v for k, v in job.items() if k != "kubernetes_sd_configs"}
    checked["static_configs"] = [{"targets": ["127.0.0.1:8080"]}]
    (tmp_path / "prometheus.yml").write_text(yaml.safe_dump({"scrape_configs": [checked]}))
    check([tool("promtool"), "check", "config", str(tmp_path / "prometheus.yml")], timeout_s=60)
    assert job["kubernetes_sd_configs"] == [{"role": "pod", "namespaces": {"names": ["graphfeed"]}}]
    (keep,) = [r for r in job["relabel_configs"] if r["source_labels"] == ["__meta_kubernetes_pod_container_port_name"]]
    kept = {
        (w["metadata"]["name"], port)
        for w in rendered["cpu"].workloads()
        for c in containers(w)
        for port in container_ports(c)
        if re.fullmatch(keep["regex"], port)
    }
    assert kept == {
        ("graph-store", "metrics"),
        ("sampler", "metrics"),
        ("trainer", "metrics"),
        ("trainer", "trainer-metrics"),
    }
    rel = {d["metadata"]["name"]: d["metadata"]["labels"].get("release") for d in rendered["monitoring"].docs}
    assert rel["graphfeed"] == "kube-prometheus-stack", "values.yaml prometheusRelease labels the operator's objects"
