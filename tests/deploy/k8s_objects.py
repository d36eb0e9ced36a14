"""What the API server and kubelet would make of a rendered workload, for k8s_local: its pods
(names, labels, annotations, ordinals), ``$(VAR)`` expansion, free loopback ports, processes."""

from __future__ import annotations

import re
import socket
import subprocess
from dataclasses import dataclass, field
from pathlib import Path

from tests.deploy.manifests import pod_spec

_VAR = re.compile(r"\$\$|\$\(([A-Za-z_][A-Za-z0-9_.-]*)\)")


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


def expand(text: str, env: dict[str, str]) -> str:
    """Kubernetes ``$(VAR)`` expansion: ``$$`` is ``$``; an unknown ``$(NAME)`` stays as it is."""

    def sub(m: re.Match) -> str:
        if m.group(0) == "$$":
            return "$"
        name = m.group(1)
        return env[name] if name in env else m.group(0)

    return _VAR.sub(sub, text)


@dataclass
class LocalPod:
    """One pod of a workload: its identity as the API server would give it."""

    name: str
    workload: dict
    labels: dict[str, str]
    annotations: dict[str, str]
    hostname: str
    subdomain: str | None
    ordinal: int | None = None
    ports: dict[int, int] = field(default_factory=dict)  # containerPort -> loopback port

    @property
    def spec(self) -> dict:
        return pod_spec(self.workload)


def _pods_of(workload: dict) -> list[LocalPod]:
    kind, name = workload["kind"], workload["metadata"]["name"]
    tmpl = workload["spec"]["template"]
    labels = dict(tmpl["metadata"].get("labels", {}))
    annotations = dict(tmpl["metadata"].get("annotations", {}))
    spec = tmpl["spec"]
    if kind == "StatefulSet":
        return [
            LocalPod(
                f"{name}-{i}",
                workload,
                {**labels, "statefulset.kubernetes.io/pod-name": f"{name}-{i}", "apps.kubernetes.io/pod-index": str(i)},
                annotations,
                f"{name}-{i}",
                workload["spec"]["serviceName"],
                i,
            )
            for i in range(int(workload["spec"].get("replicas", 1)))
        ]
    if kind == "Job" and workload["spec"].get("completionMode") == "Indexed":
        return [
            LocalPod(
                f"{name}-{i}",
                workload,
                {**labels, "batch.kubernetes.io/job-completion-index": str(i)},
                {**annotations, "batch.kubernetes.io/job-completion-index": str(i)},
                f"{name}-{i}",
                spec.get("subdomain"),
                i,
            )
            for i in range(int(workload["spec"]["completions"]))
        ]
    # Deployment, DaemonSet, plain Job: one pod stands for all of them.
    return [LocalPod(f"{name}-0", workload, labels, annotations, f"{name}-0", spec.get("subdomain"))]


@dataclass
class Proc:
    """A running container process with its log."""

    pod: LocalPod
    container: str
    popen: subprocess.Popen
    log: Path

    def tail(self, n: int = 4000) -> str:
        return self.log.read_text(errors="replace")[-n:]
