"""Rendered kustomizations (``kubectl kustomize``) and lookups into them."""

from __future__ import annotations

import re
from dataclasses import dataclass
from pathlib import Path

import yaml

from tests.deploy.tools import REPO, check, tool

KUSTOMIZATIONS = {
    "cpu": REPO / "k8s/overlays/cpu",
    "gpu": REPO / "k8s/overlays/gpu",
    "gpu-embedded": REPO / "k8s/overlays/gpu-embedded",
    "gpu-pytorchjob": REPO / "k8s/overlays/gpu-pytorchjob",
    "gpu-packed": REPO / "k8s/overlays/gpu-packed",
    "monitoring": REPO / "k8s/monitoring",
}
WORKLOAD_KINDS = ("Deployment", "StatefulSet", "DaemonSet", "Job")
# Kinds of the Prometheus Operator and Kubeflow's training operator: no schema for them in
# kubernetes-validate.
OPERATOR_KINDS = ("PodMonitor", "ServiceMonitor", "PrometheusRule", "PyTorchJob")


@dataclass
class Rendered:
    """The objects of one rendered kustomization."""

    name: str
    text: str
    docs: list[dict]

    def of_kind(self, kind: str) -> list[dict]:
        return [d for d in self.docs if d["kind"] == kind]

    def get(self, kind: str, name: str) -> dict:
        found = [d for d in self.of_kind(kind) if d["metadata"]["name"] == name]
        assert len(found) == 1, f"{self.name}: expected one {kind}/{name}, found {len(found)}"
        return found[0]

    def find(self, kind: str, name: str) -> dict | None:
        found = [d for d in self.of_kind(kind) if d["metadata"]["name"] == name]
        return found[0] if found else None

    def workloads(self) -> list[dict]:
        """Every object with a pod template; a PyTorchJob's replica specs stand as one workload
        each ("trainer" for the Master, or for the Workers when there is no Master;
        "trainer-worker" for Workers beside a Master)."""
        out = [d for d in self.docs if d["kind"] in WORKLOAD_KINDS]
        for d in self.of_kind("PyTorchJob"):
            specs = d["spec"]["pytorchReplicaSpecs"]
            for role, rs in specs.items():
                plain = role == "Master" or "Master" not in specs
                name = d["metadata"]["name"] + ("" if plain else f"-{role.lower()}")
                out.append(
                    {
                        "kind": "PyTorchJob",
                        "metadata": {**d["metadata"], "name": name},
                        "spec": {"template": rs["template"]},
                    }
                )
        return out

    def workload(self, name: str) -> dict:
        found = [d for d in self.workloads() if d["metadata"]["name"] == name]
        assert len(found) == 1, f"{self.name}: expected one workload named {name}, found {len(found)}"
        return found[0]

    def configmap_data(self, name: str) -> dict[str, str]:
        return dict(self.get("ConfigMap", name).get("data", {}))

    @property
    def namespace(self) -> str:
        (ns,) = {d["metadata"].get("namespace") for d in self.docs if d["kind"] != "Namespace"}
        return ns


def render(name: str) -> Rendered:
    """``kubectl kustomize`` of one of :data:`KUSTOMIZATIONS`."""
    text = check([tool("kubectl"), "kustomize", str(KUSTOMIZATIONS[name])], timeout_s=120)
    docs = [d for d in yaml.safe_load_all(text) if d]
    return Rendered(name, text, docs)


def pod_spec(workload: dict) -> dict:
    return workload["spec"]["template"]["spec"]


def containers(workload: dict, init: bool = True) -> list[dict]:
    spec = pod_spec(workload)
    return [*(spec.get("initContainers", []) if init else []), *spec["containers"]]


def container_ports(container: dict) -> dict[str, int]:
    return {p["name"]: int(p["containerPort"]) for p in container.get("ports", [])}


def static_env(rendered: Rendered, container: dict) -> dict[str, str | None]:
    """A container's env as Kubernetes builds it (envFrom, then env); valueFrom entries are None."""
    env: dict[str, str | None] = {}
    for src in container.get("envFrom", []):
        env.update(rendered.configmap_data(src["configMapRef"]["name"]))
    for e in container.get("env", []):
        env[e["name"]] = e.get("value")
    return env


def args_flag(args: list[str], flag: str) -> str | None:
    """The value after ``flag`` in an argument list (None when absent)."""
    return args[args.index(flag) + 1] if flag in args else None


def dockerfile_entrypoint() -> list[str]:
    """ENTRYPOINT (exec form) of the last stage of docker/Dockerfile."""
    text = (REPO / "docker/Dockerfile").read_text()
    found = re.findall(r"^ENTRYPOINT\s+(\[.*\])\s*$", text, flags=re.M)
    assert found, "docker/Dockerfile has no exec-form ENTRYPOINT"
    return yaml.safe_load(found[-1])


def selector_matches(selector: dict, labels: dict) -> bool:
    """matchLabels / matchExpressions (In, NotIn, Exists, DoesNotExist) against ``labels``."""
    if any(labels.get(k) != v for k, v in selector.get("matchLabels", {}).items()):
        return False
    for expr in selector.get("matchExpressions", []):
        key, op, values = expr["key"], expr["operator"], expr.get("values", [])
        ok = {
            "In": key in labels and labels[key] in values,
            "NotIn": key not in labels or labels[key] not in values,
            "Exists": key in labels,
            "DoesNotExist": key not in labels,
        }[op]
        if not ok:
            return False
    return True


def service_selects(service: dict, labels: dict) -> bool:
    sel = service["spec"].get("selector") or {}
    return bool(sel) and all(labels.get(k) == v for k, v in sel.items())


def write_rules_file(out_dir: Path) -> Path:
    """Writes the .spec of k8s/monitoring/prometheusrule.yaml as graphfeed.rules.yaml."""
    rule = yaml.safe_load((REPO / "k8s/monitoring/prometheusrule.yaml").read_text())
    path = out_dir / "graphfeed.rules.yaml"
    path.write_text(yaml.safe_dump(rule["spec"], sort_keys=False))
    return path


def network_allows(r: Rendered, direction: str, pod: dict, peer: dict, peer_ns: str, port: int) -> bool:
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
                if "ipBlock" in peer_sel:  # an address range (NodeLocal DNS), never a pod here
                    continue
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
