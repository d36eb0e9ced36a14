"""k8s/: rendered with kubectl kustomize, validated by kubernetes-validate and checkov, and
checked for the properties the deployment relies on (each stated in the manifests' comments)."""

from __future__ import annotations

import argparse
import json
import re
from pathlib import Path
from typing import TypeVar

import pytest
import yaml

from graphfeed.cli import SERVICES, build_parser
from tests.deploy.manifests import (
    OPERATOR_KINDS,
    Rendered,
    args_flag,
    container_ports,
    containers,
    network_allows,
    pod_spec,
    selector_matches,
    service_selects,
    static_env,
)
from tests.deploy.tools import REPO, run, tool

OVERLAYS = ("cpu", "gpu", "gpu-embedded", "gpu-pytorchjob", "gpu-packed")
EMBEDDED = "gpu-embedded"  # the loader runs inside the trainers: no loader sidecar
PYTORCHJOB = "gpu-pytorchjob"  # the gpu overlay's trainer pod under Kubeflow's training operator
INDEXED = ("cpu", "gpu", "gpu-embedded", "gpu-packed")  # trainers as an Indexed Job
PACKED = "gpu-packed"  # gpu + the pack Job (DiskGNN's offline sampling)
# kubernetes-validate 1.37.0 ships schemas up to Kubernetes 1.37.
KUBERNETES_VERSIONS = ("1.29.0", "1.37.0")
GPU = "nvidia.com/gpu"


def _write(rendered: dict[str, Rendered], out: Path) -> list[Path]:
    paths = []
    for name, r in rendered.items():
        (path := out / f"{name}.yaml").write_text(r.text)
        paths.append(path)
    return paths


T = TypeVar("T")


def _given(value: T | None, what: str) -> T:
    """``value``, which the manifest must set (a test failure names ``what`` otherwise)."""
    assert value is not None, f"{what} is not set"
    return value


def _graphfeed_args(container: dict) -> list[str] | None:
    """Arguments to the graphfeed entrypoint, or None for another command (the init script)."""
    return None if container.get("command") else list(container.get("args", []))


def test_every_object_is_namespaced_and_labelled(rendered: dict[str, Rendered]) -> None:
    for name, r in rendered.items():
        assert r.namespace == "graphfeed", name
        for d in r.docs:
            labels = d["metadata"].get("labels", {})
            assert labels.get("app.kubernetes.io/part-of") == "graphfeed", (
                f"{name}: {d['kind']}/{d['metadata']['name']}"
            )
            if d["kind"] != "Namespace":
                assert labels.get("app.kubernetes.io/name") == "graphfeed", (
                    f"{name}: {d['kind']}/{d['metadata']['name']}"
                )
        for w in r.workloads():
            tmpl = w["spec"]["template"]["metadata"]["labels"]
            assert {"app.kubernetes.io/name", "app.kubernetes.io/component", "app.kubernetes.io/part-of"} <= set(tmpl)


@pytest.mark.parametrize("version", KUBERNETES_VERSIONS)
def test_kubernetes_validate_strict(rendered: dict[str, Rendered], tmp_path: Path, version: str) -> None:
    files = _write(rendered, tmp_path)
    res = run([tool("kubernetes-validate"), "--strict", "-k", version, *map(str, files)], timeout_s=300)
    out = res.stdout + res.stderr
    assert res.returncode == 0 and "ERROR" not in out, out
    passed = re.findall(r"passed for resource (\S+)/", out)
    unvalidated = re.findall(r"Couldn't find schema for kind (\S+)", out)
    expected = sum(1 for r in rendered.values() for d in r.docs if d["kind"] not in OPERATOR_KINDS)
    assert len(passed) == expected, out
    # Only the Prometheus Operator's custom resources lack a schema (promtool checks the rules).
    assert set(unvalidated) <= set(OPERATOR_KINDS) and unvalidated, out


def test_checkov_has_no_failures_beyond_the_documented_skips(rendered: dict[str, Rendered], tmp_path: Path) -> None:
    config_text = (REPO / "k8s/checkov.yaml").read_text()
    skips = set(yaml.safe_load(config_text)["skip-check"])
    for check_id in skips:  # each skip carries its reason in a comment just above it
        assert re.search(rf"#[^\n]*\n\s*- {check_id}\b", config_text), f"{check_id} is skipped without a reason"
    _write(rendered, tmp_path)
    res = run(
        [tool("checkov"), "--framework", "kubernetes", "-d", str(tmp_path), "--skip-download", "--quiet", "-o", "json"],
        timeout_s=300,
    )
    results = json.loads(res.stdout)
    results = results if isinstance(results, list) else [results]
    failed = {(c["check_id"], c["resource"]) for r in results for c in r["results"]["failed_checks"]}
    assert sum(r["summary"]["passed"] for r in results) > 100, res.stdout[-2000:]
    assert {cid for cid, _ in failed} <= skips, f"checkov failures: {sorted(c for c in failed if c[0] not in skips)}"
    stale = skips - {cid for cid, _ in failed}
    assert not stale, f"k8s/checkov.yaml skips checks that now pass: {sorted(stale)}"


