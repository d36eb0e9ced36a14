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
    pod_spec,
    selector_matches,
    service_selects,
    static_env,
)
from tests.deploy.tools import REPO, run, tool

OVERLAYS = ("cpu", "gpu", "gpu-embedded")
EMBEDDED = "gpu-embedded"  # the loader runs inside the trainers: no loader workload
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
            assert labels.get("app.kubernetes.io/part-of") == "graphfeed", f"{name}: {d['kind']}/{d['metadata']['name']}"
            if d["kind"] != "Namespace":
                assert labels.get("app.kubernetes.io/name") == "graphfeed", f"{name}: {d['kind']}/{d['metadata']['name']}"
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
    for w in rendered[overlay].workloads():
        spec, where = pod_spec(w), f"{overlay}: {w['kind']}/{w['metadata']['name']}"
        assert spec["serviceAccountName"] == "graphfeed" and spec["automountServiceAccountToken"] is False, where
        psc = spec["securityContext"]
        assert psc["runAsNonRoot"] is True and psc["runAsUser"] >= 10000, where
        assert psc["seccompProfile"]["type"] == "RuntimeDefault", where
        for c in containers(w):
            sc = c["securityContext"]
            assert sc["readOnlyRootFilesystem"] is True and sc["allowPrivilegeEscalation"] is False, f"{where} {c['name']}"
            assert sc["capabilities"]["drop"] == ["ALL"] and not sc.get("privileged"), f"{where} {c['name']}"
            for kind in ("requests", "limits"):
                assert {"cpu", "memory"} <= set(c["resources"][kind]), f"{where} {c['name']} {kind}"
    sa = rendered[overlay].get("ServiceAccount", "graphfeed")
    assert sa["automountServiceAccountToken"] is False


@pytest.mark.parametrize("overlay", OVERLAYS)
def test_servers_have_grpc_probes_and_a_grace_period_longer_than_grace_s(rendered: dict[str, Rendered], overlay: str) -> None:
    r = rendered[overlay]
    servers = set()
    for w in r.workloads():
        for c in containers(w, init=False):
            ports = container_ports(c)
            if "grpc" not in ports:
                continue
            servers.add(c["name"])
            assert _given(_graphfeed_args(c), c["name"])[:1] == ["serve"], c["name"]
            for probe in ("readinessProbe", "livenessProbe"):
                assert c[probe]["grpc"]["port"] == ports["grpc"], f"{c['name']} {probe}"
            env = static_env(r, c)
            (grace_key,) = [k for k in env if k.endswith("_GRACE_S")]
            grace_s = float(_given(env[grace_key], grace_key))
            period = pod_spec(w)["terminationGracePeriodSeconds"]
            # In-flight calls get grace_s; closing stores and channels needs a little more.
            assert grace_s + 5 <= period <= grace_s + 30, f"{c['name']}: grace_s {grace_s}, terminationGracePeriodSeconds {period}"
            assert env[grace_key.replace("GRACE_S", "PORT")] == str(ports["grpc"])
            assert env[grace_key.replace("GRACE_S", "METRICS_PORT")] == str(ports["metrics"])
            ann = w["spec"]["template"]["metadata"]["annotations"]
            assert ann["prometheus.io/scrape"] == "true" and int(ann["prometheus.io/port"]) == ports["metrics"]
    assert servers == ({"graph-store", "sampler"} if overlay == EMBEDDED else {"graph-store", "sampler", "loader"})


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
            for key in static_env(r, c):
                assert key.startswith(prefix) and key[len(prefix):].lower() in cls.model_fields, (
                    f"{c['name']}: {key} is not a setting of {name} (it would be silently ignored)"
                )
    services = {"ingest", "serve graph-store", "serve sampler", "train"}
    assert seen == (services if overlay == EMBEDDED else services | {"serve loader"})


