"""The external tools the deploy tests run, found where scripts/install_ci_tools.sh puts them.

A missing tool fails the test with the command that installs it; every call has a timeout.
"""

from __future__ import annotations

import shutil
import subprocess
from functools import cache
from pathlib import Path

import pytest

REPO = Path(__file__).resolve().parents[2]
INSTALL = "scripts/install_ci_tools.sh"

# tool -> where it lives: "system" (PATH, Debian packages) or a path under the tools directory.
TOOLS = {
    "kubectl": "system",
    "promtool": "system",
    "prometheus": "system",
    "podman": "system",
    "debootstrap": "system",
    "kubernetes-validate": "venv/bin/kubernetes-validate",
    "checkov": "venv/bin/checkov",
    "hadolint": "venv/bin/hadolint",
    "grpcurl": "venv/bin/grpcurl",
    "buf": "node/node_modules/.bin/buf",
    "tsc": "node/node_modules/.bin/tsc",
}


@cache
def tools_dir() -> Path:
    """The directory install_ci_tools.sh installs the PyPI and npm tools into."""
    out = subprocess.run([str(REPO / INSTALL), "--where"], capture_output=True, text=True, timeout=30, check=True)
    return Path(out.stdout.strip())


def tool(name: str) -> str:
    """Absolute path of ``name``; fails the test (not skips) when it is not installed."""
    where = TOOLS[name]
    if where == "system":
        path = shutil.which(name)
        if path is None:
            extra = "GRAPHFEED_CONTAINER_TESTS=1 " if name in ("podman", "debootstrap") else ""
            pytest.fail(f"{name} is not installed: run `{extra}{INSTALL}` (Debian package)", pytrace=False)
        return path
    local = tools_dir() / where
    if not local.exists():
        pytest.fail(f"{name} is not installed ({local} missing): run `{INSTALL}`", pytrace=False)
    return str(local)


def node_modules() -> Path:
    """The node_modules directory holding @grafana/schema and typescript."""
    tool("tsc")
    return tools_dir() / "node" / "node_modules"


def run(
    cmd: list[str], *, timeout_s: float, cwd: Path | None = None, input_text: str | None = None
) -> subprocess.CompletedProcess:
    """Runs a tool with a timeout and returns its result (the caller checks the exit code)."""
    try:
        return subprocess.run(cmd, capture_output=True, text=True, timeout=timeout_s, cwd=cwd, input=input_text)
    except subprocess.TimeoutExpired as exc:
        pytest.fail(
            f"{Path(cmd[0]).name} did not finish within {timeout_s:.0f}s: {' '.join(cmd)}\n{exc.stderr or ''!s}"
        )


def check(cmd: list[str], *, timeout_s: float, cwd: Path | None = None, input_text: str | None = None) -> str:
    """Runs a tool and fails the test with its output unless it exits 0; returns stdout."""
    res = run(cmd, timeout_s=timeout_s, cwd=cwd, input_text=input_text)
    if res.returncode != 0:
        pytest.fail(
            f"{Path(cmd[0]).name} exited {res.returncode}: {' '.join(cmd)}\n{res.stdout[-6000:]}\n{res.stderr[-6000:]}"
        )
    return res.stdout