@pytest.mark.parametrize("overlay", OVERLAYS)
def test_pods_meet_the_restricted_security_profile(rendered: dict[str, Rendered], overlay: str) -> None:
    """The project's own conventions on top of Pod Security "restricted" (test_pod_security.py
    checks the standard's full rule list): our service account, user and resources."""
    for w in rendered[overlay].workloads():
        spec, where = pod_spec(w), f"{overlay}: {w['kind']}/{w['metadata']['name']}"
        assert spec["serviceAccountName"] == "graphfeed" and spec["automountServiceAccountToken"] is False, where
        psc = spec["securityContext"]
        assert psc["runAsNonRoot"] is True and psc["runAsUser"] >= 10000, where
        assert psc["seccompProfile"]["type"] == "RuntimeDefault", where
        for c in containers(w):
            sc = c["securityContext"]
            assert sc["readOnlyRootFilesystem"] is True and sc["allowPrivilegeEscalation"] is False, (
                f"{where} {c['name']}"
            )
            assert sc["capabilities"]["drop"] == ["ALL"] and not sc.get("privileged"), f"{where} {c['name']}"
            for kind in ("requests", "limits"):
                assert {"cpu", "memory"} <= set(c["resources"][kind]), f"{where} {c['name']} {kind}"
    sa = rendered[overlay].get("ServiceAccount", "graphfeed")
    assert sa["automountServiceAccountToken"] is False


def _servers(r: Rendered) -> list[tuple[dict, dict]]:
    """(workload, container) of every `graphfeed serve` container, sidecars included."""
    return [(w, c) for w in r.workloads() for c in containers(w) if (_graphfeed_args(c) or [""])[0] == "serve"]


@pytest.mark.parametrize("overlay", OVERLAYS)
def test_servers_probe_a_separate_health_port_and_outlast_grace_s(rendered: dict[str, Rendered], overlay: str) -> None:
    r = rendered[overlay]
    servers = set()
    for w, c in _servers(r):
        ports, name = container_ports(c), c["name"]
        servers.add(name)
        # Health has its own port and thread pool: a loader busy with streams still answers.
        for probe in ("startupProbe", "readinessProbe"):
            assert c[probe]["grpc"]["port"] == ports["health"], f"{name} {probe}"
        # Liveness asks the health service's "graphfeed.liveness" entry: SERVING while the process
        # runs, whatever its peers do (a graph-store being away is readiness' business).
        assert c["livenessProbe"]["grpc"] == {"port": ports["health"], "service": "graphfeed.liveness"}, name
        assert c["startupProbe"]["periodSeconds"] * c["startupProbe"]["failureThreshold"] >= 300, (
            f"{name}: cold starts take minutes"
        )
        env = static_env(r, c)
        (grace_key,) = [k for k in env if k.endswith("_GRACE_S")]
        grace_s = float(_given(env[grace_key], grace_key))
        period = pod_spec(w)["terminationGracePeriodSeconds"]
        # In-flight calls get grace_s; closing stores and channels needs a little more.
        assert grace_s + 5 <= period <= grace_s + 30, (
            f"{name}: grace_s {grace_s}, terminationGracePeriodSeconds {period}"
        )
        for field, port in (("PORT", "grpc"), ("METRICS_PORT", "metrics"), ("HEALTH_PORT", "health")):
            assert env[grace_key.replace("GRACE_S", field)] == str(ports[port]), f"{name} {field}"
        if c in pod_spec(w)["containers"]:  # the trainer pod's annotation names the trainer's port
            ann = w["spec"]["template"]["metadata"]["annotations"]
            assert ann["prometheus.io/scrape"] == "true" and int(ann["prometheus.io/port"]) == ports["metrics"]
    assert servers == ({"graph-store", "sampler"} if overlay == EMBEDDED else {"graph-store", "sampler", "loader"})


RUNTIME_ENV = {"OMP_NUM_THREADS"}  # read by OpenMP (torch, BLAS), not by graphfeed's settings