@pytest.mark.parametrize("overlay", OVERLAYS)
def test_partition_count_agrees_everywhere(rendered: dict[str, Rendered], overlay: str) -> None:
    r = rendered[overlay]
    sts = r.get("StatefulSet", "graph-store")
    replicas = sts["spec"]["replicas"]
    (ingest,) = containers(r.workload("ingest"))
    assert int(_given(args_flag(ingest["args"], "--num-partitions"), "--num-partitions")) == replicas
    port = container_ports(pod_spec(sts)["containers"][0])["grpc"]
    expected = [f"graph-store-{i}.{sts['spec']['serviceName']}:{port}" for i in range(replicas)]
    for name in ("sampler", "loader") if overlay != EMBEDDED else ("sampler",):
        (c,) = containers(r.workload(name))
        env = static_env(r, c)
        (key,) = [k for k in env if k.endswith("_GRAPH_STORE_ADDRESSES")]
        assert json.loads(_given(env[key], key)) == expected, f"{name}: {key}"
    if overlay == EMBEDDED:  # the trainers' own loader
        (trainer,) = containers(r.workload("trainer"))
        assert _given(args_flag(trainer["args"], "--graph-stores"), "--graph-stores").split(",") == expected
        svc = r.get("Service", "sampler")
        assert args_flag(trainer["args"], "--sampler") == f"{svc['metadata']['name']}:{svc['spec']['ports'][0]['port']}"
    headless = r.get("Service", sts["spec"]["serviceName"])
    assert headless["spec"]["clusterIP"] == "None" and service_selects(headless, sts["spec"]["template"]["metadata"]["labels"])


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


@pytest.mark.parametrize("overlay", OVERLAYS)
def test_trainer_is_an_indexed_job_with_rendezvous_on_rank_0(rendered: dict[str, Rendered], overlay: str) -> None:
    r = rendered[overlay]
    job = r.get("Job", "trainer")
    spec, (c,) = job["spec"], containers(job)
    assert spec["completionMode"] == "Indexed" and spec["completions"] == spec["parallelism"]
    assert int(_given(args_flag(c["args"], "--world-size"), "--world-size")) == spec["completions"]
    env = {e["name"]: e for e in c["env"]}
    subdomain = pod_spec(job)["subdomain"]
    assert env["MASTER_ADDR"]["value"] == f"trainer-0.{subdomain}"
    assert int(env["MASTER_PORT"]["value"]) == container_ports(c)["rendezvous"]
    assert args_flag(c["args"], "--rank") == "$(TRAINER_RANK)"
    assert env["TRAINER_RANK"]["valueFrom"]["fieldRef"]["fieldPath"] == "metadata.annotations['batch.kubernetes.io/job-completion-index']"
    svc = r.get("Service", subdomain)
    assert svc["spec"]["clusterIP"] == "None" and service_selects(svc, job["spec"]["template"]["metadata"]["labels"])


def test_loader_placement_per_overlay(rendered: dict[str, Rendered]) -> None:
    gpu, cpu = rendered["gpu"], rendered["cpu"]
    ds = gpu.get("DaemonSet", "loader")
    trainer = gpu.get("Job", "trainer")
    assert gpu.get("Service", "loader")["spec"]["internalTrafficPolicy"] == "Local"
    for w in (ds, trainer):  # trainers land on the nodes that run a loader
        assert pod_spec(w)["nodeSelector"] == pod_spec(ds)["nodeSelector"]
        assert pod_spec(w)["tolerations"] == pod_spec(ds)["tolerations"]
        assert containers(w)[0]["resources"]["limits"][GPU] == 1
    devices = {name: {e["name"]: e.get("value") for e in containers(r.get("Job", "trainer"))[0]["env"]}["TRAINER_DEVICE"]
               for name, r in rendered.items() if name in OVERLAYS}  # fmt: skip
    assert args_flag(containers(trainer)[0]["args"], "--device") == "$(TRAINER_DEVICE)"
    assert devices == {"gpu": "cuda", "cpu": "cpu", EMBEDDED: "cuda"}, "trainers on GPU nodes train on their GPU"
    embedded = rendered[EMBEDDED]
    assert not [w for w in embedded.workloads() if w["metadata"]["name"] == "loader"]
    assert embedded.find("Service", "loader") is None and embedded.find("PodDisruptionBudget", "loader") is None
    assert pod_spec(embedded.get("Job", "trainer"))["nodeSelector"] == pod_spec(ds)["nodeSelector"]
    assert cpu.find("DaemonSet", "loader") is None
    assert cpu.get("Service", "loader")["spec"]["internalTrafficPolicy"] == "Cluster"
    assert GPU not in cpu.text and "nodeSelector" not in cpu.text
    # The cpu Deployment runs the same loader container as the gpu DaemonSet, minus the GPU.
    (dep_c,) = containers(cpu.get("Deployment", "loader"))
    (ds_c,) = containers(ds)
    ds_c = json.loads(json.dumps(ds_c))
    for kind in ("requests", "limits"):
        del ds_c["resources"][kind][GPU]
    assert dep_c == ds_c


