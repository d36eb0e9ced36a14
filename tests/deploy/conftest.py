"""Fixtures of the deploy tests; `container` tests run only with GRAPHFEED_CONTAINER_TESTS=1."""

from __future__ import annotations

import os
import threading
from collections.abc import Iterator
from pathlib import Path

import pytest

from tests.deploy.cloud_nodes import add_nodes, add_volumes
from tests.deploy.cluster_apply import stand_in_kubelet
from tests.deploy.control_plane import ControlPlane
from tests.deploy.manifests import KUSTOMIZATIONS, Rendered, render


def pytest_collection_modifyitems(config: pytest.Config, items: list[pytest.Item]) -> None:
    if os.environ.get("GRAPHFEED_CONTAINER_TESTS") == "1":
        return
    skip = pytest.mark.skip(
        reason="container image build (debootstrap + podman: ~20 min and ~3 GB of wheels the first time): "
        "set GRAPHFEED_CONTAINER_TESTS=1 after `GRAPHFEED_CONTAINER_TESTS=1 scripts/install_ci_tools.sh`"
    )
    for item in items:
        if "container" in item.keywords:
            item.add_marker(skip)


@pytest.fixture(scope="session")
def rendered() -> dict[str, Rendered]:
    """Every kustomization rendered once: {"cpu", "gpu", "gpu-embedded", "monitoring"} -> objects."""
    return {name: render(name) for name in KUSTOMIZATIONS}


@pytest.fixture(scope="session")
def cp(tmp_path_factory: pytest.TempPathFactory) -> Iterator[ControlPlane]:
    """A real control plane with GKE/EKS-like nodes and volumes, one per session (started on first use)."""
    plane = ControlPlane.started(lambda: tmp_path_factory.mktemp("control-plane"), Path.home() / ".cache" / "graphfeed")
    try:
        add_nodes(plane)
        add_volumes(plane, 80)
        stop = threading.Event()
        kubelet = threading.Thread(target=stand_in_kubelet, args=(plane, stop), daemon=True)
        kubelet.start()
        yield plane
        stop.set()
        kubelet.join(timeout=30)
    finally:
        plane.stop()
