"""A real Kubernetes control plane on loopback: etcd, kube-apiserver, kube-controller-manager and
kube-scheduler, with no kubelet (nothing runs; pods are admitted, created by their controllers
and scheduled onto Node objects the test makes).

The binaries are the gzip-compressed v1.36.2 builds in ``../shared/kube/bin`` (or
``$GRAPHFEED_KUBE_DIR/bin``) with the CRDs the manifests use in ``crds/``; etcd is Debian's
``etcd-server`` (scripts/install_ci_tools.sh installs it). Where the binaries are absent the
tests that need them skip and say so. Every port is a free loopback port and every process is
stopped by its PID, so runs cannot collide.
"""

from __future__ import annotations

import gzip
import hashlib
import json
import os
import secrets
import shutil
import subprocess
import time
from collections.abc import Callable
from pathlib import Path
from typing import TypeVar

import pytest
import yaml

from tests.deploy.k8s_objects import free_port
from tests.deploy.tools import REPO, tool
from tests.pki import issue, make_ca, openssl

T = TypeVar("T")

BINARIES = ("kube-apiserver", "kube-controller-manager", "kube-scheduler")


def kube_dir() -> Path:
    """Where the control-plane binaries and CRDs are (``$GRAPHFEED_KUBE_DIR`` or ../shared/kube)."""
    return Path(os.environ.get("GRAPHFEED_KUBE_DIR", REPO.parent / "shared" / "kube"))


def missing_reason() -> str | None:
    """Why the control plane cannot start here, or None when it can."""
    src = kube_dir()
    absent = [b for b in BINARIES if not (src / "bin" / f"{b}.gz").exists()]
    if absent:
        return f"no kube control-plane binaries ({', '.join(absent)}) in {src}/bin (set GRAPHFEED_KUBE_DIR)"
    return None


def _binaries(cache: Path) -> dict[str, Path]:
    """The decompressed binaries, cached outside the clone and keyed by the archives' sizes and times."""
    src = kube_dir() / "bin"
    stamp = "".join(f"{b}:{(src / f'{b}.gz').stat().st_size}:{(src / f'{b}.gz').stat().st_mtime_ns}" for b in BINARIES)
    out = cache / f"kube-{hashlib.sha256(stamp.encode()).hexdigest()[:12]}"
    if not (out / ".ok").exists():
        out.mkdir(parents=True, exist_ok=True)
        for b in BINARIES:
            with gzip.open(src / f"{b}.gz") as fin, open(out / b, "wb") as fout:
                shutil.copyfileobj(fin, fout)
            (out / b).chmod(0o755)
        (out / ".ok").touch()
    return {b: out / b for b in BINARIES}


def _pki(d: Path) -> None:
    """A CA, the apiserver's serving certificate for 127.0.0.1, and the service-account key pair."""
    make_ca(d, "ca.crt")
    issue(d, "apiserver", "ca.crt", cn="kube-apiserver", loopback=True, cert="apiserver.crt")
    openssl("genrsa", "-out", "sa.key", "2048", cwd=d)
    openssl("rsa", "-in", "sa.key", "-pubout", "-out", "sa.pub", cwd=d)


def _kubeconfig(path: Path, server: str, ca: Path, token: str) -> None:
    path.write_text(
        yaml.safe_dump(
            {
                "apiVersion": "v1",
                "kind": "Config",
                "clusters": [{"name": "t", "cluster": {"server": server, "certificate-authority": str(ca)}}],
                "users": [{"name": "u", "user": {"token": token}}],
                "contexts": [{"name": "t", "context": {"cluster": "t", "user": "u"}}],
                "current-context": "t",
            }
        )
    )


