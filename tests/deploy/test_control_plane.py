"""The manifests against a real control plane (kube-apiserver, controller-manager, scheduler v1.36.2).

What decides here is the real server: admission with Pod Security ``restricted`` enforced,
strict field validation, immutable fields on re-apply, the Job/StatefulSet/Deployment
controllers creating the pods they really create, and the scheduler placing them on Node
objects with the labels and taints of GKE and EKS GPU and CPU node pools
(tests/deploy/cloud_nodes.py). Each overlay goes to its own namespace so that nothing left by
one test (pods stay Terminating without a kubelet) can affect another.
"""

from __future__ import annotations

import os
import re
import shutil
import subprocess
import threading
from collections.abc import Iterator
from pathlib import Path

import pytest
import yaml

from tests.deploy.cloud_nodes import GPU_NODES, NODES, add_nodes, add_volumes
from tests.deploy.control_plane import ControlPlane, missing_reason
from tests.deploy.tools import REPO

pytestmark = pytest.mark.skipif(missing_reason() is not None, reason=missing_reason() or "")

OVERLAYS = ("cpu", "gpu", "gpu-embedded", "gpu-packed", "gpu-pytorchjob")
TEST_VALUES = {"storageClass": "test-rwo", "sharedStorageClass": "test-rwx"}
CPU_ROLES = ("ingest", "graph-store", "sampler", "pack")


@pytest.fixture(scope="module")
def cp(tmp_path_factory: pytest.TempPathFactory) -> Iterator[ControlPlane]:
    plane = ControlPlane.started(lambda: tmp_path_factory.mktemp("control-plane"), Path.home() / ".cache" / "graphfeed")
    try:
        add_nodes(plane)
        add_volumes(plane, 80)
        stop = threading.Event()
        kubelet = threading.Thread(target=_stand_in_kubelet, args=(plane, stop), daemon=True)
        kubelet.start()
        yield plane
        stop.set()
        kubelet.join(timeout=30)
    finally:
        plane.stop()


def _stand_in_kubelet(cp: ControlPlane, stop: threading.Event) -> None:
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


@pytest.mark.parametrize("overlay", OVERLAYS)
def test_overlay_is_admitted_and_every_pod_its_controllers_create_is_scheduled(
    cp: ControlPlane, tmp_path_factory: pytest.TempPathFactory, overlay: str
) -> None:
    ns = f"gf-{overlay}"
    _, docs = deploy(cp, tmp_path_factory.mktemp(overlay), overlay, ns)
    want = expected_pods(docs)

    def created() -> dict[str, list[dict]] | None:
        got = pods_by_component(cp, ns)
        ok = all(len(got.get(c, [])) == n for c, n in want.items())
        scheduled = all(p["spec"].get("nodeName") for pods in got.values() for p in pods)
        return got if ok and scheduled else None

    pods = cp.wait_for(created, 180, f"{overlay}: pods {want} created and scheduled (warnings: {warnings(cp, ns)})")
    assert not warnings(cp, ns), warnings(cp, ns)
    for comp, plist in pods.items():
        for pod in plist:
            node = pod["spec"]["nodeName"]
            gpu = "nvidia.com/gpu" in str(pod["spec"]["containers"][0].get("resources", {}))
            if comp == "trainer" and overlay != "cpu":
                assert gpu and node in GPU_NODES, f"{pod['metadata']['name']} on {node}"
            else:
                assert node not in GPU_NODES, f"{comp} pod {pod['metadata']['name']} landed on GPU node {node}"


@pytest.mark.parametrize("cloud", ["gke-gpu", "eks-gpu"])
def test_trainers_land_on_each_clouds_gpu_nodes_and_nothing_else_does(
    cp: ControlPlane, tmp_path_factory: pytest.TempPathFactory, cloud: str
) -> None:
    """Only ``cloud``'s GPU node pool is schedulable: every trainer goes there, and the CPU
    roles never do (GKE taints its GPU nodes; EKS managed node groups do not)."""
    others = sorted(GPU_NODES - {cloud})
    ns = f"gf-{cloud}"
    for node in others:
        cp.kubectl("cordon", node)
    try:
        _, docs = deploy(cp, tmp_path_factory.mktemp(cloud), "gpu", ns)
        want = expected_pods(docs)

        def placed() -> dict[str, list[dict]] | None:
            got = pods_by_component(cp, ns)
            ok = all(
                len(got.get(c, [])) == n and all(p["spec"].get("nodeName") for p in got[c]) for c, n in want.items()
            )
            return got if ok else None

        pods = cp.wait_for(placed, 180, f"gpu overlay on {cloud}: every pod scheduled ({warnings(cp, ns)})")
    finally:
        for node in others:
            cp.kubectl("uncordon", node)
    assert {p["spec"]["nodeName"] for p in pods["trainer"]} == {cloud}
    cpu_nodes = set(NODES) - GPU_NODES
    for comp in CPU_ROLES:
        assert {p["spec"]["nodeName"] for p in pods.get(comp, [])} <= cpu_nodes, comp


