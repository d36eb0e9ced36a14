"""Node objects with the labels and taints that real node pools carry, and volumes for the claims.

No kubelet runs, so a node is an object whose status the test writes: Ready, with allocatable
CPU, memory and (GPU nodes) ``nvidia.com/gpu`` as the NVIDIA device plugin would advertise it.
The labels and taints are what each cloud puts there by itself:

- GKE GPU node pools: ``cloud.google.com/gke-accelerator`` and ``cloud.google.com/gke-nodepool``,
  tainted ``nvidia.com/gpu=present:NoSchedule`` by GKE; Google's driver installer, not NVIDIA's
  GPU operator, so no ``nvidia.com/gpu.present`` label.
- EKS managed node groups on the accelerated AMI: ``eks.amazonaws.com/nodegroup``,
  ``k8s.amazonaws.com/accelerator``, the plain device plugin, and **no taint**: anything may land
  there unless it is kept away.
- CPU nodes of either: instance type, zone, nodegroup labels only.
"""

from __future__ import annotations

import json

from tests.deploy.control_plane import ControlPlane

GPU_TAINT = {"key": "nvidia.com/gpu", "value": "present", "effect": "NoSchedule"}

NODES: dict[str, dict] = {
    "cpu-a": {
        "labels": {"node.kubernetes.io/instance-type": "e2-standard-16", "cloud.google.com/gke-nodepool": "default"}
    },
    "cpu-b": {"labels": {"node.kubernetes.io/instance-type": "m6i.4xlarge", "eks.amazonaws.com/nodegroup": "cpu"}},
    "gke-gpu": {
        "labels": {
            "node.kubernetes.io/instance-type": "a2-highgpu-8g",
            "cloud.google.com/gke-nodepool": "gpu-pool",
            "cloud.google.com/gke-accelerator": "nvidia-tesla-a100",
        },
        "taints": [GPU_TAINT],
        "gpus": 8,
    },
    "eks-gpu": {
        "labels": {
            "node.kubernetes.io/instance-type": "p4d.24xlarge",
            "eks.amazonaws.com/nodegroup": "gpu",
            "k8s.amazonaws.com/accelerator": "nvidia-tesla-a100",
        },
        "gpus": 8,
    },
}
GPU_NODES = frozenset(name for name, spec in NODES.items() if spec.get("gpus"))

# Storage classes a test names in values.yaml, and the pre-made volumes they bind to (no
# provisioner runs here; a claim binds to a free volume of its class and mode).
STORAGE_CLASSES = {
    "test-rwo": "ReadWriteOnce",
    "test-rwx": "ReadWriteMany",
    "test-rwo-b": "ReadWriteOnce",
    "test-rwx-b": "ReadWriteMany",
}


def add_nodes(cp: ControlPlane) -> None:
    """Creates every node of NODES, Ready, with the taints its cloud sets and nothing else."""
    for name, spec in NODES.items():
        labels = {"kubernetes.io/hostname": name, "kubernetes.io/os": "linux", "kubernetes.io/arch": "amd64"}
        node = {
            "apiVersion": "v1",
            "kind": "Node",
            "metadata": {"name": name, "labels": {**labels, **spec["labels"]}},
            "spec": {"taints": spec.get("taints", [])},
        }
        cp.kubectl("apply", "-f", "-", input_text=json.dumps(node))
        resources = {"cpu": "64", "memory": "512Gi", "pods": "110", "ephemeral-storage": "500Gi"}
        if spec.get("gpus"):
            resources["nvidia.com/gpu"] = str(spec["gpus"])
        status = {
            "status": {
                "capacity": resources,
                "allocatable": resources,
                "conditions": [{"type": "Ready", "status": "True", "reason": "KubeletReady", "message": "test"}],
            }
        }
        cp.kubectl("patch", "node", name, "--subresource=status", "--type=merge", "-p", json.dumps(status))
        # The admission chain taints a new node not-ready until its kubelet reports; none will.
        cp.kubectl("taint", "node", name, "node.kubernetes.io/not-ready:NoSchedule-", check=False)


def add_volumes(cp: ControlPlane, count: int) -> None:
    """The storage classes of STORAGE_CLASSES and ``count`` free NFS-backed volumes of each."""
    for cls, mode in STORAGE_CLASSES.items():
        sc = {
            "apiVersion": "storage.k8s.io/v1",
            "kind": "StorageClass",
            "metadata": {"name": cls},
            "provisioner": "kubernetes.io/no-provisioner",
            "volumeBindingMode": "Immediate",
            "allowVolumeExpansion": True,
        }
        cp.kubectl("apply", "-f", "-", input_text=json.dumps(sc))
        items = [
            {
                "apiVersion": "v1",
                "kind": "PersistentVolume",
                "metadata": {"name": f"{cls}-{i}"},
                "spec": {
                    "capacity": {"storage": "1Ti"},
                    "accessModes": [mode],
                    "storageClassName": cls,
                    "persistentVolumeReclaimPolicy": "Retain",
                    "nfs": {"server": "10.0.0.2", "path": f"/exports/{cls}-{i}"},
                },
            }
            for i in range(count)
        ]
        cp.kubectl("apply", "-f", "-", input_text=json.dumps({"apiVersion": "v1", "kind": "List", "items": items}))