class ControlPlane:
    """etcd + kube-apiserver + kube-controller-manager + kube-scheduler under ``root``."""

    def __init__(self, root: Path, cache: Path) -> None:
        self.root = root
        self.bins = _binaries(cache)
        self.procs: list[tuple[str, subprocess.Popen]] = []
        self.kubeconfig = root / "admin.kubeconfig"

    # -- lifecycle ---------------------------------------------------------------------------
    @classmethod
    def started(cls, make_root: Callable[[], Path], cache: Path, attempts: int = 3) -> ControlPlane:
        """A started control plane. A start that fails is retried on fresh ports: a port that
        was free when picked can be taken before etcd or the apiserver binds it (busy machines
        run many servers)."""
        for attempt in range(1, attempts + 1):
            plane = cls(make_root(), cache)
            try:
                plane.start()
                return plane
            except pytest.fail.Exception as exc:
                plane.stop()
                if attempt == attempts:
                    raise
                print(f"control plane start {attempt} failed, retrying on fresh ports: {exc}")
        raise AssertionError("unreachable")

    def start(self, *, ready_timeout_s: float = 240.0) -> None:
        pki = self.root / "pki"
        pki.mkdir(parents=True)
        _pki(pki)
        tokens = {who: secrets.token_hex(16) for who in ("admin", "kcm", "scheduler")}
        (pki / "tokens.csv").write_text(
            f'{tokens["admin"]},admin,admin,"system:masters"\n'
            f"{tokens['kcm']},system:kube-controller-manager,kcm\n"
            f"{tokens['scheduler']},system:kube-scheduler,scheduler\n"
        )
        client, peer, secure = free_port(), free_port(), free_port()
        server = f"https://127.0.0.1:{secure}"
        _kubeconfig(self.kubeconfig, server, pki / "ca.crt", tokens["admin"])
        _kubeconfig(self.root / "kcm.kubeconfig", server, pki / "ca.crt", tokens["kcm"])
        _kubeconfig(self.root / "sched.kubeconfig", server, pki / "ca.crt", tokens["scheduler"])
        etcd = shutil.which("etcd")
        if etcd is None:
            pytest.fail("etcd is not installed: run `scripts/install_ci_tools.sh` (Debian etcd-server)", pytrace=False)
        self._spawn(
            "etcd",
            [
                etcd,
                "--name",
                "t",
                "--data-dir",
                str(self.root / "etcd"),
                "--listen-client-urls",
                f"http://127.0.0.1:{client}",
                "--advertise-client-urls",
                f"http://127.0.0.1:{client}",
                "--listen-peer-urls",
                f"http://127.0.0.1:{peer}",
                "--initial-advertise-peer-urls",
                f"http://127.0.0.1:{peer}",
                "--initial-cluster",
                f"t=http://127.0.0.1:{peer}",
            ],
        )
        self._spawn(
            "kube-apiserver",
            [
                str(self.bins["kube-apiserver"]),
                f"--etcd-servers=http://127.0.0.1:{client}",
                "--bind-address=127.0.0.1",
                "--advertise-address=127.0.0.1",
                f"--secure-port={secure}",
                f"--tls-cert-file={pki / 'apiserver.crt'}",
                f"--tls-private-key-file={pki / 'apiserver.key'}",
                f"--client-ca-file={pki / 'ca.crt'}",
                f"--token-auth-file={pki / 'tokens.csv'}",
                "--authorization-mode=Node,RBAC",
                "--service-account-issuer=https://kubernetes.default.svc.cluster.local",
                f"--service-account-key-file={pki / 'sa.pub'}",
                f"--service-account-signing-key-file={pki / 'sa.key'}",
                "--service-cluster-ip-range=10.96.0.0/16",
                "--allow-privileged=false",
            ],
        )
        self._wait(
            lambda: self.kubectl("get", "--raw", "/readyz", check=False).returncode == 0, ready_timeout_s, "/readyz"
        )
        self._spawn(
            "kube-controller-manager",
            [
                str(self.bins["kube-controller-manager"]),
                f"--kubeconfig={self.root / 'kcm.kubeconfig'}",
                "--bind-address=127.0.0.1",
                f"--secure-port={free_port()}",
                f"--service-account-private-key-file={pki / 'sa.key'}",
                f"--root-ca-file={pki / 'ca.crt'}",
                "--leader-elect=false",
                "--use-service-account-credentials=true",
                "--controllers=*,-nodelifecycle,-cloud-node-lifecycle",
            ],
        )
        self._spawn(
            "kube-scheduler",
            [
                str(self.bins["kube-scheduler"]),
                f"--kubeconfig={self.root / 'sched.kubeconfig'}",
                "--bind-address=127.0.0.1",
                f"--secure-port={free_port()}",
                "--leader-elect=false",
            ],
        )
        crds = sorted(str(p) for p in (kube_dir() / "crds").glob("*.yaml"))
        self.kubectl("apply", "--server-side", *(a for c in crds for a in ("-f", c)))
        self.kubectl("wait", "--for=condition=Established", "crd", "--all", "--timeout=120s")
        # The default service account exists once the controller-manager's token controller ran.
        self._wait(
            lambda: self.kubectl("get", "serviceaccount", "default", "-n", "default", check=False).returncode == 0,
            ready_timeout_s,
            "the controller-manager",
        )

    def stop(self) -> None:
        for _, proc in reversed(self.procs):
            if proc.poll() is None:
                proc.terminate()
        for _, proc in reversed(self.procs):
            try:
                proc.wait(timeout=20)
            except subprocess.TimeoutExpired:
                proc.kill()
                proc.wait(timeout=10)

    def _spawn(self, name: str, cmd: list[str]) -> None:
        log = open(self.root / f"{name}.log", "wb")  # noqa: SIM115 - closed with the process
        # setpriv --pdeathsig: the process dies with the test session even when that is killed
        # (no fixture teardown). Not a preexec_fn: Python code between fork and exec in a process
        # with threads (gRPC's, in a test session) can hang there.
        setpriv = shutil.which("setpriv")
        wrapped = [setpriv, "--pdeathsig", "TERM", "--", *cmd] if setpriv else cmd
        proc = subprocess.Popen(wrapped, stdout=log, stderr=subprocess.STDOUT, cwd=self.root)
        self.procs.append((name, proc))

    def _wait(self, ready: Callable[[], bool], timeout_s: float, what: str) -> None:
        deadline = time.monotonic() + timeout_s
        while not ready():
            for name, proc in self.procs:
                if proc.poll() is not None:
                    pytest.fail(f"{name} exited {proc.returncode}:\n{self.log_tail(name)}", pytrace=False)
            if time.monotonic() > deadline:
                pytest.fail(f"{what} not ready within {timeout_s:.0f}s", pytrace=False)
            time.sleep(0.5)

    def log_tail(self, name: str, n: int = 4000) -> str:
        return (self.root / f"{name}.log").read_text(errors="replace")[-n:]

    # -- client ------------------------------------------------------------------------------
    def kubectl(
        self, *args: str, input_text: str | None = None, check: bool = True, timeout_s: float = 180.0
    ) -> subprocess.CompletedProcess:
        """Runs kubectl against this cluster; with ``check`` a non-zero exit fails the test."""
        cmd = [tool("kubectl"), f"--kubeconfig={self.kubeconfig}", *args]
        res = subprocess.run(cmd, capture_output=True, text=True, input=input_text, timeout=timeout_s)
        if check and res.returncode != 0:
            pytest.fail(
                f"kubectl {' '.join(args)} exited {res.returncode}:\n{res.stdout[-4000:]}\n{res.stderr[-4000:]}"
            )
        return res

    def get(self, kind: str, namespace: str | None = None, name: str = "") -> dict:
        args = ["get", kind, *([name] if name else []), "-o", "json"]
        if namespace:
            args += ["-n", namespace]
        return json.loads(self.kubectl(*args).stdout)

    def wait_for(self, probe: Callable[[], T | None], timeout_s: float, what: str, interval_s: float = 1.0) -> T:
        """Polls ``probe()`` until it returns something truthy (returned); fails the test after ``timeout_s``."""
        deadline = time.monotonic() + timeout_s
        while True:
            got = probe()
            if got:
                return got
            if time.monotonic() > deadline:
                pytest.fail(f"{what}: not within {timeout_s:.0f}s", pytrace=False)
            time.sleep(interval_s)
