"""What the control-plane tests share: overlay trees with test values, the documented apply,
and views of what the cluster made of them (tests/deploy/test_control_plane.py,
test_apply_values.py; the cluster itself is conftest.py's ``cp`` fixture)."""

from __future__ import annotations

import os
import re
import shutil
import subprocess
import threading
from pathlib import Path

import pytest
import yaml

from tests.deploy.control_plane import ControlPlane
from tests.deploy.tools import REPO

OVERLAYS = ("cpu", "gpu", "gpu-embedded", "gpu-packed", "gpu-pytorchjob")
TEST_VALUES = {"storageClass": "test-rwo", "sharedStorageClass": "test-rwx"}
CPU_ROLES = ("ingest", "graph-store", "sampler", "pack")


def stand_in_kubelet(cp: ControlPlane, stop: threading.Event) -> None:
    """Does the one thing of a kubelet that deletions wait on: a pod being deleted is removed
    (its containers would have stopped). Nothing runs, so nothing else is faked."""
    while not stop.wait(2.0):
        res = cp.kubectl(
            "get",
            "pods",
            "-A",
            "-o",
            "jsonpath={range .items[?(@.metadata.deletionTimestamp)]}"
            "{.metadata.namespace} {.metadata.name}{'\\n'}{end}",
            check=False,
        )
        for line in res.stdout.split("\n"):
            if line.strip():
                ns, name = line.split()
                cp.kubectl("delete", "pod", name, "-n", ns, "--force", "--grace-period=0", check=False)


def k8s_tree(tmp: Path, namespace: str, **values: object) -> Path:
    """A copy of k8s/ whose objects live in ``namespace`` and whose values.yaml has ``values``."""
    root = tmp / f"k8s-{namespace}"
    if root.exists():
        shutil.rmtree(root)
    shutil.copytree(REPO / "k8s", root)
    for path in root.rglob("*.yaml"):
        text = path.read_text()
        new = re.sub(r"(?m)^(\s*)namespace: graphfeed$", rf"\1namespace: {namespace}", text)
        if path.name == "namespace.yaml":
            new = new.replace("  name: graphfeed\n", f"  name: {namespace}\n")
        if new != text:
            path.write_text(new)
    set_values(root, {**TEST_VALUES, **values})
    return root


def set_values(root: Path, values: dict) -> None:
    path = root / "values" / "values.yaml"
    doc = yaml.safe_load(path.read_text())
    doc["spec"].update(values)
    path.write_text(yaml.safe_dump(doc, sort_keys=False))


def apply_script(cp: ControlPlane, overlay: Path, *args: str, check: bool = True) -> subprocess.CompletedProcess:
    """Runs k8s/tools/apply.sh, the documented way to apply an overlay, against this cluster."""
    env = {**os.environ, "KUBECONFIG": str(cp.kubeconfig)}
    res = subprocess.run(
        [str(REPO / "k8s/tools/apply.sh"), str(overlay), *args], capture_output=True, text=True, env=env, timeout=600
    )
    if check and res.returncode != 0:
        pytest.fail(f"apply.sh {overlay.name} {' '.join(args)} exited {res.returncode}:\n{res.stdout}\n{res.stderr}")
    return res


def expected_pods(rendered: list[dict]) -> dict[str, int]:
    """Pods each workload's controller must create: {component: count}."""
    want: dict[str, int] = {}
    for d in rendered:
        comp = d["metadata"].get("labels", {}).get("app.kubernetes.io/component")
        if d["kind"] == "StatefulSet":
            want[comp] = want.get(comp, 0) + int(d["spec"]["replicas"])
        elif d["kind"] == "Deployment":
            want[comp] = want.get(comp, 0) + int(d["spec"].get("replicas", 1))
        elif d["kind"] == "Job":
            want[comp] = want.get(comp, 0) + int(d["spec"].get("parallelism", 1))
    return want


def pods_by_component(cp: ControlPlane, ns: str) -> dict[str, list[dict]]:
    out: dict[str, list[dict]] = {}
    for pod in cp.get("pods", ns)["items"]:
        if pod["metadata"].get("deletionTimestamp"):
            continue
        out.setdefault(pod["metadata"]["labels"].get("app.kubernetes.io/component", "?"), []).append(pod)
    return out


def warnings(cp: ControlPlane, ns: str) -> list[str]:
    events = cp.get("events", ns)["items"]
    return [
        f"{e['involvedObject']['kind']}/{e['involvedObject']['name']}: {e['reason']}: {e['message']}"
        for e in events
        if e["type"] == "Warning" and e["reason"] not in ("FailedScheduling",) and "metrics" not in e["message"]
    ]


def deploy(cp: ControlPlane, tmp: Path, overlay: str, ns: str, **values: object) -> tuple[Path, list[dict]]:
    """Server dry-run, then the documented apply; returns the tree and the rendered objects."""
    root = k8s_tree(tmp, ns, **values)
    path = root / "overlays" / overlay
    text = cp.kubectl("kustomize", str(path)).stdout
    docs = [d for d in yaml.safe_load_all(text) if d]
    namespace = next(d for d in docs if d["kind"] == "Namespace")
    cp.kubectl("apply", "--validate=strict", "-f", "-", input_text=yaml.safe_dump(namespace))
    dry = cp.kubectl("apply", "--dry-run=server", "--validate=strict", "-f", "-", input_text=text)
    assert "Warning" not in dry.stderr, dry.stderr
    res = apply_script(cp, path)
    assert "Warning" not in res.stderr, res.stderr
    return root, docs


def spec_versions(cp: ControlPlane, ns: str) -> dict[str, str]:
    """Each object's generation (bumped by spec changes only, not by controllers writing status),
    or where it has none (an HPA, whose status the controller rewrites) a digest of its spec or data."""
    import hashlib
    import json

    kinds = "jobs,statefulsets,deployments,services,configmaps,networkpolicies,pdb,hpa,serviceaccounts"
    out = {}
    for d in cp.get(kinds, ns)["items"]:
        body = json.dumps(d.get("spec", d.get("data")), sort_keys=True).encode()
        out[f"{d['kind']}/{d['metadata']['name']}"] = str(
            d["metadata"].get("generation", hashlib.sha256(body).hexdigest()[:16])
        )
    return out