@pytest.mark.parametrize("overlay", OVERLAYS)
def test_container_args_parse_with_the_graphfeed_cli(rendered: dict[str, Rendered], overlay: str) -> None:
    """Every graphfeed container's arguments parse, and every ConfigMap key is a setting."""
    r = rendered[overlay]
    parser = build_parser()
    seen = set()
    for w in r.workloads():
        for c in containers(w):
            args = _graphfeed_args(c)
            if args is None:
                continue
            args = [re.sub(r"\$\([A-Z_]+\)", "0", a) for a in args]  # downward-API values
            ns: argparse.Namespace = parser.parse_args(args)
            seen.add(ns.command if ns.command != "serve" else f"serve {ns.service}")
            if ns.command != "serve":
                continue
            settings_cls = SERVICES[ns.service][0]
            module, _, name = settings_cls.partition(":")
            cls = getattr(__import__(module, fromlist=[name]), name)
            prefix = cls.model_config["env_prefix"]
            for key in static_env(r, c).keys() - RUNTIME_ENV:
                assert key.startswith(prefix) and key[len(prefix) :].lower() in cls.model_fields, (
                    f"{c['name']}: {key} is not a setting of {name} (it would be silently ignored)"
                )
    services = {"ingest", "serve graph-store", "serve sampler", "train"}
    assert seen == (services if overlay == EMBEDDED else services | {"serve loader"})


def _values() -> dict:
    return yaml.safe_load((REPO / "k8s/values/values.yaml").read_text())["spec"]


@pytest.mark.parametrize("overlay", OVERLAYS)
def test_the_partition_count_is_set_in_values_yaml_only(rendered: dict[str, Rendered], overlay: str) -> None:
    r, values = rendered[overlay], _values()
    assert r.find("Values", "values") is None, "values.yaml is local-config: it must not reach the API server"
    sts = r.get("StatefulSet", "graph-store")
    assert sts["spec"]["replicas"] == values["partitions"]
    (ingest,) = containers(r.workload("ingest"))
    assert int(_given(args_flag(ingest["args"], "--num-partitions"), "--num-partitions")) == values["partitions"]
    port = container_ports(pod_spec(sts)["containers"][0])["grpc"]
    # Everyone else learns the count from graph-store 0 and expands the template.
    template = f"graph-store-{{p}}.{sts['spec']['serviceName']}:{port}"
    for _, c in _servers(r):
        env = static_env(r, c)
        keys = [k for k in env if k.endswith("_GRAPH_STORE_ADDRESSES")]
        for key in keys:
            assert json.loads(_given(env[key], key)) == [template], f"{c['name']}: {key}"
    svc = r.get("Service", "sampler")
    sampler = f"dns:///{svc['metadata']['name']}:{svc['spec']['ports'][0]['port']}"
    if overlay == EMBEDDED:  # the trainers' own loader
        (trainer,) = containers(r.workload("trainer"))
        assert args_flag(trainer["args"], "--graph-stores") == template
        assert args_flag(trainer["args"], "--sampler") == sampler
    else:
        (loader,) = pod_spec(r.workload("trainer"))["initContainers"]
        assert static_env(r, loader)["GRAPHFEED_LOADER_SAMPLER_ADDRESS"] == sampler
    headless = r.get("Service", sts["spec"]["serviceName"])
    assert headless["spec"]["clusterIP"] == "None" and service_selects(
        headless, sts["spec"]["template"]["metadata"]["labels"]
    )
    # Clients balance over every sampler pod (round_robin over DNS): the Service must be headless.
    assert svc["spec"]["clusterIP"] == "None"


@pytest.mark.parametrize("overlay", OVERLAYS)
def test_each_graph_store_stages_the_partition_of_its_ordinal(rendered: dict[str, Rendered], overlay: str) -> None:
    r = rendered[overlay]
    sts = r.get("StatefulSet", "graph-store")
    (init,) = pod_spec(sts)["initContainers"]
    (env,) = init["env"]
    assert env["valueFrom"]["fieldRef"]["fieldPath"] == "metadata.labels['apps.kubernetes.io/pod-index']"
    (ingest,) = containers(r.workload("ingest"))
    out = args_flag(ingest["args"], "--out")
    script = init["args"][0]
    assert f"src={out}/$part" in script and 'part=part-$(printf %05d "$POD_INDEX")' in script
    (server,) = pod_spec(sts)["containers"]
    part_dir = _given(args_flag(server["args"], "--part-dir"), "--part-dir")
    assert 'mv "$dst/incoming" "$dst/current"' in script and part_dir.endswith("/current")
    mounts = {m["name"]: m for m in server["volumeMounts"]}
    assert part_dir.startswith(mounts["partition"]["mountPath"])
    assert [t["metadata"]["name"] for t in sts["spec"]["volumeClaimTemplates"]] == ["partition"]
    assert (
        sts["spec"]["volumeClaimTemplates"][0]["spec"]["resources"]["requests"]["storage"]
        == _values()["partitionStorage"]
    )


