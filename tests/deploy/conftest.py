"""Fixtures of the deploy tests; `container` tests run only with GRAPHFEED_CONTAINER_TESTS=1."""

from __future__ import annotations

import os

import pytest

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
