"""The manifests against a real control plane (kube-apiserver, controller-manager, scheduler v1.36.2).

What decides here is the real server: admission with Pod Security ``restricted`` enforced,
strict field validation, the Job/StatefulSet/Deployment controllers creating the pods they
really create, and the scheduler placing them on Node objects with the labels and taints of GKE
and EKS GPU and CPU node pools (tests/deploy/cloud_nodes.py). Each overlay goes to its own
namespace so that nothing left by one test can affect another. Changing values and re-applying:
test_apply_values.py.
"""

from __future__ import annotations

import json

import pytest

from tests.deploy.cloud_nodes import GPU_NODES, NODES
from tests.deploy.cluster_apply import (
    CPU_ROLES,
    OVERLAYS,
    apply_script,
    deploy,
    expected_pods,
    pods_by_component,
    spec_versions,
    warnings,
)
from tests.deploy.control_plane import ControlPlane, missing_reason

pytestmark = pytest.mark.skipif(missing_reason() is not None, reason=missing_reason() or "")


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