def spec_versions(cp: ControlPlane, ns: str) -> dict[str, str]:
    """Each object's generation (bumped by spec changes only, not by controllers writing status),
    or its resourceVersion where it has none."""
    kinds = "jobs,statefulsets,deployments,services,configmaps,networkpolicies,pdb,hpa,serviceaccounts"
    items = cp.get(kinds, ns)["items"]
    return {
        f"{d['kind']}/{d['metadata']['name']}": str(d["metadata"].get("generation", d["metadata"]["resourceVersion"]))
        for d in items
    }


def test_applying_unchanged_manifests_again_changes_nothing(
    cp: ControlPlane, tmp_path_factory: pytest.TempPathFactory
) -> None:
    """No object changes on the server, `kubectl diff` is empty, and kubectl reports every object
    unchanged except PodDisruptionBudgets: their selector has the patch strategy "replace", so
    client-side apply always sends it and prints "configured" for a patch the server finds empty."""
    root, _ = deploy(cp, tmp_path_factory.mktemp("twice"), "gpu-packed", "gf-twice")
    text = cp.kubectl("kustomize", str(root / "overlays/gpu-packed")).stdout
    cp.wait_for(lambda: pods_by_component(cp, "gf-twice").get("trainer"), 120, "trainer pods")
    before = spec_versions(cp, "gf-twice")
    again = cp.kubectl("apply", "-f", "-", input_text=text).stdout.strip().splitlines()
    changed = [line for line in again if not line.endswith(" unchanged") and not line.startswith("poddisruptionbudget")]
    assert not changed, f"a second apply of the same manifests changed: {changed}"
    assert spec_versions(cp, "gf-twice") == before
    res = apply_script(cp, root / "overlays/gpu-packed")
    assert res.stdout.strip() == "no change: the cluster already matches " + str(root / "overlays/gpu-packed")
    # k8s/monitoring renders no workload: applying it must not delete the workloads.
    apply_script(cp, root / "monitoring")
    after = spec_versions(cp, "gf-twice")
    assert {k: after.get(k) for k in before} == before
    diff = cp.kubectl("diff", "-f", "-", input_text=text, check=False)
    assert diff.returncode == 0, f"kubectl diff after apply:\n{diff.stdout[-3000:]}"


def operator_pod(job: dict, index: int, *, with_master: bool) -> dict:
    """The Worker pod Kubeflow's training-operator (v1, release-1.9) builds from a PyTorchJob:
    the replica template, its labels, the replica's restartPolicy, PYTHONUNBUFFERED on every
    container and, when the job has a Master, the ``init-pytorch`` container it prepends to
    every Worker to wait for the Master's DNS name (an alpine image with no securityContext)."""
    import copy

    spec = job["spec"]["pytorchReplicaSpecs"]["Worker"]
    template = copy.deepcopy(spec["template"])
    name = job["metadata"]["name"]
    labels = {
        **template.get("metadata", {}).get("labels", {}),
        "training.kubeflow.org/job-name": name,
        "training.kubeflow.org/operator-name": "pytorchjob-controller",
        "training.kubeflow.org/replica-type": "worker",
        "training.kubeflow.org/replica-index": str(index),
    }
    pod_spec = template["spec"]
    pod_spec["restartPolicy"] = spec.get("restartPolicy", "OnFailure")
    for c in pod_spec["containers"]:
        c.setdefault("env", []).append({"name": "PYTHONUNBUFFERED", "value": "1"})
    if with_master:
        wait = (
            f"err=1; for i in $(seq 100); do if nslookup {name}-master-0; then err=0 && break; fi; sleep 2; done; "
            "exit $err"
        )
        init = {
            "name": "init-pytorch",
            "image": "alpine:3.10",
            "command": ["sh", "-c", wait],
            "resources": {"limits": {"cpu": "100m", "memory": "20Mi"}, "requests": {"cpu": "50m", "memory": "10Mi"}},
        }
        pod_spec["initContainers"] = [init, *pod_spec.get("initContainers", [])]
    meta = {"name": f"{name}-worker-{index}", "namespace": job["metadata"]["namespace"], "labels": labels}
    return {"apiVersion": "v1", "kind": "Pod", "metadata": meta, "spec": pod_spec}


