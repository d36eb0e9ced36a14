"""The cpu overlay run as local processes: every container's command, args, env and ports come
from the rendered manifests (tests/deploy/k8s_local.py), so the manifests cannot drift from the
code. On that cluster: one epoch through RemoteDataLoader, the trainer Job, grpcurl over
reflection, `promtool check metrics`, and a real Prometheus that scrapes the services, loads
the alert rules and answers every dashboard query."""

from __future__ import annotations

import json
import math
import re
import subprocess
import time
import urllib.parse
import urllib.request
from collections.abc import Iterator
from dataclasses import dataclass

import pytest
import yaml

from tests.deploy.k8s_local import LocalCluster, free_port
from tests.deploy.manifests import Rendered, container_ports, selector_matches, write_rules_file
from tests.deploy.promql import EXTERNAL_METRICS, FEATURE_METRICS, PENDING_METRICS, dashboard, metric_names, rule_exprs
from tests.deploy.tools import REPO, check, run, tool

pytestmark = pytest.mark.integration

SERVERS = ("graph-store", "sampler")  # workloads; the loaders are sidecars of the trainer pods
SERVICE_NAMES = {
    "graph-store": "graphfeed.graph_store.v1.GraphStoreService",
    "sampler": "graphfeed.sampler.v1.SamplerService",
    "loader": "graphfeed.loader.v1.LoaderService",
}
RATE_INTERVAL = "4s"  # Grafana's $__rate_interval for a 1 s scrape interval


@pytest.fixture(scope="module")
def cluster(rendered: dict[str, Rendered], tmp_path_factory: pytest.TempPathFactory) -> Iterator[LocalCluster]:
    from graphfeed.common import security

    c = LocalCluster(rendered["cpu"], tmp_path_factory.mktemp("k8s-cpu"))
    try:
        c.run_job("ingest", timeout_s=240)
        for name in (*SERVERS, "trainer"):  # "trainer": the loader sidecars of its pods
            c.start(name)
        # Every server asks for the graphfeed-auth token: this process's clients send it.
        security.configure_clients(security.ClientSecurity(token=c.token))
        yield c
    finally:
        security.configure_clients(security.ClientSecurity())
        c.stop()


def _get(url: str, timeout_s: float = 10.0) -> str:
    with urllib.request.urlopen(url, timeout=timeout_s) as resp:  # noqa: S310 - loopback only
        return resp.read().decode()


@dataclass
class Prometheus:
    url: str
    proc: subprocess.Popen
    targets: list[dict]

    def api(self, path: str, **params: str) -> dict:
        body = json.loads(_get(f"{self.url}/api/v1/{path}?{urllib.parse.urlencode(params)}"))
        assert body["status"] == "success", body
        return body["data"]


def _loader(c: LocalCluster) -> str:
    """The loader sidecar of trainer pod 0."""
    return c.address("trainer", "grpc")


def _scrape_targets(c: LocalCluster, podmonitor: dict) -> list[dict]:
    """What the PodMonitor selects, as static targets labelled like the operator would."""
    spec = podmonitor["spec"]
    targets = []
    for pod in c.all_pods():
        if not selector_matches(spec["selector"], pod.labels):
            continue
        for ctr, endpoint in [
            (ctr, e)
            for ctr in [*pod.spec.get("initContainers", []), *pod.spec["containers"]]
            for e in spec["podMetricsEndpoints"]
        ]:
            ports, port_name = container_ports(ctr), endpoint["port"]
            if port_name not in ports:
                continue
            labels = {"namespace": c.namespace, "pod": pod.name, "container": ctr["name"]}
            for key in spec.get("podTargetLabels", []):
                labels[re.sub(r"[^a-zA-Z0-9_]", "_", key)] = pod.labels[key]
            targets.append(
                {
                    "job": pod.labels[spec["jobLabel"]],
                    "address": f"127.0.0.1:{pod.ports[ports[port_name]]}",
                    "labels": labels,
                }
            )
    return targets


