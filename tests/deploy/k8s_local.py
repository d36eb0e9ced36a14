"""Runs the pods of a rendered overlay as local processes on loopback.

Each container's command (the image ENTRYPOINT from docker/Dockerfile unless ``command`` is
set), args, env (envFrom ConfigMaps, literal values, downward-API fields, ``$(VAR)``
expansion) and ports are taken from the manifests, as the kubelet would. Only what cannot
exist on one machine is mapped:

- every containerPort gets a free loopback port; ``<service>:<port>`` and
  ``<pod>.<service>:<port>`` in args and env become ``127.0.0.1:<that port>``; an env
  ``*_HOST`` or ``*_ADDR`` that is 0.0.0.0 or a cluster DNS name becomes 127.0.0.1; a
  ``*_PORT`` equal to one of the pod's containerPorts becomes its loopback port (a ``*_PORT``
  next to a ``*_ADDR`` follows the pod that address names, as MASTER_ADDR/MASTER_PORT do);
- every volume is a directory under the cluster's root (one per PVC, per volumeClaimTemplate
  and pod, per emptyDir), and mount paths in args and env are rewritten to it;
- readiness is the container's gRPC readinessProbe, asked as the kubelet would.
"""

from __future__ import annotations

import os
import re
import signal
import socket
import subprocess
import sys
import time
from collections.abc import Sequence
from dataclasses import dataclass, field
from pathlib import Path

import grpc
from grpc_health.v1 import health_pb2, health_pb2_grpc

from tests.deploy.manifests import Rendered, container_ports, dockerfile_entrypoint, pod_spec, service_selects

