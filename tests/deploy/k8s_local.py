"""Runs the pods of a rendered overlay as local processes on loopback.

Each container's command (the image ENTRYPOINT from docker/Dockerfile unless ``command`` is
set), args, env (envFrom ConfigMaps, literal values, downward-API fields, ``$(VAR)``
expansion) and ports are taken from the manifests, as the kubelet would. Only what cannot
exist on one machine is mapped:

- every containerPort gets a free loopback port (also where a ``--*-port`` flag names it); ``<service>:<port>`` and
  ``<pod>.<service>:<port>`` in args and env become ``127.0.0.1:<that port>``; an env
  ``*_HOST`` or ``*_ADDR`` that is 0.0.0.0 or a cluster DNS name becomes 127.0.0.1; a
  ``*_PORT`` equal to one of the pod's containerPorts becomes its loopback port (a ``*_PORT``
  next to a ``*_ADDR`` follows the pod that address names, as MASTER_ADDR/MASTER_PORT do);
- every volume is a directory under the cluster's root (one per PVC, per volumeClaimTemplate
  and pod, per emptyDir), and mount paths in args and env are rewritten to it;
- ``127.0.0.1:<containerPort>`` (a container reaching a sidecar in its own pod) becomes that
  port's loopback port; a ``{p}`` address template (``graph-store-{p}.graph-store:50051``)
  becomes the list of the pods it names, since every pod here listens on 127.0.0.1;
- readiness is the container's gRPC startupProbe (else readinessProbe), asked as the kubelet
  would; native sidecars (init containers with ``restartPolicy: Always``) start first and
  must pass it before the pod's containers start, as the kubelet does.
"""

from __future__ import annotations

import math
import os
import re
import secrets
import signal
import subprocess
import sys
import time
from collections.abc import Sequence
from pathlib import Path

import grpc
from grpc_health.v1 import health_pb2, health_pb2_grpc

from tests.deploy.k8s_objects import LocalPod, Proc, _pods_of, expand, free_port
from tests.deploy.manifests import Rendered, container_ports, dockerfile_entrypoint, service_selects

