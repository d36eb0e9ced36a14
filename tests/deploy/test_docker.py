"""docker/: hadolint on the Dockerfile; the real image build (podman + debootstrap) is the
`container` test, run only with GRAPHFEED_CONTAINER_TESTS=1."""

from __future__ import annotations

import re
import shutil
import subprocess
from pathlib import Path

import pytest

from tests.deploy.manifests import Rendered, pod_spec
from tests.deploy.tools import REPO, check, run, tool

DOCKERFILE = REPO / "docker/Dockerfile"
IMAGE = "localhost/graphfeed:0.1.0"


def test_hadolint_is_clean() -> None:
    out = check([tool("hadolint"), "--failure-threshold", "style", str(DOCKERFILE)], timeout_s=60)
    assert out.strip() == ""


def test_dockerfile_layout() -> None:
    """Multi-stage, pinned dependencies before the source, non-root, exec-form entrypoint."""
    text = DOCKERFILE.read_text()
    stages = re.findall(r"^FROM\s", text, flags=re.M)
    assert len(stages) >= 2
    lines = text.splitlines()
    idx = {
        k: next(i for i, line in enumerate(lines) if line.startswith(k))
        for k in ("COPY requirements.lock", "COPY services")
    }
    assert idx["COPY requirements.lock"] < idx["COPY services"]
    final = text[text.rindex("\nFROM ") :]
    assert re.search(r"^USER 10001:10001$", final, flags=re.M)
    assert re.search(r'^ENTRYPOINT \["graphfeed"\]$', final, flags=re.M)
    ignore = (REPO / ".dockerignore").read_text().splitlines()
    assert ignore[ignore.index("*") + 1 :][:1] and "!services/" in ignore


@pytest.mark.container
@pytest.mark.timeout(3600)
def test_image_builds_and_a_graph_store_container_turns_healthy(rendered: dict[str, Rendered], tmp_path: Path) -> None:
    tool("podman")
    tool("debootstrap")
    res = run([str(REPO / "docker/build.sh")], timeout_s=3500)
    log = res.stdout + res.stderr
    assert res.returncode == 0, log[-8000:]
    assert "health check: SERVING" in log and "exit status 0" in log, log[-4000:]
    # The graph-store init container's script (sh, printf, cmp, cp from the image) stages
    # partition 1 for a pod with ordinal 1.
    sts = rendered["cpu"].get("StatefulSet", "graph-store")
    (init,) = pod_spec(sts)["initContainers"]
    source, partition = tmp_path / "source", tmp_path / "partition"
    (source / "graph" / "part-00001").mkdir(parents=True)
    (source / "graph" / "part-00001" / "manifest.json").write_text('{"partition_id": 1}')
    partition.mkdir()
    for d in (source, partition):
        d.chmod(0o777)
    mounts = {m["name"]: m["mountPath"] for m in init["volumeMounts"]}
    podman = [tool("podman"), *(["--runtime", "runc"] if shutil.which("runc") else [])]
    cmd = [
        *podman,
        "run",
        "--rm",
        "--read-only",
        "--user",
        "10001:10001",
        "--cap-drop",
        "ALL",
        "--network",
        "none",
        "--ulimit",
        "nofile=4096:4096",
        "--ulimit",
        "nproc=4096:4096",
        "-e",
        "POD_INDEX=1",
        "-v",
        f"{source}:{mounts['source']}:ro",
        "-v",
        f"{partition}:{mounts['partition']}",
        "--entrypoint",
        init["command"][0],
        IMAGE,
        *init["command"][1:],
        *init["args"],
    ]
    out = subprocess.run(cmd, capture_output=True, text=True, timeout=120)
    assert out.returncode == 0, out.stdout + out.stderr
    assert "staged part-00001" in out.stdout
    assert (partition / "current" / "manifest.json").read_text() == '{"partition_id": 1}'
