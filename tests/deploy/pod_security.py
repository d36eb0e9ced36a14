"""The Pod Security Standards' ``restricted`` profile (which includes ``baseline``), as the API
server's PodSecurity admission checks it (policy version ``latest``, Kubernetes 1.29-1.37).

No API server can run here, so this is the rule list of
https://kubernetes.io/docs/concepts/security/pod-security-standards/ written out, one function
per control, each returning what it finds wrong. :func:`violations` runs them all on a pod
template; the tests run it on every pod of every overlay and on pods that break each rule.
"""

from __future__ import annotations

from collections.abc import Callable, Iterator

# baseline: capabilities a container may add (restricted narrows this to NET_BIND_SERVICE).
BASELINE_CAPABILITIES = {
    "AUDIT_WRITE",
    "CHOWN",
    "DAC_OVERRIDE",
    "FOWNER",
    "FSETID",
    "KILL",
    "MKNOD",
    "NET_BIND_SERVICE",
    "SETFCAP",
    "SETGID",
    "SETPCAP",
    "SETUID",
    "SYS_CHROOT",
}
SAFE_SYSCTLS = {
    "kernel.shm_rmid_forced",
    "net.ipv4.ip_local_port_range",
    "net.ipv4.ip_unprivileged_port_start",
    "net.ipv4.tcp_syncookies",
    "net.ipv4.ping_group_range",
    "net.ipv4.ip_local_reserved_ports",
    "net.ipv4.tcp_keepalive_time",
    "net.ipv4.tcp_fin_timeout",
    "net.ipv4.tcp_keepalive_intvl",
    "net.ipv4.tcp_keepalive_probes",
}
SELINUX_TYPES = {"", "container_t", "container_init_t", "container_kvm_t", "container_engine_t"}
# restricted: the only volume types allowed.
RESTRICTED_VOLUMES = {
    "configMap",
    "csi",
    "downwardAPI",
    "emptyDir",
    "ephemeral",
    "persistentVolumeClaim",
    "projected",
    "secret",
}
_VOLUME_META = {"name"}
_APPARMOR_ANNOTATION = "container.apparmor.security.beta.kubernetes.io/"

Pod = dict  # {"metadata": ..., "spec": ...}: a pod template


def _containers(spec: dict) -> Iterator[tuple[str, dict]]:
    for field in ("initContainers", "containers", "ephemeralContainers"):
        for c in spec.get(field, []):
            yield f"{field}[{c.get('name', '?')}]", c


def _sc(c: dict) -> dict:
    return c.get("securityContext") or {}


def host_process(pod: Pod) -> list[str]:
    spec = pod["spec"]
    bad = [] if not (spec.get("securityContext") or {}).get("windowsOptions", {}).get("hostProcess") else ["pod"]
    bad += [w for w, c in _containers(spec) if _sc(c).get("windowsOptions", {}).get("hostProcess")]
    return [f"{w}: windowsOptions.hostProcess must not be true" for w in bad]


def host_namespaces(pod: Pod) -> list[str]:
    return [f"spec.{f} must not be true" for f in ("hostNetwork", "hostPID", "hostIPC") if pod["spec"].get(f)]


def privileged(pod: Pod) -> list[str]:
    return [f"{w}: privileged must not be true" for w, c in _containers(pod["spec"]) if _sc(c).get("privileged")]


def baseline_capabilities(pod: Pod) -> list[str]:
    out = []
    for w, c in _containers(pod["spec"]):
        extra = set(_sc(c).get("capabilities", {}).get("add", [])) - BASELINE_CAPABILITIES
        if extra:
            out.append(f"{w}: capabilities.add {sorted(extra)} beyond the baseline set")
    return out


def host_path_volumes(pod: Pod) -> list[str]:
    return [f"volume {v['name']}: hostPath is forbidden" for v in pod["spec"].get("volumes", []) if "hostPath" in v]


def host_ports(pod: Pod) -> list[str]:
    return [
        f"{w}: hostPort {p['hostPort']}"
        for w, c in _containers(pod["spec"])
        for p in c.get("ports", [])
        if p.get("hostPort", 0)
    ]


def _apparmor_ok(profile: dict | None) -> bool:
    return profile is None or profile.get("type") in ("RuntimeDefault", "Localhost")


def apparmor(pod: Pod) -> list[str]:
    spec, out = pod["spec"], []
    if not _apparmor_ok((spec.get("securityContext") or {}).get("appArmorProfile")):
        out.append("pod: appArmorProfile must be RuntimeDefault or Localhost")
    out += [
        f"{w}: appArmorProfile must be RuntimeDefault or Localhost"
        for w, c in _containers(spec)
        if not _apparmor_ok(_sc(c).get("appArmorProfile"))
    ]
    for key, value in (pod.get("metadata") or {}).get("annotations", {}).items():
        if key.startswith(_APPARMOR_ANNOTATION) and not (value == "runtime/default" or value.startswith("localhost/")):
            out.append(f"annotation {key}={value}")
    return out


