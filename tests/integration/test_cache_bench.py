"""``graphfeed bench cache``'s end-to-end part reads a real loader stream, bulk bytes included
(it decoded messages without them after the wire format changed, and failed on every run)."""

from __future__ import annotations

import argparse

import pytest

from graphfeed.bench.cache import stream_steps
from tests.integration.inprocess import InProcessCluster

pytestmark = pytest.mark.integration


def test_the_end_to_end_part_streams_and_decodes_minibatches(cora_cluster: InProcessCluster) -> None:
    args = argparse.Namespace(seed=0, batch_size=256, fanouts=[5, 5], e2e_steps=4)
    got = stream_steps(cora_cluster.loader.address, args)
    assert got["steps"] == 4 and got["minibatches_per_s"] > 0
    assert got["remote_bytes"] > 0  # features were fetched and sent, and their bytes decoded
