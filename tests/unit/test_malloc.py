"""The graph-store's malloc settings are taken by glibc (in a child process: they are global)."""

from __future__ import annotations

import subprocess
import sys

import pytest

from graphfeed.graph_store.config import GraphStoreSettings

CHECK = "from graphfeed.common.malloc import tune_malloc; print(tune_malloc({}, {}))"


def run(arena_max: int, threshold: int) -> str:
    done = subprocess.run([sys.executable, "-c", CHECK.format(arena_max, threshold)], capture_output=True, text=True)
    assert done.returncode == 0, done.stderr
    return done.stdout.strip()


@pytest.mark.skipif(not sys.platform.startswith("linux"), reason="glibc's mallopt")
def test_the_graph_stores_defaults_are_taken() -> None:
    fields = GraphStoreSettings.model_fields
    defaults = (fields["malloc_arena_max"].default, fields["malloc_mmap_threshold_bytes"].default)
    assert defaults == (0, 0) and run(*defaults) == "True"  # glibc's own settings: answers reuse the heap
    assert run(2, 1 << 20) == "True"  # what a budgeted store sets: freed answers go back to the kernel