def test_the_pytorchjob_operators_worker_pods_are_admitted_and_land_on_gpu_nodes(
    cp: ControlPlane, tmp_path_factory: pytest.TempPathFactory
) -> None:
    import json

    ns = "gf-operator"
    _, docs = deploy(cp, tmp_path_factory.mktemp("operator"), "gpu-pytorchjob", ns)
    (job,) = [d for d in docs if d["kind"] == "PyTorchJob"]
    assert "Master" not in job["spec"]["pytorchReplicaSpecs"], "a Master makes the operator inject init-pytorch"
    workers = int(job["spec"]["pytorchReplicaSpecs"]["Worker"]["replicas"])
    for i in range(workers):
        cp.kubectl("create", "-f", "-", input_text=json.dumps(operator_pod(job, i, with_master=False)))
    # What the operator would build with a Master: the server refuses it (the reason there is none).
    bad = operator_pod(job, workers, with_master=True)
    res = cp.kubectl("create", "-f", "-", input_text=json.dumps(bad), check=False)
    assert res.returncode != 0 and "PodSecurity" in res.stderr and "init-pytorch" in res.stderr, res.stderr

    def placed() -> list[dict] | None:
        pods = [p for p in cp.get("pods", ns)["items"] if p["metadata"]["name"].startswith("trainer-worker-")]
        return pods if len(pods) == workers and all(p["spec"].get("nodeName") for p in pods) else None

    pods = cp.wait_for(placed, 120, "the operator's worker pods scheduled")
    assert {p["spec"]["nodeName"] for p in pods} <= GPU_NODES


# (what changes, values.yaml fields): each step is applied with k8s/tools/apply.sh, the
# documented path, and must leave the live objects equal to the manifests (kubectl diff).
VALUE_STEPS: list[tuple[str, dict[str, object]]] = [
    ("images", {"image": "registry.example/gf:0.2.0", "cudaImage": "registry.example/gf:0.2.0-cuda"}),
    ("counts", {"partitions": 3, "trainers": 3}),
    (
        "shared sizes (claims grow in place)",
        {"graphSourceStorage": "30Gi", "checkpointStorage": "4Gi", "packsStorage": "60Gi"},
    ),
    (
        "partition size and class (the StatefulSet's claim template)",
        {"partitionStorage": "20Gi", "storageClass": "test-rwo-b"},
    ),
    (
        "resources, autoscaling, probes, placement, monitoring namespace",
        {
            "resources": {
                **{
                    k: {"requests": {"cpu": "2", "memory": "3Gi"}, "limits": {"cpu": "3", "memory": "6Gi"}}
                    for k in ("ingest", "stagePartition", "graphStore", "sampler", "loader", "trainer", "pack")
                },
            },
            "samplerReplicas": {"min": 2, "max": 4},
            "startupChecks": 360,
            "cpuNodeAffinity": {
                "nodeAffinity": {
                    "requiredDuringSchedulingIgnoredDuringExecution": {
                        "nodeSelectorTerms": [
                            {
                                "matchExpressions": [
                                    {"key": "nvidia.com/gpu.present", "operator": "DoesNotExist"},
                                    {"key": "example.com/gpu-pool", "operator": "DoesNotExist"},
                                ]
                            }
                        ]
                    }
                }
            },
            "gpuTolerations": [
                {"key": "nvidia.com/gpu", "operator": "Exists", "effect": "NoSchedule"},
                {"key": "dedicated", "operator": "Equal", "value": "ml", "effect": "NoSchedule"},
            ],
            "monitoringNamespace": "observability",
        },
    ),
]


