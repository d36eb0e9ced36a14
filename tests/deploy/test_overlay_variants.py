"""The overlays built on the gpu one: the trainers as a Kubeflow PyTorchJob (gpu-pytorchjob), and
DiskGNN's pack Job feeding the loader sidecars (gpu-packed)."""

from __future__ import annotations

import json
import re

from tests.deploy.manifests import Rendered, args_flag, containers, pod_spec, static_env
from tests.deploy.test_manifests import PACKED, PYTORCHJOB, _volume


def test_pytorchjob_runs_the_gpu_trainer_pod_under_the_training_operator(rendered: dict[str, Rendered]) -> None:
    """Workers only (issue 27): with a Master replica the operator adds an init container with no
    securityContext to every Worker, which Pod Security restricted rejects. The pod is the gpu
    trainer Job's, renamed as the operator expects, and names its own rank and rendezvous."""
    r, gpu = rendered[PYTORCHJOB], rendered["gpu"]
    assert r.find("Job", "trainer") is None and r.find("Service", "trainer") is None
    ptj = r.get("PyTorchJob", "trainer")
    assert set(ptj["spec"]["pytorchReplicaSpecs"]) == {"Worker"}, "a Master brings the operator's init container"
    job = gpu.get("Job", "trainer")
    reference = json.loads(json.dumps(job["spec"]["template"]))
    del reference["spec"]["subdomain"]
    ref_trainer = reference["spec"]["containers"][0]
    ref_trainer["name"], ref_trainer["ports"][0]["name"] = "pytorch", "pytorchjob-port"
    env = {e["name"]: e for e in ref_trainer["env"]}
    env["RANK"] = {"name": "RANK", "valueFrom": {"fieldRef": {"fieldPath": REPLICA_INDEX}}}
    env["MASTER_ADDR"]["value"] = "trainer-worker-0"  # the operator's Service of worker 0
    env["OMP_NUM_THREADS"]["valueFrom"]["resourceFieldRef"]["containerName"] = "pytorch"
    ref_trainer["env"] = list(env.values())
    workers = ptj["spec"]["pytorchReplicaSpecs"]["Worker"]
    assert workers["template"] == reference
    assert workers["replicas"] == job["spec"]["completions"] == int(env["WORLD_SIZE"]["value"])  # values.yaml trainers
    assert "initContainers" in workers["template"]["spec"]  # the loader sidecar, ours


REPLICA_INDEX = "metadata.labels['training.kubeflow.org/replica-index']"


def test_the_pack_job_packs_exactly_the_trainers_job(rendered: dict[str, Rendered]) -> None:
    """The packs are found by the job's key: batch size, fanouts, seed, split and world size must
    be the trainer's, and every loader sidecar must read the volume the Job writes."""
    r = rendered[PACKED]
    job = r.get("Job", "trainer")
    (trainer,) = containers(job, init=False)
    (loader,) = pod_spec(job)["initContainers"]
    (pack,) = containers(r.get("Job", "pack"))
    script = pack["args"][0]
    env = {e["name"]: e.get("value") for e in pack["env"]}
    trainer_env = {e["name"]: e.get("value") for e in trainer["env"]}
    assert env["WORLD_SIZE"] == trainer_env["WORLD_SIZE"]
    assert f"--batch-size {args_flag(trainer['args'], '--batch-size')}" in script
    assert (
        "--fanouts 10,10" in script and args_flag(trainer["args"], "--fanouts") is None
    )  # the trainer's default 10 10
    assert "--job-seed 0" in script and args_flag(trainer["args"], "--seed") is None  # the trainer's default seed
    out = re.search(r"--out (\S+)", script)
    assert out is not None
    assert static_env(r, loader)["GRAPHFEED_LOADER_PACK_ROOT"] == out.group(1)
    mounts = {m["name"]: m for m in loader["volumeMounts"]}
    assert mounts["packs"]["mountPath"] == out.group(1) and mounts["packs"]["readOnly"] is True
    assert _volume(pod_spec(job), "packs")["persistentVolumeClaim"]["claimName"] == "graph-packs"
    resident = re.search(r"--resident-bytes (\d+)", script)
    assert resident is not None and resident.group(1) == static_env(r, loader)["GRAPHFEED_LOADER_CACHE_BYTES"]
