"""Every pod template of every overlay against Pod Security "restricted" (the namespace
enforces it: k8s/base/namespace.yaml), rule by rule (tests/deploy/pod_security.py), and each
rule shown to catch what it forbids, including the hostPath /dev/shm of the old layout."""

from __future__ import annotations

import copy

import pytest
import yaml

from tests.deploy.manifests import KUSTOMIZATIONS, Rendered
from tests.deploy.pod_security import pod_templates, violations
from tests.deploy.tools import REPO

OVERLAYS = [name for name in KUSTOMIZATIONS if name != "monitoring"]


def test_the_namespace_enforces_restricted(rendered: dict[str, Rendered]) -> None:
    for name in OVERLAYS:
        labels = rendered[name].get("Namespace", "graphfeed")["metadata"]["labels"]
        assert labels["pod-security.kubernetes.io/enforce"] == "restricted", name


@pytest.mark.parametrize("overlay", OVERLAYS)
def test_every_pod_is_admitted_under_restricted(rendered: dict[str, Rendered], overlay: str) -> None:
    pods = [(where, pod) for d in rendered[overlay].docs for where, pod in pod_templates(d)]
    assert len(pods) >= 4, [w for w, _ in pods]  # ingest, graph-store, sampler, trainer(s)
    for where, pod in pods:
        assert violations(pod) == [], f"{overlay}: {where} would be rejected"


def test_the_tool_pods_are_admitted_under_restricted() -> None:
    """k8s/tools: pods a user applies by hand (the upload pod for their own data)."""
    found = 0
    for path in sorted((REPO / "k8s/tools").glob("*.yaml")):
        for doc in yaml.safe_load_all(path.read_text()):
            for where, pod in pod_templates(doc):
                found += 1
                assert doc["metadata"].get("namespace") == "graphfeed", where
                assert violations(pod) == [], f"{path.name}: {where} would be rejected"
    assert found >= 1


def _good_pod() -> dict:
    container = {
        "name": "c",
        "image": "x",
        "securityContext": {"allowPrivilegeEscalation": False, "capabilities": {"drop": ["ALL"]}},
        "ports": [{"name": "grpc", "containerPort": 50051}],
    }
    return {
        "metadata": {"annotations": {}},
        "spec": {
            "securityContext": {"runAsNonRoot": True, "runAsUser": 10001, "seccompProfile": {"type": "RuntimeDefault"}},
            "initContainers": [{**copy.deepcopy(container), "name": "sidecar", "restartPolicy": "Always"}],
            "containers": [container],
            "volumes": [
                {"name": "shm", "emptyDir": {"medium": "Memory"}},
                {"name": "p", "persistentVolumeClaim": {"claimName": "x"}},
            ],
        },
    }


def _set(pod: dict, path: str, value: object) -> None:
    *parents, last = path.split(".")
    node = pod
    for key in parents:
        node = node[int(key)] if isinstance(node, list) else node.setdefault(key, {})
    if isinstance(node, list):
        node[int(last)] = value
    else:
        node[last] = value


BREAKS = {  # rule -> (path, value) that breaks it
    "host_path_volumes": ("spec.volumes.0", {"name": "shm", "hostPath": {"path": "/dev/shm", "type": "Directory"}}),
    "host_namespaces": ("spec.hostNetwork", True),
    "host_namespaces/pid": ("spec.hostPID", True),
    "host_namespaces/ipc": ("spec.hostIPC", True),
    "privileged": ("spec.containers.0.securityContext.privileged", True),
    "baseline_capabilities": ("spec.containers.0.securityContext.capabilities.add", ["SYS_ADMIN"]),
    "restricted_capabilities": ("spec.initContainers.0.securityContext.capabilities", {"add": ["CHOWN"]}),
    "host_ports": ("spec.containers.0.ports.0.hostPort", 50051),
    "seccomp": ("spec.securityContext.seccompProfile.type", "Unconfined"),
    "seccomp/missing": ("spec.securityContext.seccompProfile", {}),
    "run_as_non_root": ("spec.securityContext.runAsNonRoot", False),
    "run_as_non_root/container": ("spec.initContainers.0.securityContext.runAsNonRoot", False),
    "run_as_user": ("spec.containers.0.securityContext.runAsUser", 0),
    "privilege_escalation": ("spec.initContainers.0.securityContext.allowPrivilegeEscalation", True),
    "sysctls": ("spec.securityContext.sysctls", [{"name": "kernel.msgmax", "value": "1"}]),
    "proc_mount": ("spec.containers.0.securityContext.procMount", "Unmasked"),
    "selinux": ("spec.securityContext.seLinuxOptions", {"type": "spc_t"}),
    "apparmor": ("spec.containers.0.securityContext.appArmorProfile", {"type": "Unconfined"}),
    "apparmor/annotation": ("metadata.annotations.container\x00apparmor", None),
    "host_process": ("spec.securityContext.windowsOptions", {"hostProcess": True}),
    "volume_types": ("spec.volumes.1", {"name": "nfs", "nfs": {"server": "s", "path": "/"}}),
}


def test_a_good_pod_passes() -> None:
    assert violations(_good_pod()) == []


@pytest.mark.parametrize("case", sorted(BREAKS))
def test_each_rule_rejects_what_it_forbids(case: str) -> None:
    pod = _good_pod()
    path, value = BREAKS[case]
    if case == "apparmor/annotation":
        pod["metadata"]["annotations"]["container.apparmor.security.beta.kubernetes.io/c"] = "unconfined"
    else:
        _set(pod, path, value)
    found = violations(pod)
    rule = case.split("/")[0]
    assert any(v.startswith(f"{rule}:") for v in found), (case, found)