_VAR = re.compile(r"\$\$|\$\(([A-Za-z_][A-Za-z0-9_.-]*)\)")
_HOSTPORT = re.compile(r"(?<![\w.-])([a-z0-9](?:[a-z0-9.-]*[a-z0-9])?):(\d{1,5})(?![\w])")
_FIELD_KEY = re.compile(r"^metadata\.(labels|annotations)\['(.+)'\]$")


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
                f"{name}-{i}", workload,
                {**labels, "statefulset.kubernetes.io/pod-name": f"{name}-{i}", "apps.kubernetes.io/pod-index": str(i)},
                annotations, f"{name}-{i}", workload["spec"]["serviceName"], i,
            )
            for i in range(int(workload["spec"].get("replicas", 1)))
        ]
    if kind == "Job" and workload["spec"].get("completionMode") == "Indexed":
        return [
            LocalPod(
                f"{name}-{i}", workload,
                {**labels, "batch.kubernetes.io/job-completion-index": str(i)},
                {**annotations, "batch.kubernetes.io/job-completion-index": str(i)},
                f"{name}-{i}", spec.get("subdomain"), i,
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


class LocalCluster:
    """The pods of one rendered overlay, started on demand as local processes."""

    def __init__(self, rendered: Rendered, root: Path) -> None:
        self.rendered = rendered
        self.root = root
        self.namespace = rendered.namespace
        self.pods: dict[str, list[LocalPod]] = {w["metadata"]["name"]: _pods_of(w) for w in rendered.workloads()}
        for pod in self.all_pods():
            for c in [*pod.spec.get("initContainers", []), *pod.spec["containers"]]:
                for port in container_ports(c).values():
                    pod.ports.setdefault(port, free_port())
        self.entrypoint = dockerfile_entrypoint()
        self.procs: list[Proc] = []

    def all_pods(self) -> list[LocalPod]:
        return [p for pods in self.pods.values() for p in pods]

    # --- name resolution -------------------------------------------------------------
    def _dns_names(self) -> dict[str, tuple[LocalPod, dict[int, int]]]:
        """DNS name -> (pod, service port -> containerPort), for every Service and pod record."""
        ns = self.namespace
        names: dict[str, tuple[LocalPod, dict[int, int]]] = {}

        def add(short: str, pod: LocalPod, portmap: dict[int, int]) -> None:
            for suffix in ("", f".{ns}", f".{ns}.svc", f".{ns}.svc.cluster.local"):
                names[short + suffix] = (pod, portmap)

        for svc in self.rendered.of_kind("Service"):
            selected = [p for p in self.all_pods() if service_selects(svc, p.labels)]
            if not selected:
                continue
            svc_name = svc["metadata"]["name"]
            pod = selected[0]
            portmap = {int(sp["port"]): self._target_port(pod, sp.get("targetPort", sp["port"])) for sp in svc["spec"]["ports"]}
            add(svc_name, pod, portmap)
            for p in selected:  # <hostname>.<subdomain> records of a headless Service
                if p.subdomain == svc_name:
                    add(f"{p.hostname}.{svc_name}", p, {port: port for port in p.ports})
        return names

    @staticmethod
    def _target_port(pod: LocalPod, target: int | str) -> int:
        if isinstance(target, int):
            return target
        for c in pod.spec["containers"]:
            if target in container_ports(c):
                return container_ports(c)[target]
        raise AssertionError(f"pod {pod.name} has no port named {target!r}")

    def resolve(self, host: str, port: int) -> str:
        """Loopback address of ``host:port`` as seen from inside the cluster."""
        pod, portmap = self._dns_names()[host]
        return f"127.0.0.1:{pod.ports[portmap[port]]}"

    def address(self, workload: str, port_name: str = "grpc") -> str:
        """Loopback address of the first pod of ``workload``'s named port."""
        pod = self.pods[workload][0]
        return f"127.0.0.1:{pod.ports[self._target_port(pod, port_name)]}"

    # --- turning a container into a process --------------------------------------------
    def _volumes(self, pod: LocalPod) -> dict[str, Path]:
        out: dict[str, Path] = {}
        for v in pod.spec.get("volumes", []):
            if "persistentVolumeClaim" in v:
                out[v["name"]] = self.root / "pvc" / v["persistentVolumeClaim"]["claimName"]
            elif "emptyDir" in v:
                out[v["name"]] = self.root / "pods" / pod.name / v["name"]
            elif "hostPath" in v:  # one emulated node: every pod that mounts a host path shares it
                assert v["hostPath"].get("type") in ("Directory", "DirectoryOrCreate"), f"hostPath {v} is not a directory"
                out[v["name"]] = self.root / "node" / v["hostPath"]["path"].strip("/")
            else:
                raise AssertionError(f"volume kind of {v} is not emulated")
        for t in pod.workload["spec"].get("volumeClaimTemplates", []):
            out[t["metadata"]["name"]] = self.root / "pvc" / f"{t['metadata']['name']}-{pod.name}"
        for path in out.values():
            path.mkdir(parents=True, exist_ok=True)
        return out

    def _field(self, pod: LocalPod, path: str) -> str:
        m = _FIELD_KEY.match(path)
        if m:
            src = pod.labels if m.group(1) == "labels" else pod.annotations
            assert m.group(2) in src, f"pod {pod.name} has no {m.group(1)[:-1]} {m.group(2)!r} for the downward API"
            return src[m.group(2)]
        simple = {"metadata.name": pod.name, "metadata.namespace": self.namespace, "status.podIP": "127.0.0.1"}
        assert path in simple, f"downward API field {path} is not emulated"
        return simple[path]

    def _env(self, pod: LocalPod, c: dict) -> dict[str, str]:
        env: dict[str, str] = {}
        if pod.ordinal is not None and pod.workload["kind"] == "Job":
            env["JOB_COMPLETION_INDEX"] = str(pod.ordinal)
        for src in c.get("envFrom", []):
            env.update(self.rendered.configmap_data(src["configMapRef"]["name"]))
        for e in c.get("env", []):
            if "value" in e:
                env[e["name"]] = expand(e["value"], env)
            elif "fieldRef" in e.get("valueFrom", {}):
                env[e["name"]] = self._field(pod, e["valueFrom"]["fieldRef"]["fieldPath"])
            else:
                raise AssertionError(f"env source of {e} is not emulated")
        return env

    def _rewrite(self, text: str, mounts: list[tuple[str, Path]]) -> str:
        names = self._dns_names()

        def hostport(m: re.Match) -> str:
            host, port = m.group(1), int(m.group(2))
            return self.resolve(host, port) if host in names else m.group(0)

        text = _HOSTPORT.sub(hostport, text)
        if mounts:  # one pass, longest mount path first, so a rewritten path is not rewritten again
            by_path = dict(mounts)
            alternatives = "|".join(re.escape(m) for m, _ in mounts)
            pattern = rf"(?<![\w/.-])({alternatives})(?=/|$|[^\w.-])"
            text = re.sub(pattern, lambda m: str(by_path[m.group(1)]), text)
        return text

    def _local_env(self, pod: LocalPod, env: dict[str, str], mounts: list[tuple[str, Path]]) -> dict[str, str]:
        out = {k: self._rewrite(v, mounts) for k, v in env.items()}
        names = self._dns_names()
        for k, v in env.items():
            if k.endswith(("_HOST", "_ADDR")) and (v == "0.0.0.0" or v in names):  # noqa: S104 - a comparison, not a bind
                out[k] = "127.0.0.1"
            elif k.endswith("_PORT") and v.isdigit():
                addr = env.get(k[: -len("_PORT")] + "_ADDR")
                owner = names[addr][0] if addr in names else pod
                if int(v) in owner.ports:
                    out[k] = str(owner.ports[int(v)])
        return out

    def command(self, pod: LocalPod, c: dict) -> tuple[list[str], dict[str, str], Path]:
        """The local argv, environment and working directory of container ``c`` of ``pod``."""
        vols = self._volumes(pod)
        mounts = sorted(
            ((m["mountPath"].rstrip("/"), vols[m["name"]] / m.get("subPath", "")) for m in c.get("volumeMounts", [])),
            key=lambda t: -len(t[0]),
        )
        env = self._env(pod, c)
        argv = [expand(a, env) for a in [*(c.get("command") or self.entrypoint), *(c.get("args") or [])]]
        argv = [self._rewrite(a, mounts) for a in argv]
        argv = [*self._executable(argv[0]), *argv[1:]]
        home = dict(mounts).get("/tmp", self.root / "pods" / pod.name / "home")
        home.mkdir(parents=True, exist_ok=True)
        # The image's environment stands in as PATH/HOME; PYTHONPATH passes through so that a
        # source tree other than the installed one can be run.
        base = {"PATH": os.environ["PATH"], "HOME": str(home), "LANG": "C.UTF-8"}
        if "PYTHONPATH" in os.environ:
            base["PYTHONPATH"] = os.environ["PYTHONPATH"]
        local_env = {**base, **self._local_env(pod, env, mounts)}
        return argv, local_env, home

    @staticmethod
    def _executable(name: str) -> list[str]:
        if name == "graphfeed":
            return [sys.executable, "-m", "graphfeed"]
        if name in ("/bin/sh", "sh"):
            return ["/bin/sh"]
        raise AssertionError(f"container command {name!r} has no local equivalent")

    # --- running -------------------------------------------------------------------------
    def _spawn(self, pod: LocalPod, c: dict, extra_args: Sequence[str] = ()) -> Proc:
        argv, env, cwd = self.command(pod, c)
        log = self.root / "logs" / f"{pod.name}.{c['name']}.log"
        log.parent.mkdir(parents=True, exist_ok=True)
        with open(log, "wb") as out:  # the child keeps its own descriptor
            popen = subprocess.Popen([*argv, *extra_args], env=env, cwd=cwd, stdout=out, stderr=subprocess.STDOUT)
        proc = Proc(pod, c["name"], popen, log)
        self.procs.append(proc)
        return proc

    def _run_to_completion(self, pod: LocalPod, c: dict, timeout_s: float, extra_args: Sequence[str] = ()) -> Proc:
        proc = self._spawn(pod, c, extra_args)
        try:
            code = proc.popen.wait(timeout_s)
        except subprocess.TimeoutExpired:
            proc.popen.kill()
            proc.popen.wait()
            raise AssertionError(f"{pod.name}/{c['name']} did not finish within {timeout_s:.0f}s:\n{proc.tail()}") from None
        assert code == 0, f"{pod.name}/{c['name']} exited {code}:\n{proc.tail()}"
        return proc

    def run_job(self, name: str, timeout_s: float = 180.0, extra_args: Sequence[str] = ()) -> list[Proc]:
        """Runs every pod of Job ``name`` (in parallel, as ``parallelism`` allows) to exit 0."""
        pods = self.pods[name]
        for pod in pods:
            for c in pod.spec.get("initContainers", []):
                self._run_to_completion(pod, c, timeout_s)
        procs = [self._spawn(pod, c, extra_args) for pod in pods for c in pod.spec["containers"]]
        deadline = time.monotonic() + timeout_s
        for proc in procs:
            try:
                code = proc.popen.wait(max(0.1, deadline - time.monotonic()))
            except subprocess.TimeoutExpired:
                for p in procs:
                    p.popen.kill()
                raise AssertionError(f"job {name}: {proc.pod.name} did not finish within {timeout_s:.0f}s:\n{proc.tail()}") from None
            assert code == 0, f"job {name}: {proc.pod.name}/{proc.container} exited {code}:\n{proc.tail()}"
        return procs

    def start(self, name: str, timeout_s: float = 120.0) -> None:
        """Starts workload ``name``: init containers to completion, then the containers until
        their gRPC readinessProbe reports SERVING."""
        for pod in self.pods[name]:
            for c in pod.spec.get("initContainers", []):
                self._run_to_completion(pod, c, timeout_s)
            for c in pod.spec["containers"]:
                self._wait_ready(self._spawn(pod, c), c, timeout_s)

    def _wait_ready(self, proc: Proc, c: dict, timeout_s: float) -> None:
        probe = c.get("readinessProbe", {}).get("grpc")
        assert probe is not None, f"{proc.pod.name}/{c['name']} has no gRPC readinessProbe"
        address = f"127.0.0.1:{proc.pod.ports[int(probe['port'])]}"
        deadline = time.monotonic() + timeout_s
        with grpc.insecure_channel(address) as channel:
            stub = health_pb2_grpc.HealthStub(channel)
            while True:
                if proc.popen.poll() is not None:
                    raise AssertionError(f"{proc.pod.name}/{c['name']} exited {proc.popen.returncode}:\n{proc.tail()}")
                try:
                    req = health_pb2.HealthCheckRequest(service=probe.get("service", ""))
                    if stub.Check(req, timeout=1.0).status == health_pb2.HealthCheckResponse.SERVING:
                        return
                except grpc.RpcError:
                    pass
                if time.monotonic() > deadline:
                    raise AssertionError(f"{proc.pod.name}/{c['name']} not SERVING after {timeout_s:.0f}s:\n{proc.tail()}")
                time.sleep(0.1)

    def stop(self) -> dict[str, int]:
        """SIGTERM to every running process (last started first), SIGKILL after the pod's
        terminationGracePeriodSeconds; returns each process's exit code."""
        codes: dict[str, int] = {}
        for proc in reversed(self.procs):
            if proc.popen.poll() is None:
                proc.popen.send_signal(signal.SIGTERM)
                grace = float(proc.pod.spec.get("terminationGracePeriodSeconds", 30))
                try:
                    proc.popen.wait(grace)
                except subprocess.TimeoutExpired:
                    proc.popen.kill()
                    proc.popen.wait()
            codes[f"{proc.pod.name}/{proc.container}"] = proc.popen.returncode
        return codes