@pytest.mark.parametrize("overlay", INDEXED)
def test_trainer_is_an_indexed_job_with_torchrun_env(rendered: dict[str, Rendered], overlay: str) -> None:
    r = rendered[overlay]
    job = r.get("Job", "trainer")
    spec, (c,) = job["spec"], containers(job, init=False)
    assert spec["completionMode"] == "Indexed" and spec["completions"] == spec["parallelism"] == _values()["trainers"]
    env = {e["name"]: e for e in c["env"]}
    assert int(env["WORLD_SIZE"]["value"]) == spec["completions"]
    assert (
        env["RANK"]["valueFrom"]["fieldRef"]["fieldPath"]
        == "metadata.annotations['batch.kubernetes.io/job-completion-index']"
    )
    subdomain = pod_spec(job)["subdomain"]
    assert env["MASTER_ADDR"]["value"] == f"trainer-0.{subdomain}"
    assert int(env["MASTER_PORT"]["value"]) == container_ports(c)["rendezvous"]
    assert args_flag(c["args"], "--rank") is None and args_flag(c["args"], "--world-size") is None, (
        "torchrun's env decides"
    )
    svc = r.get("Service", subdomain)
    assert svc["spec"]["clusterIP"] == "None" and service_selects(svc, job["spec"]["template"]["metadata"]["labels"])


def _volume(spec: dict, name: str) -> dict:
    (v,) = [v for v in spec["volumes"] if v["name"] == name]
    return v


@pytest.mark.parametrize("overlay", INDEXED)
def test_each_trainer_pod_carries_its_loader_as_a_sidecar(rendered: dict[str, Rendered], overlay: str) -> None:
    r = rendered[overlay]
    assert not r.of_kind("DaemonSet") and r.find("Service", "loader") is None
    job = r.get("Job", "trainer")
    spec, (trainer,) = pod_spec(job), containers(job, init=False)
    if overlay == EMBEDDED:
        assert "initContainers" not in spec and not any(
            "loader" in v["name"] for v in spec["volumes"] if v["name"] != "shm"
        )
        return
    (loader,) = spec["initContainers"]
    assert loader["restartPolicy"] == "Always", "a native sidecar (Kubernetes >= 1.29)"
    assert args_flag(trainer["args"], "--loader") == f"127.0.0.1:{container_ports(loader)['grpc']}"
    # Shared memory private to the pod: an emptyDir in RAM, mounted where both expect it.
    assert _volume(spec, "shm")["emptyDir"]["medium"] == "Memory"
    shm_dir = static_env(r, loader)["GRAPHFEED_LOADER_SHM_DIR"]
    assert args_flag(trainer["args"], "--shm-dir") == shm_dir
    for c in (loader, trainer):
        assert {m["name"]: m["mountPath"] for m in c["volumeMounts"]}["shm"] == shm_dir
    assert GPU not in json.dumps(loader["resources"]), "the loader gathers on the host: no GPU"


def test_gpus_and_images_per_overlay(rendered: dict[str, Rendered]) -> None:
    values = _values()
    devices = {}
    for name in INDEXED:
        job = rendered[name].get("Job", "trainer")
        (trainer,) = containers(job, init=False)
        devices[name] = {e["name"]: e.get("value") for e in trainer["env"]}["TRAINER_DEVICE"]
        assert args_flag(trainer["args"], "--device") == "$(TRAINER_DEVICE)"
        gpu = name != "cpu"
        assert trainer["image"] == (values["cudaImage"] if gpu else values["image"]), name
        assert (trainer["resources"]["limits"].get(GPU) == "1") == gpu, name
        assert "nodeSelector" not in pod_spec(job), f"{name}: the GPU request places trainers, not a node label"
        others = [c for w in rendered[name].workloads() for c in containers(w) if c is not trainer]
        assert {c["image"] for c in others} == {values["image"]}, name
        assert not [c for c in others if GPU in json.dumps(c["resources"])], f"{name}: only trainers use GPUs"
    assert devices == {"gpu": "cuda", "cpu": "cpu", EMBEDDED: "cuda", PACKED: "cuda"}, (
        "trainers on GPU nodes train on their GPU"
    )
    cpu_trainer = rendered["cpu"].get("Job", "trainer")
    assert GPU not in json.dumps(containers(cpu_trainer)) and "tolerations" not in pod_spec(cpu_trainer)
    assert "nodeSelector:" not in rendered["cpu"].text