def test_changing_each_value_and_reapplying_follows_the_documented_path(
    cp: ControlPlane, tmp_path_factory: pytest.TempPathFactory
) -> None:
    ns = "gf-values"
    tmp = tmp_path_factory.mktemp("values")
    root, _ = deploy(cp, tmp, "gpu-packed", ns)
    overlay = root / "overlays/gpu-packed"
    changed: dict = {}
    for what, values in VALUE_STEPS:
        changed.update(values)
        set_values(root, changed)
        plain = cp.kubectl("apply", "-k", str(overlay), check=False)
        res = apply_script(cp, overlay)
        assert "Warning" not in res.stderr, f"{what}: {res.stderr}"
        text = cp.kubectl("kustomize", str(overlay)).stdout
        diff = cp.kubectl("diff", "-f", "-", input_text=text, check=False)
        assert diff.returncode == 0, f"{what}: live objects differ from the manifests:\n{diff.stdout[-3000:]}"
        if what in ("images", "counts", "partition size and class (the StatefulSet's claim template)"):
            refused = plain.stderr + plain.stdout
            assert plain.returncode != 0 and ("immutable" in refused or "Forbidden" in refused), f"{what}: {refused}"
    live = cp.get("statefulset", ns, "graph-store")
    assert live["spec"]["replicas"] == 3
    assert live["spec"]["volumeClaimTemplates"][0]["spec"]["storageClassName"] == "test-rwo-b"

    # A shared claim's class cannot change in place: refused with the reason, then done on request.
    changed["sharedStorageClass"] = "test-rwx-b"
    set_values(root, changed)
    refused = apply_script(cp, overlay, check=False)
    assert refused.returncode != 0 and "--recreate-volumes" in refused.stderr, refused.stderr
    apply_script(cp, overlay, "--recreate-volumes")
    claims = {c["metadata"]["name"]: c["spec"].get("storageClassName") for c in cp.get("pvc", ns)["items"]}
    assert {claims[n] for n in ("graph-source", "trainer-checkpoints", "graph-packs")} == {"test-rwx-b"}, claims

    # Switching overlays: what the new one does not have is deleted, claims stay.
    apply_script(cp, root / "overlays/gpu-pytorchjob")
    names = {f"{d['kind']}/{d['metadata']['name']}" for d in cp.get("jobs,networkpolicies,services,pvc", ns)["items"]}
    assert "Job/trainer" not in names and "Job/pack" not in names and "NetworkPolicy/pack" not in names, names
    assert "PersistentVolumeClaim/graph-packs" in names
    assert cp.get("pytorchjobs", ns, "trainer")["spec"]["pytorchReplicaSpecs"]["Worker"]["replicas"] == 3


def test_the_token_secret_is_made_once_by_apply_and_replaced_by_rotation(
    cp: ControlPlane, tmp_path_factory: pytest.TempPathFactory
) -> None:
    """Every pod mounts Secret/graphfeed-auth, so none runs unauthenticated; apply.sh creates it
    with a random token on the first apply and keeps it after; rotate-token.sh replaces it."""
    import base64

    ns = "gf-auth"
    root, docs = deploy(cp, tmp_path_factory.mktemp("auth"), "cpu", ns)
    for w in (d for d in docs if d["kind"] in ("Job", "StatefulSet", "Deployment")):
        if w["metadata"]["name"] == "ingest":
            continue  # reads files only: no gRPC
        secrets = {v["secret"]["secretName"] for v in w["spec"]["template"]["spec"]["volumes"] if "secret" in v}
        assert secrets == {"graphfeed-auth"}, w["metadata"]["name"]

    def tokens() -> list[str]:
        data = cp.get("secret", ns, "graphfeed-auth")["data"]["tokens"]
        return base64.b64decode(data).decode().split()

    first = tokens()
    assert len(first) == 1 and re.fullmatch(r"[0-9a-f]{64}", first[0])
    apply_script(cp, root / "overlays/cpu")
    assert tokens() == first
    env = {**os.environ, "KUBECONFIG": str(cp.kubeconfig)}
    rotate = [str(REPO / "k8s/tools/rotate-token.sh"), ns, "--settle", "0"]
    subprocess.run(rotate, check=True, capture_output=True, env=env, timeout=120)
    second = tokens()
    assert len(second) == 1 and second != first and re.fullmatch(r"[0-9a-f]{64}", second[0])