@pytest.fixture(scope="module")
def prometheus(
    cluster: LocalCluster, rendered: dict[str, Rendered], tmp_path_factory: pytest.TempPathFactory
) -> Iterator[Prometheus]:
    work = tmp_path_factory.mktemp("prometheus")
    (podmonitor,) = rendered["monitoring"].of_kind("PodMonitor")
    targets = _scrape_targets(cluster, podmonitor)
    assert {t["job"] for t in targets} == {*SERVERS, "trainer"}
    jobs: dict[str, list[dict]] = {}
    for t in targets:
        jobs.setdefault(t["job"], []).append({"targets": [t["address"]], "labels": t["labels"]})
    write_rules_file(work)
    config = {
        "global": {"scrape_interval": "1s", "evaluation_interval": "1s"},
        "rule_files": ["graphfeed.rules.yaml"],
        "scrape_configs": [{"job_name": job, "static_configs": sc} for job, sc in jobs.items()],
    }
    (work / "prometheus.yml").write_text(yaml.safe_dump(config))
    port = free_port()
    log = open(work / "prometheus.log", "wb")  # noqa: SIM115 - closed below
    proc = subprocess.Popen(
        [
            tool("prometheus"),
            f"--config.file={work / 'prometheus.yml'}",
            f"--storage.tsdb.path={work / 'data'}",
            f"--web.listen-address=127.0.0.1:{port}",
        ],
        cwd=work,
        stdout=log,
        stderr=subprocess.STDOUT,
    )
    prom = Prometheus(f"http://127.0.0.1:{port}", proc, targets)
    try:
        deadline, up = time.monotonic() + 60, None
        while True:  # every target scraped successfully: up == 1
            assert proc.poll() is None, (work / "prometheus.log").read_text()[-3000:]
            try:  # trainers run later (the Job): their own targets come up then
                up = prom.api("query", query='up{container!="trainer"}')["result"]
                if len(up) == len([t for t in targets if t["labels"]["container"] != "trainer"]) and all(
                    r["value"][1] == "1" for r in up
                ):
                    break
            except OSError:  # not listening yet
                pass
            assert time.monotonic() < deadline, f"targets not all up after 60s: {up}"
            time.sleep(0.5)
        yield prom
    finally:
        proc.terminate()
        try:
            code = proc.wait(30)
        finally:
            log.close()
        assert code == 0, (work / "prometheus.log").read_text()[-3000:]


@dataclass
class Traffic:
    start: float
    end: float
    steps: int
    batches: list[tuple[int, int, int]]  # (input nodes, feature width, labels) per step


def _wait_for_scrape(prometheus: Prometheus, after: float, timeout_s: float = 30.0) -> None:
    """Waits until Prometheus has scraped every target after the wall-clock time ``after``."""
    deadline = time.monotonic() + timeout_s
    while True:
        result = prometheus.api("query", query="min(timestamp(up))")["result"]
        if result and float(result[0]["value"][1]) > after:
            return
        assert time.monotonic() < deadline, f"no scrape of every target after {after}"
        time.sleep(0.2)


@pytest.fixture(scope="module")
def traffic(cluster: LocalCluster, prometheus: Prometheus) -> Traffic:
    """Two epochs through RemoteDataLoader against the manifest-built loader, and bad requests.

    The first epoch creates the per-job series (cache tiers, partitions) at values that already
    include it; Prometheus scrapes them; the second epoch then shows up as rates.
    """
    import grpc

    from graphfeed.common.security import with_token
    from graphfeed.loader.v1 import loader_pb2 as pb
    from graphfeed.loader.v1 import loader_pb2_grpc as pb_grpc
    from graphfeed.trainer.dataloader import RemoteDataLoader

    loader = RemoteDataLoader(_loader(cluster), "train", fanouts=[10, 10], batch_size=256, job_id="deploy-check")
    warm_up = sum(1 for _ in loader)
    _wait_for_scrape(prometheus, after=time.time())
    start = time.time()
    batches = []
    for input_nodes, output_nodes, blocks in loader:
        feats, labels = blocks[0].srcdata["feat"], blocks[-1].dstdata["label"]
        assert len(labels) == len(output_nodes) and feats.shape[0] == len(input_nodes)
        batches.append((len(input_nodes), int(feats.shape[1]), len(labels)))
    steps = len(loader)
    assert warm_up == steps and loader.epoch == 2
    loader.close()
    # An operator mistake, twice with a scrape between (the first creates the error's series),
    # so that the dashboard's error panel has a rate to show.
    with with_token(grpc.insecure_channel(_loader(cluster)), cluster.token) as ch:
        bad = pb.JobSpec(
            job_id="deploy-check", split="no-such-split", batch_size=8, fanouts=[2], world_size=1, feature_name="feat"
        )
        for _ in range(2):
            with pytest.raises(grpc.RpcError) as err:
                pb_grpc.LoaderServiceStub(ch).DescribeJob(pb.DescribeJobRequest(job=bad), timeout=10)
            assert err.value.code() != grpc.StatusCode.OK
            _wait_for_scrape(prometheus, after=time.time())
    end = time.time()
    _wait_for_scrape(prometheus, after=end)
    return Traffic(start, end, steps, batches)


