"""proto/: `buf lint` with the STANDARD rules and the waivers in buf.yaml."""

from __future__ import annotations

import json

import yaml

from tests.deploy.tools import REPO, check, run, tool


def test_buf_lint_is_clean() -> None:
    check([tool("buf"), "lint"], timeout_s=120, cwd=REPO)


def test_buf_waivers_are_still_needed() -> None:
    """Each rule buf.yaml waives still fires on its file without the waiver (no stale waiver),
    and nothing else does."""
    config = yaml.safe_load((REPO / "buf.yaml").read_text())
    waived = {(rule, path) for rule, paths in config["lint"].pop("ignore_only").items() for path in paths}
    res = run(
        [tool("buf"), "lint", "--config", yaml.safe_dump(config), "--error-format", "json"], timeout_s=120, cwd=REPO
    )
    assert res.returncode != 0, res.stdout + res.stderr
    found = {(e["type"], e["path"]) for e in map(json.loads, res.stdout.splitlines())}
    assert found == waived
