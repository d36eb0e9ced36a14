"""Changing values.yaml and re-applying through k8s/tools/apply.sh, the documented path, on the
real control plane (conftest.py's ``cp``): immutable fields re-created, the token
Secret made once and rotated."""

from __future__ import annotations

import base64
import os
import re
import subprocess

import pytest

from tests.deploy.cluster_apply import apply_script, deploy, set_values
from tests.deploy.control_plane import ControlPlane, missing_reason
from tests.deploy.tools import REPO

pytestmark = pytest.mark.skipif(missing_reason() is not None, reason=missing_reason() or "")


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