def test_every_workload_of_the_overlay_is_exercised(cluster: LocalCluster) -> None:
    assert set(cluster.pods) == {"ingest", *SERVERS, "trainer"}
    for pod in cluster.pods["trainer"]:  # every trainer pod runs its loader sidecar
        assert [p.container for p in cluster.sidecars[pod.name]] == ["loader"]


def test_ingest_job_output_is_what_each_graph_store_pod_staged(cluster: LocalCluster) -> None:
    source = cluster.root / "pvc" / "graph-source" / "graph"
    manifest = json.loads((source / "manifest.json").read_text())
    assert manifest["dataset"] == "cora" and manifest["num_partitions"] == len(cluster.pods["graph-store"])
    for pod in cluster.pods["graph-store"]:
        staged = cluster.root / "pvc" / f"partition-{pod.name}" / "current" / "manifest.json"
        assert json.loads(staged.read_text())["partition_id"] == pod.ordinal
        assert staged.read_text() == (source / f"part-{pod.ordinal:05d}" / "manifest.json").read_text()


def test_one_epoch_through_remote_dataloader(traffic: Traffic) -> None:
    assert traffic.steps == len(traffic.batches) == 7  # 1625 Cora train nodes / 256
    assert sum(b[2] for b in traffic.batches) == 1625
    assert {b[1] for b in traffic.batches} == {1433}


def test_trainer_job_trains_through_the_loader(cluster: LocalCluster, traffic: Traffic) -> None:
    procs = cluster.run_job("trainer", timeout_s=280, extra_args=["--epochs", "1"])
    assert len(procs) == 2
    for p in procs:
        assert re.search(r"test_acc 0\.\d+", p.log.read_text()), p.tail()
    ckpts = sorted(p.name for p in (cluster.root / "pvc" / "trainer-checkpoints").iterdir())
    assert ckpts == ["graphsage-rank-0.pt", "graphsage-rank-1.pt"]
    # Each trainer pod's emptyDir (medium Memory) is shared by its loader sidecar and trainer:
    # the minibatches went through it (the metric counts tensor bytes sent by reference).
    shm_sent = [
        float(line.rsplit(" ", 1)[1])
        for line in _get(f"http://{cluster.address('trainer', 'metrics')}/metrics").splitlines()
        if line.startswith("graphfeed_rpc_response_shm_bytes_total{") and 'method="StreamMinibatches"' in line
    ]
    assert sum(shm_sent) > 0, shm_sent


def test_grpcurl_lists_and_describes_every_service(cluster: LocalCluster) -> None:
    grpcurl = tool("grpcurl")
    auth = ["-H", f"authorization: Bearer {cluster.token}"]
    for name, service in SERVICE_NAMES.items():
        addr = _loader(cluster) if name == "loader" else cluster.address(name)
        anonymous = run([grpcurl, "-plaintext", addr, "list"], timeout_s=30)
        assert anonymous.returncode != 0 and "Unauthenticated" in anonymous.stderr, (name, anonymous.stderr)
        listed = check([grpcurl, "-plaintext", *auth, addr, "list"], timeout_s=30).split()
        assert {service, "grpc.health.v1.Health", "grpc.reflection.v1alpha.ServerReflection"} <= set(listed), listed
        described = check([grpcurl, "-plaintext", *auth, addr, "describe", service], timeout_s=30)
        proto = REPO / "proto" / "graphfeed" / name.replace("-", "_") / "v1"
        rpcs = re.findall(r"^\s*rpc (\w+)\(", "".join(p.read_text() for p in proto.glob("*.proto")), flags=re.M)
        assert rpcs and all(f"rpc {rpc}" in described for rpc in rpcs), described
        # grpcurl finds the method through reflection, which asks for the token (Check itself does not).
        health = check([grpcurl, "-plaintext", *auth, addr, "grpc.health.v1.Health/Check"], timeout_s=30)
        assert json.loads(health)["status"] == "SERVING"


def _running(prometheus: Prometheus) -> list[dict]:
    """Targets of processes still running: the trainers' own endpoints went with the Job (the
    dashboard test checks that Prometheus scraped them while they trained)."""
    return [t for t in prometheus.targets if t["labels"]["container"] != "trainer"]


def test_every_metrics_endpoint_passes_promtool_check_metrics(prometheus: Prometheus, traffic: Traffic) -> None:
    for t in _running(prometheus):
        text = _get(f"http://{t['address']}/metrics")
        out = check([tool("promtool"), "check", "metrics"], timeout_s=30, input_text=text)
        assert out.strip() == "", f"{t['labels']['pod']}: {out}"