_HOSTPORT = re.compile(r"(?<![\w.-])([a-z0-9](?:[a-z0-9.-]*[a-z0-9])?):(\d{1,5})(?![\w])")
_FIELD_KEY = re.compile(r"^metadata\.(labels|annotations)\['(.+)'\]$")
_LOOPBACK = re.compile(r"(?<![\w.-])(?:127\.0\.0\.1|localhost):(\d{1,5})(?![\w])")
_TEMPLATE = re.compile(r"(\"?)([a-z0-9-]*)\{p\}([a-z0-9.-]*):(\d{1,5})(\"?)")


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
        self.sidecars: dict[str, list[Proc]] = {}  # pod name -> its running native sidecars
        # The Secret k8s/tools/apply.sh creates before the pods can start: a random bearer token
        # that every graphfeed server accepts and every client sends (tests call with it too).
        self.token = secrets.token_hex(32)
        auth = root / "secrets" / "graphfeed-auth"
        auth.mkdir(parents=True)
        (auth / "tokens").write_text(self.token)

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
            portmap = {
                int(sp["port"]): self._target_port(pod, sp.get("targetPort", sp["port"])) for sp in svc["spec"]["ports"]
            }
            add(svc_name, pod, portmap)
            for p in selected:  # <hostname>.<subdomain> records of a headless Service
                if p.subdomain == svc_name:
                    add(f"{p.hostname}.{svc_name}", p, {port: port for port in p.ports})
        return names

    @staticmethod
    def _target_port(pod: LocalPod, target: int | str) -> int:
        if isinstance(target, int):
            return target
        for c in [*pod.spec.get("initContainers", []), *pod.spec["containers"]]:
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
            elif "secret" in v:  # made by k8s/tools/apply.sh, not by the manifests: see secrets()
                out[v["name"]] = self.root / "secrets" / v["secret"]["secretName"]
            elif "hostPath" in v:  # one emulated node: every pod that mounts a host path shares it
                assert v["hostPath"].get("type") in ("Directory", "DirectoryOrCreate"), (
                    f"hostPath {v} is not a directory"
                )
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
            elif "resourceFieldRef" in e.get("valueFrom", {}):
                env[e["name"]] = _resource_field(pod, c, e["valueFrom"]["resourceFieldRef"])
            else:
                raise AssertionError(f"env source of {e} is not emulated")
        return env

    def _expand_template(self, m: re.Match) -> str:
        """``graph-store-{p}.graph-store:50051`` -> the loopback addresses of every pod it names
        (joined as the surrounding text lists them: JSON strings or a comma-separated flag)."""
        quote, head, tail, port = m.group(1), m.group(2), m.group(3), int(m.group(4))
        names, found = self._dns_names(), list[str]()
        while f"{head}{len(found)}{tail}" in names:
            found.append(self.resolve(f"{head}{len(found)}{tail}", port))
        assert found, f"no pod is named by the address template {m.group(0)}"
        return quote + (f"{quote},{quote}" if quote else ",").join(found) + m.group(5)

    def _rewrite(self, text: str, mounts: list[tuple[str, Path]], pod: LocalPod | None = None) -> str:
        names = self._dns_names()

        def hostport(m: re.Match) -> str:
            host, port = m.group(1), int(m.group(2))
            return self.resolve(host, port) if host in names else m.group(0)

        def loopback(m: re.Match) -> str:
            port = int(m.group(1))
            return f"127.0.0.1:{pod.ports[port]}" if pod is not None and port in pod.ports else m.group(0)

        text = _LOOPBACK.sub(loopback, text)  # first: the others write loopback addresses
        text = _TEMPLATE.sub(self._expand_template, text)
        text = _HOSTPORT.sub(hostport, text)
        if mounts:  # one pass, longest mount path first, so a rewritten path is not rewritten again
            by_path = dict(mounts)
            alternatives = "|".join(re.escape(m) for m, _ in mounts)
            pattern = rf"(?<![\w/.-])({alternatives})(?=/|$|[^\w.-])"
            text = re.sub(pattern, lambda m: str(by_path[m.group(1)]), text)
        return text

    def _local_env(self, pod: LocalPod, env: dict[str, str], mounts: list[tuple[str, Path]]) -> dict[str, str]:
        out = {k: self._rewrite(v, mounts, pod) for k, v in env.items()}
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
        argv = [self._rewrite(a, mounts, pod) for a in argv]
        # A port flag naming one of the pod's containerPorts (``--metrics-port 8081``) binds its loopback port.
        argv = [
            str(pod.ports[int(a)]) if i and argv[i - 1].endswith("-port") and a.isdigit() and int(a) in pod.ports else a
            for i, a in enumerate(argv)
        ]
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
            raise AssertionError(
                f"{pod.name}/{c['name']} did not finish within {timeout_s:.0f}s:\n{proc.tail()}"
            ) from None
        assert code == 0, f"{pod.name}/{c['name']} exited {code}:\n{proc.tail()}"
        return proc

    def _start_pod(self, pod: LocalPod, timeout_s: float) -> None:
        """Init containers in order, as the kubelet runs them: a plain one to completion, a
        native sidecar (``restartPolicy: Always``) started and left running once its probe passes."""
        if pod.name in self.sidecars:
            return
        self.sidecars[pod.name] = []
        for c in pod.spec.get("initContainers", []):
            if c.get("restartPolicy") == "Always":
                proc = self._spawn(pod, c)
                self._wait_ready(proc, c, timeout_s)
                self.sidecars[pod.name].append(proc)
            else:
                self._run_to_completion(pod, c, timeout_s)

    def _stop_sidecars(self, pod: LocalPod) -> None:
        """The kubelet ends a pod's sidecars (SIGTERM, in reverse order) once its containers exit."""
        for proc in reversed(self.sidecars.pop(pod.name, [])):
            proc.popen.send_signal(signal.SIGTERM)
            code = proc.popen.wait(float(pod.spec.get("terminationGracePeriodSeconds", 30)))
            assert code == 0, f"sidecar {pod.name}/{proc.container} exited {code} on SIGTERM:\n{proc.tail()}"

    def run_job(self, name: str, timeout_s: float = 180.0, extra_args: Sequence[str] = ()) -> list[Proc]:
        """Runs every pod of Job ``name`` (in parallel, as ``parallelism`` allows) to exit 0.
        Sidecars this call starts are stopped after the containers exit; sidecars started
        before by :meth:`start` keep running (their metrics stay scrapeable)."""
        pods = self.pods[name]
        started_here = [pod for pod in pods if pod.name not in self.sidecars]
        for pod in pods:
            self._start_pod(pod, timeout_s)
        procs = [self._spawn(pod, c, extra_args) for pod in pods for c in pod.spec["containers"]]
        deadline = time.monotonic() + timeout_s
        for proc in procs:
            try:
                code = proc.popen.wait(max(0.1, deadline - time.monotonic()))
            except subprocess.TimeoutExpired:
                for p in procs:
                    p.popen.kill()
                raise AssertionError(
                    f"job {name}: {proc.pod.name} did not finish within {timeout_s:.0f}s:\n{proc.tail()}"
                ) from None
            assert code == 0, f"job {name}: {proc.pod.name}/{proc.container} exited {code}:\n{proc.tail()}"
        for pod in started_here:
            self._stop_sidecars(pod)
        return procs

    def start(self, name: str, timeout_s: float = 120.0) -> None:
        """Starts workload ``name``: init containers (sidecars until ready), then the containers
        until their gRPC probe reports SERVING. A Job's containers are :meth:`run_job`'s: here
        a Job only gets its sidecars (the trainer pods' loaders)."""
        for pod in self.pods[name]:
            self._start_pod(pod, timeout_s)
            if pod.workload["kind"] == "Job":
                continue
            for c in pod.spec["containers"]:
                self._wait_ready(self._spawn(pod, c), c, timeout_s)

    def _wait_ready(self, proc: Proc, c: dict, timeout_s: float) -> None:
        probe = (c.get("startupProbe") or c.get("readinessProbe") or {}).get("grpc")
        assert probe is not None, f"{proc.pod.name}/{c['name']} has no gRPC startupProbe or readinessProbe"
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
                    raise AssertionError(
                        f"{proc.pod.name}/{c['name']} not SERVING after {timeout_s:.0f}s:\n{proc.tail()}"
                    )
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


def _resource_field(pod: LocalPod, c: dict, ref: dict) -> str:
    """The downward API's ``resourceFieldRef`` as the kubelet answers it: ``limits.cpu`` in
    whole cores rounded up (divisor 1), this machine's cores when the container sets no limit."""
    assert ref.get("resource") == "limits.cpu" and str(ref.get("divisor", "1")) == "1", f"{ref} is not emulated"
    name = ref.get("containerName", c["name"])
    spec = pod.spec
    (target,) = [x for x in (*spec.get("initContainers", []), *spec["containers"]) if x["name"] == name]
    limit = target.get("resources", {}).get("limits", {}).get("cpu")
    if limit is None:
        return str(os.cpu_count() or 1)
    cores = float(limit[:-1]) / 1000 if str(limit).endswith("m") else float(limit)
    return str(math.ceil(cores))
