"""Every transport of ``graphfeed bench dataplane`` delivers exactly the server's bytes into the
preallocated destination (real server processes on loopback), and the command writes its
JSON and markdown."""

from __future__ import annotations

import argparse
import json
from collections.abc import Iterator
from pathlib import Path

import numpy as np
import pytest

from graphfeed.bench import dataplane
from graphfeed.bench.dataplane import (
    Plan,
    ServerProcess,
    Variant,
    make_source,
    open_receiver,
    start_servers,
    stop_servers,
    variants,
)

pytestmark = pytest.mark.integration

SIZE = 200 * dataplane.ROW_BYTES  # 102,400 bytes: 4 full 24 KiB chunks and a partial one
CHUNK = 24 << 10
PLAN = Plan(chunks=(CHUNK, 1 << 20), sweep=("window_64m",), sweep_chunk=CHUNK)
VARIANTS = variants(PLAN)


@pytest.fixture(scope="module")
def servers() -> Iterator[dict[tuple[str, ...], ServerProcess]]:
    running = start_servers(list(dict.fromkeys(v.server_key() for v in VARIANTS)), SIZE)
    yield running
    stop_servers(running)  # raises if a server had failed


def test_every_transport_is_measured() -> None:
    assert {v.transport for v in VARIANTS} == set(dataplane.TRANSPORTS)


@pytest.mark.parametrize("variant", VARIANTS, ids=lambda v: v.name)
def test_bytes_received_equal_bytes_sent(variant: Variant, servers: dict[tuple[str, ...], ServerProcess]) -> None:
    expected = make_source(SIZE)
    dest = np.full(SIZE + 64, 0xEE, np.uint8)  # larger than the payload, like a pool's buffer
    receiver = open_receiver(variant, servers[variant.server_key()].address)
    try:
        for size in (SIZE, SIZE - 7 * dataplane.ROW_BYTES):  # twice: the connection is reused
            dest[:] = 0xEE
            receiver.fetch(size, dest)
            np.testing.assert_array_equal(dest[:size], expected[:size])
            assert (dest[size:] == 0xEE).all(), "nothing written past the payload"
    finally:
        receiver.close()


def test_command_writes_json_and_markdown(tmp_path: Path) -> None:
    out = tmp_path / "dataplane.json"
    parser = argparse.ArgumentParser()
    dataplane.register(parser.add_subparsers())
    args = parser.parse_args(
        [
            "dataplane",
            "--rows",
            "200",
            "3",
            "--rounds",
            "1",
            "--chunks-kib",
            "24",
            "--sweep",
            "no_bdp",
            "--sample-mb",
            "0.2",
            "--out",
            str(out),
        ]
    )
    assert args.func(args) == 0
    report = json.loads(out.read_text())
    rows = {(r["variant"], r["payload_bytes"]) for r in report["results"]}
    assert ("grpc_raw_chunks 1 MiB no_bdp", SIZE) in rows and (
        "grpc_raw_chunks 1 MiB no_bdp",
        1536,
    ) not in rows  # sweep: largest only
    small = {r["transport"] for r in report["results"] if r["payload_bytes"] == 1536}
    assert small == set(dataplane.TRANSPORTS) - {"grpc_raw_inflight"}  # calls in flight: largest only
    assert all(r["gbps_median"] > 0 for r in report["results"])
    markdown = out.with_suffix(".md").read_text()
    assert report["verdict"] in markdown and "| flight 24 KiB |" in markdown