@pytest.mark.parametrize("overlay", OVERLAYS)
def test_services_pdbs_and_hpa_select_real_pods(rendered: dict[str, Rendered], overlay: str) -> None:
    r = rendered[overlay]
    pods = [(w, w["spec"]["template"]["metadata"]["labels"]) for w in r.workloads()]
    for svc in r.of_kind("Service"):
        selected = [w for w, labels in pods if service_selects(svc, labels)]
        assert selected, f"Service {svc['metadata']['name']} selects no pods"
        for sp in svc["spec"]["ports"]:
            assert all(sp["targetPort"] in container_ports(containers(w, init=False)[0]) for w in selected)
    for pdb in r.of_kind("PodDisruptionBudget"):
        assert any(selector_matches(pdb["spec"]["selector"], labels) for _, labels in pods), pdb["metadata"]["name"]
    (hpa,) = r.of_kind("HorizontalPodAutoscaler")
    target = r.get(hpa["spec"]["scaleTargetRef"]["kind"], hpa["spec"]["scaleTargetRef"]["name"])
    assert "replicas" not in target["spec"], "the HPA owns replicas; a fixed count fights it on every apply"


def _allowed(r: Rendered, direction: str, pod: dict, peer: dict, peer_ns: str, port: int) -> bool:
    """Whether the NetworkPolicies let ``pod`` receive from / send to ``peer`` on TCP ``port``."""
    key = "ingress" if direction == "Ingress" else "egress"
    side = "from" if key == "ingress" else "to"
    policies = [p for p in r.of_kind("NetworkPolicy") if selector_matches(p["spec"]["podSelector"], pod)]
    policies = [p for p in policies if direction in p["spec"].get("policyTypes", [])]
    assert policies, "default-deny must select every pod"
    for p in policies:
        for rule in p["spec"].get(key, []):
            ports = rule.get("ports")
            if ports and not any(pp.get("port") == port and pp.get("protocol", "TCP") == "TCP" for pp in ports):
                continue
            for peer_sel in rule.get(side, [{}]) or [{}]:
                if not peer_sel:  # no peers listed: any source or destination
                    return True
                ns_sel = peer_sel.get("namespaceSelector")
                # A podSelector alone means this namespace; a namespaceSelector alone, all its pods.
                if ns_sel is None:
                    ns_ok = peer_ns == r.namespace
                else:
                    ns_ok = selector_matches(ns_sel, {"kubernetes.io/metadata.name": peer_ns})
                pod_ok = selector_matches(peer_sel["podSelector"], peer) if "podSelector" in peer_sel else True
                if ns_ok and pod_ok:
                    return True
    return False


@pytest.mark.parametrize("overlay", OVERLAYS)
def test_network_policies_allow_exactly_the_architectures_flows(rendered: dict[str, Rendered], overlay: str) -> None:
    r = rendered[overlay]
    labels = {w["metadata"]["name"]: w["spec"]["template"]["metadata"]["labels"] for w in r.workloads()}
    monitoring = {"app": "prometheus"}
    embedded = overlay == EMBEDDED  # trainers run the loader: they call samplers and graph-stores
    flows = [  # (client, server, port, expected)
        ("sampler", "graph-store", 50051, True),
        ("trainer", "trainer", 29500, True),
        ("trainer", "graph-store", 50051, embedded),
        ("trainer", "sampler", 50051, embedded),
        ("graph-store", "sampler", 50051, False),
        ("ingest", "graph-store", 50051, False),
        ("ingest", "sampler", 50051, False),
        ("sampler", "trainer", 29500, False),
    ]
    if not embedded:
        flows += [
            ("loader", "graph-store", 50051, True),
            ("loader", "sampler", 50051, True),
            ("trainer", "loader", 50051, True),
            ("sampler", "loader", 50051, False),
        ]
    for client, server, port, expected in flows:
        ok = _allowed(r, "Egress", labels[client], labels[server], r.namespace, port) and _allowed(
            r, "Ingress", labels[server], labels[client], r.namespace, port
        )
        assert ok == expected, f"{client} -> {server}:{port} should be {'allowed' if expected else 'denied'}"
    for server in ("graph-store", "sampler") if embedded else ("graph-store", "sampler", "loader"):
        assert _allowed(r, "Ingress", labels[server], monitoring, "monitoring", 8080), f"Prometheus -> {server}"
        assert not _allowed(r, "Ingress", labels[server], monitoring, "other", 8080)
    for w in labels.values():
        assert _allowed(r, "Egress", w, {"k8s-app": "kube-dns"}, "kube-system", 53)