@pytest.mark.parametrize("overlay", OVERLAYS)
def test_services_pdbs_and_hpa_select_real_pods(rendered: dict[str, Rendered], overlay: str) -> None:
    r = rendered[overlay]
    pods = [(w, w["spec"]["template"]["metadata"]["labels"]) for w in r.workloads()]
    for svc in r.of_kind("Service"):
        selected = [w for w, labels in pods if service_selects(svc, labels)]
        assert selected, f"Service {svc['metadata']['name']} selects no pods"
        for sp in svc["spec"]["ports"]:
            assert all(any(sp["targetPort"] in container_ports(c) for c in containers(w)) for w in selected)
    for pdb in r.of_kind("PodDisruptionBudget"):
        assert any(selector_matches(pdb["spec"]["selector"], labels) for _, labels in pods), pdb["metadata"]["name"]
    (hpa,) = r.of_kind("HorizontalPodAutoscaler")
    target = r.get(hpa["spec"]["scaleTargetRef"]["kind"], hpa["spec"]["scaleTargetRef"]["name"])
    assert "replicas" not in target["spec"], "the HPA owns replicas; a fixed count fights it on every apply"


@pytest.mark.parametrize("overlay", OVERLAYS)
def test_network_policies_allow_exactly_the_architectures_flows(rendered: dict[str, Rendered], overlay: str) -> None:
    r = rendered[overlay]
    labels = {w["metadata"]["name"]: w["spec"]["template"]["metadata"]["labels"] for w in r.workloads()}
    monitoring = {"app": "prometheus"}
    # Trainer pods call graph-stores and samplers: their loader sidecar (or, embedded, the
    # trainer's own loader) does; trainer -> loader is loopback inside the pod.
    flows = [  # (client, server, port, expected)
        ("sampler", "graph-store", 50051, True),
        ("trainer", "trainer", 29500, True),
        ("trainer", "graph-store", 50051, True),
        ("trainer", "sampler", 50051, True),
        ("graph-store", "sampler", 50051, False),
        ("ingest", "graph-store", 50051, False),
        ("ingest", "sampler", 50051, False),
        ("sampler", "trainer", 29500, False),
        ("graph-store", "trainer", 50051, False),
    ]
    if "pack" in labels:  # the out-of-core overlay's pack Job reads rows from the graph-stores only
        flows += [("pack", "graph-store", 50051, True), ("pack", "sampler", 50051, False)]
        flows += [("pack", "trainer", 29500, False), ("ingest", "pack", 50051, False)]
    for client, server, port, expected in flows:
        ok = network_allows(r, "Egress", labels[client], labels[server], r.namespace, port) and network_allows(
            r, "Ingress", labels[server], labels[client], r.namespace, port
        )
        assert ok == expected, f"{client} -> {server}:{port} should be {'allowed' if expected else 'denied'}"
    for server, port in (("graph-store", 8080), ("sampler", 8080), ("trainer", 8080), ("trainer", 8081)):
        # Prometheus runs in values.yaml's monitoringNamespace: scrapes from there, and only there.
        assert network_allows(r, "Ingress", labels[server], monitoring, _values()["monitoringNamespace"], port), (
            f"Prometheus -> {server}:{port}"
        )
        assert not network_allows(r, "Ingress", labels[server], monitoring, "other", port)
    for w in labels.values():
        assert network_allows(r, "Egress", w, {"k8s-app": "kube-dns"}, "kube-system", 53)
    dns = r.get("NetworkPolicy", "allow-dns")["spec"]["egress"]
    assert any(peer.get("ipBlock", {}).get("cidr") == "169.254.20.10/32" for rule in dns for peer in rule["to"]), (
        "NodeLocal DNSCache's address must be reachable on port 53 too"
    )


def test_the_upload_pod_runs_the_values_image() -> None:
    """k8s/tools/upload.yaml is applied by itself (not through an overlay): `make values` keeps
    its image equal to values.yaml's."""
    upload = yaml.safe_load((REPO / "k8s/tools/upload.yaml").read_text())
    images = {c["image"] for c in upload["spec"]["containers"]}
    assert images == {_values()["image"]}