def _selinux_ok(opts: dict | None) -> bool:
    return opts is None or (opts.get("type", "") in SELINUX_TYPES and "user" not in opts and "role" not in opts)


def selinux(pod: Pod) -> list[str]:
    spec = pod["spec"]
    out = [] if _selinux_ok((spec.get("securityContext") or {}).get("seLinuxOptions")) else ["pod: seLinuxOptions"]
    out += [f"{w}: seLinuxOptions" for w, c in _containers(spec) if not _selinux_ok(_sc(c).get("seLinuxOptions"))]
    return [f"{x} not allowed (type outside {sorted(SELINUX_TYPES)}, or user/role set)" for x in out]


def proc_mount(pod: Pod) -> list[str]:
    return [
        f"{w}: procMount must be Default"
        for w, c in _containers(pod["spec"])
        if _sc(c).get("procMount", "Default") != "Default"
    ]


def sysctls(pod: Pod) -> list[str]:
    found = (pod["spec"].get("securityContext") or {}).get("sysctls", [])
    return [f"sysctl {s['name']} is not in the safe set" for s in found if s["name"] not in SAFE_SYSCTLS]


def volume_types(pod: Pod) -> list[str]:
    out = []
    for v in pod["spec"].get("volumes", []):
        kinds = set(v) - _VOLUME_META
        if not kinds <= RESTRICTED_VOLUMES:
            out.append(f"volume {v['name']}: type {sorted(kinds - RESTRICTED_VOLUMES)} not allowed")
    return out


def privilege_escalation(pod: Pod) -> list[str]:
    return [
        f"{w}: allowPrivilegeEscalation must be false"
        for w, c in _containers(pod["spec"])
        if _sc(c).get("allowPrivilegeEscalation") is not False
    ]


def run_as_non_root(pod: Pod) -> list[str]:
    pod_value = (pod["spec"].get("securityContext") or {}).get("runAsNonRoot")
    out = []
    for w, c in _containers(pod["spec"]):
        value = _sc(c).get("runAsNonRoot", pod_value)
        if value is not True:
            out.append(f"{w}: runAsNonRoot must be true (pod or container)")
    return out


def run_as_user(pod: Pod) -> list[str]:
    out = ["pod: runAsUser must not be 0"] if (pod["spec"].get("securityContext") or {}).get("runAsUser") == 0 else []
    return out + [f"{w}: runAsUser must not be 0" for w, c in _containers(pod["spec"]) if _sc(c).get("runAsUser") == 0]


def seccomp(pod: Pod) -> list[str]:
    allowed = ("RuntimeDefault", "Localhost")
    pod_type = (pod["spec"].get("securityContext") or {}).get("seccompProfile", {}).get("type")
    out = ["pod: seccompProfile Unconfined"] if pod_type == "Unconfined" else []
    for w, c in _containers(pod["spec"]):
        t = _sc(c).get("seccompProfile", {}).get("type", pod_type)
        if t not in allowed:
            out.append(f"{w}: seccompProfile.type must be RuntimeDefault or Localhost (pod or container), got {t}")
    return out


def restricted_capabilities(pod: Pod) -> list[str]:
    out = []
    for w, c in _containers(pod["spec"]):
        caps = _sc(c).get("capabilities", {})
        if "ALL" not in caps.get("drop", []):
            out.append(f"{w}: capabilities.drop must include ALL")
        if set(caps.get("add", [])) - {"NET_BIND_SERVICE"}:
            out.append(f"{w}: capabilities.add may only hold NET_BIND_SERVICE")
    return out


BASELINE: list[Callable[[Pod], list[str]]] = [
    host_process,
    host_namespaces,
    privileged,
    baseline_capabilities,
    host_path_volumes,
    host_ports,
    apparmor,
    selinux,
    proc_mount,
    seccomp,
    sysctls,
]
RESTRICTED: list[Callable[[Pod], list[str]]] = [
    *BASELINE,
    volume_types,
    privilege_escalation,
    run_as_non_root,
    run_as_user,
    restricted_capabilities,
]


def violations(pod: Pod) -> list[str]:
    """Everything in ``pod`` (a pod template: metadata + spec) that ``restricted`` forbids."""
    return [f"{check.__name__}: {v}" for check in dict.fromkeys(RESTRICTED) for v in check(pod)]


def pod_templates(doc: dict) -> Iterator[tuple[str, Pod]]:
    """Every pod template in a rendered object: workloads, CronJobs, Kubeflow PyTorchJobs."""
    kind, name, spec = doc["kind"], doc["metadata"]["name"], doc.get("spec") or {}
    if kind == "Pod":
        yield f"Pod/{name}", doc
    elif kind == "CronJob":
        yield f"CronJob/{name}", spec["jobTemplate"]["spec"]["template"]
    elif kind == "PyTorchJob":
        for role, rs in spec.get("pytorchReplicaSpecs", {}).items():
            yield f"PyTorchJob/{name}/{role}", rs["template"]
    elif "template" in spec and "spec" in spec["template"]:
        yield f"{kind}/{name}", spec["template"]
