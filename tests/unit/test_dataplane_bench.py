"""The data-plane benchmark's protobuf framing and bookkeeping (no sockets; the transports
themselves run in tests/integration/test_dataplane_bench.py)."""

from __future__ import annotations

import pytest
from google.protobuf.message import DecodeError

from graphfeed.bench.dataplane import (
    Chunk,
    Plan,
    Variant,
    applies,
    encode_varint,
    frame_chunk,
    parse_chunk,
    variants,
    verdict,
)
from graphfeed.common.bulk import read_varint
from graphfeed.common.errors import DataLoss


@pytest.mark.parametrize("value", [0, 1, 127, 128, 300, 2**32, 2**63 - 1, 2**64 - 1])
def test_varints_match_protobuf(value: int) -> None:
    wire = Chunk(offset=value).SerializeToString()  # field 1, varint: tag 0x08, then the value
    assert wire == (b"\x08" + encode_varint(value) if value else b"")
    assert read_varint(memoryview(encode_varint(value)), 0) == (value, len(encode_varint(value)))


def test_read_varint_rejects_truncated_and_overlong() -> None:
    with pytest.raises(DecodeError):
        read_varint(memoryview(b"\x80\x80"), 0)
    with pytest.raises(DecodeError):
        read_varint(memoryview(b"\xff" * 11), 0)


@pytest.mark.parametrize(
    ("offset", "tensor", "size"), [(0, 0, 0), (0, 3, 5), (111_103_488, 1, 4096), (2**40, 7, 1 << 20)]
)
def test_framed_chunk_is_a_protobuf_message_and_scans_to_the_same_slice(offset: int, tensor: int, size: int) -> None:
    payload = bytes(range(256)) * (size // 256) + bytes(size % 256)
    framed = frame_chunk(offset, tensor, memoryview(payload))
    parsed = Chunk.FromString(framed)  # what any protobuf reader sees
    assert (parsed.offset, parsed.tensor, parsed.data) == (offset, tensor, payload)
    got_offset, got_tensor, data = parse_chunk(framed)
    assert (got_offset, got_tensor, bytes(data)) == (offset, tensor, payload)


def test_scanner_reads_what_protobuf_wrote_in_any_field_order_and_skips_unknown_fields() -> None:
    payload = b"\x01\x02\x03" * 100
    body = Chunk(offset=4096, tensor=2, data=payload).SerializeToString()
    # fixed64 field 3, fixed32 field 4, a bytes field 5: a newer sender's fields, skipped.
    unknown = b"\x19" + bytes(8) + b"\x25" + bytes(4) + b"\x2a\x03abc"
    data_first = Chunk(data=payload).SerializeToString() + unknown + Chunk(offset=4096, tensor=2).SerializeToString()
    for message in (body, data_first, unknown + body):
        assert Chunk.FromString(message).data == payload
        offset, tensor, data = parse_chunk(message)
        assert (offset, tensor, bytes(data)) == (4096, 2, payload)


@pytest.mark.parametrize("bad", [b"\x7a\x05abc", b"\x08", b"\x19\x00\x00", b"\x0b"])
def test_scanner_rejects_malformed_messages(bad: bytes) -> None:
    with pytest.raises(DataLoss):
        parse_chunk(bad)
    with pytest.raises(Exception):  # noqa: B017 - protobuf's DecodeError: the scanner agrees with it
        Chunk.FromString(bad)


def test_chunk_sizes_that_change_nothing_are_measured_once() -> None:
    todo = variants(Plan(chunks=(256 << 10, 1 << 20, 4 << 20, 16 << 20), sweep=("window_64m",)))
    raw = [v for v in todo if v.transport == "grpc_raw_chunks" and v.options == "graphfeed" and v.workers == 16]
    one_mb, big = 2_000 * 512, 217_000 * 512
    assert [v.chunk_bytes >> 10 for v in raw if applies(v, one_mb, todo)] == [
        256,
        1024,
    ]  # 4 and 16 MiB: one message, like 1 MiB
    assert [v.chunk_bytes >> 10 for v in raw if applies(v, big, todo)] == [256, 1024, 4096, 16384]
    assert all(applies(v, one_mb, todo) for v in todo if v.transport == "tcp")  # no smaller tcp variant: kept


def test_sweep_rows_equal_to_main_rows_are_measured_once() -> None:
    todo = variants(Plan(chunks=(1 << 20,), tuned="graphfeed", sweep=("graphfeed", "no_bdp")))
    names = [v.name for v in todo]
    assert len(names) == len(set(names))
    main = next(v for v in todo if v.name == "grpc_raw_chunks 1 MiB graphfeed")
    assert not main.largest_only and next(v for v in todo if v.options == "no_bdp").largest_only


def _row(variant: Variant, gbps: float, size: int = 111_104_000) -> dict:
    return {
        "variant": variant.name,
        "transport": variant.transport,
        "payload_bytes": size,
        "gbps_median": gbps,
        "client_cpu_s_per_gb": 1 / gbps,
        "server_cpu_s_per_gb": 0.5 / gbps,
    }


def test_verdict_compares_the_fastest_with_the_reference_rows_not_the_luckiest() -> None:
    grpc_ref, flight_ref = Variant("grpc_raw_chunks", 1 << 20, "single_thread"), Variant("flight", 1 << 20)
    rows = [
        _row(Variant("tcp", 1 << 20), 3.0),
        _row(grpc_ref, 1.0),
        _row(Variant("grpc_raw_chunks", 1 << 20, "window_64m"), 1.5),  # a lucky sweep row is not the reference
        _row(flight_ref, 2.0),
        _row(flight_ref, 0.5, size=1_024_000),
        _row(
            Variant("grpc_raw_chunks", 4 << 20, "single_thread"), 0.25, size=1_024_000
        ),  # no reference row: the best one
    ]
    text = verdict(rows, grpc_ref.name, flight_ref.name)
    assert (
        "111 MB: fastest tcp 1 MiB at 3.00 GB/s, 3.00x grpc_raw_chunks 1 MiB single_thread (1.00), "
        "1.50x flight 1 MiB (2.00)" in text
    )
    assert (
        "flight 1 MiB vs grpc_raw_chunks 1 MiB single_thread: 2.00x GB/s, CPU s/GB client 0.50 vs 1.00, "
        "server 0.25 vs 0.50" in text
    )
    assert "1 MB: fastest flight 1 MiB at 0.50 GB/s, 2.00x grpc_raw_chunks 4 MiB single_thread (0.25)" in text