def _served_series(prometheus: Prometheus) -> set[str]:
    """Series the running processes serve now, plus every series Prometheus scraped (the
    trainers' ones while they trained)."""
    names = set(prometheus.api("label/__name__/values"))
    for t in _running(prometheus):
        for line in _get(f"http://{t['address']}/metrics").splitlines():
            if line and not line.startswith("#"):
                names.add(re.split(r"[{ ]", line, maxsplit=1)[0])
    return names


def test_prometheus_answers_every_dashboard_query_with_data(
    prometheus: Prometheus, traffic: Traffic, cluster: LocalCluster
) -> None:
    served = _served_series(prometheus)
    for name in PENDING_METRICS:
        assert name not in served, f"{name} is exported now: take it off PENDING_METRICS in tests/deploy/promql.py"
    ns = cluster.namespace
    values = prometheus.api("label/namespace/values", **{"match[]": "graphfeed_rpc_requests_total"})
    assert values == [ns]  # the dashboard's $namespace variable
    for panel in dashboard()["panels"]:
        for target in panel.get("targets", []):
            expr = target["expr"].replace("$namespace", ns).replace("$__rate_interval", RATE_INTERVAL)
            expr = expr.replace("$job", ".*").replace("$pod", ".*")  # the variables' "All"
            needed = metric_names(expr) - EXTERNAL_METRICS
            assert needed - set(PENDING_METRICS) - set(FEATURE_METRICS) <= served, (
                f"{panel['title']}: {needed - served} not served"
            )
            data = prometheus.api(
                "query_range", query=expr, start=f"{traffic.start - 2:.3f}", end=f"{time.time():.3f}", step="1s"
            )  # a PromQL error would have failed the call
            finite = [v for series in data["result"] for _, v in series["values"] if math.isfinite(float(v))]
            if needed & set(PENDING_METRICS) or needed <= set(FEATURE_METRICS):
                continue  # parses (the API call succeeded); data once the metric exists / the feature runs
            assert finite, f"{panel['title']}: no data for {expr}"


def test_prometheus_loads_and_evaluates_every_alert_rule(prometheus: Prometheus, traffic: Traffic) -> None:
    deadline = time.monotonic() + 30
    while True:
        rules = [r for g in prometheus.api("rules")["groups"] for r in g["rules"]]
        if rules and all(not r["lastEvaluation"].startswith("0001") and r["health"] != "unknown" for r in rules):
            break
        assert time.monotonic() < deadline, rules
        time.sleep(0.5)
    assert {r["name"] for r in rules} == {name for name, _ in rule_exprs()}
    assert all(r["health"] == "ok" for r in rules), [(r["name"], r.get("lastError")) for r in rules]
    firing = [a for a in prometheus.api("alerts")["alerts"] if a["state"] == "firing"]
    assert firing == []  # a healthy cluster raises nothing


def test_services_stop_gracefully_on_sigterm(cluster: LocalCluster, traffic: Traffic) -> None:
    codes = cluster.stop()
    servers = {k: v for k, v in codes.items() if k.split("/")[1] in (*SERVERS, "loader")}
    assert len(servers) == 5 and all(v == 0 for v in servers.values()), codes  # 2 stores, sampler, 2 loaders


def test_gpu_embedded_overlay_trains_with_the_loader_inside_the_trainers(
    rendered: dict[str, Rendered], tmp_path_factory: pytest.TempPathFactory
) -> None:
    """The gpu-embedded overlay run the same way (``--device cpu`` appended: no GPU here): no
    loader pod; each trainer runs the loader in its own process over the graph-stores and the
    sampler its manifest names, and trains an epoch."""
    c = LocalCluster(rendered["gpu-embedded"], tmp_path_factory.mktemp("k8s-gpu-embedded"))
    try:
        assert "loader" not in c.pods
        c.run_job("ingest", timeout_s=240)
        for name in ("graph-store", "sampler"):
            c.start(name)
        procs = c.run_job("trainer", timeout_s=280, extra_args=["--epochs", "1", "--device", "cpu"])
        assert len(procs) == 2
        for p in procs:
            assert re.search(r"test_acc 0\.\d+", p.log.read_text()), p.tail()
        served = _get(f"http://{c.address('sampler', 'metrics')}/metrics")
        assert re.search(r"^graphfeed_sampler_minibatches_total \d*[1-9]", served, re.M), (
            "the trainers sampled through the sampler"
        )
    finally:
        c.stop()
