"""Shared memory, the offer handshake: a client's probe file, and the server's verification of it."""

from __future__ import annotations

import logging
from pathlib import Path
from types import SimpleNamespace

import pytest

from graphfeed.common import shm


def test_offer_accepted_for_same_allowed_dir(tmp_path: Path) -> None:
    offer = shm.ShmOffer.create(tmp_path)
    assert offer is not None
    ((key, value),) = offer.metadata()
    assert key == shm.METADATA_KEY
    probe = tmp_path / value.split("|")[1]
    assert probe.read_text() == value.split("|")[2]
    verifier = shm.OfferVerifier([tmp_path])
    assert verifier.accept(offer.metadata()) == tmp_path.resolve()
    # gRPC's metadata objects carry .key/.value.
    grpc_style = [SimpleNamespace(key="user-agent", value="x"), SimpleNamespace(key=key, value=value)]
    assert verifier.accept(grpc_style) == tmp_path.resolve()
    offer.close()
    offer.close()
    assert not probe.exists()
    assert verifier.accept(offer.metadata()) == tmp_path.resolve()  # verified offers are cached
    assert shm.OfferVerifier([tmp_path]).accept(offer.metadata()) is None  # probe gone


def test_offer_rejected(tmp_path: Path) -> None:
    other = tmp_path / "other"
    other.mkdir()
    offer = shm.ShmOffer.create(tmp_path)
    assert offer is not None
    ((key, value),) = offer.metadata()
    dir_s, probe, token = value.split("|")
    assert shm.OfferVerifier([other]).accept(offer.metadata()) is None
    assert shm.OfferVerifier([]).accept(offer.metadata()) is None
    verifier = shm.OfferVerifier([tmp_path, other])
    wrong_token = "0" * 16 if token != "0" * 16 else "1" * 16
    assert verifier.accept([(key, f"{dir_s}|{probe}|{wrong_token}")]) is None
    assert verifier.accept([(key, f"{other}|{probe}|{token}")]) is None  # probe is not in that dir
    assert verifier.accept([(key, f"{dir_s}|../{probe}|{token}")]) is None
    assert verifier.accept([(key, f"relative|{probe}|{token}")]) is None
    assert verifier.accept([("other-key", value)]) is None
    assert verifier.accept(offer.metadata()) == tmp_path.resolve()
    offer.close()


def test_rejection_is_logged_once_per_offer(tmp_path: Path, caplog: pytest.LogCaptureFixture) -> None:
    verifier = shm.OfferVerifier([tmp_path])
    bad = [(shm.METADATA_KEY, f"{tmp_path}|graphfeed-probe-1o0000abcd-0123456789abcdef|0123456789abcdef")]
    with caplog.at_level(logging.INFO, logger="graphfeed.common.shm"):
        assert verifier.accept(bad) is None
        assert verifier.accept(bad) is None
    assert len([r for r in caplog.records if "declined" in r.getMessage()]) == 1
    assert "not readable here" in caplog.records[0].getMessage()


@pytest.mark.parametrize(
    "metadata",
    [
        None,
        [],
        42,
        [("graphfeed-shm",)],
        [("graphfeed-shm", "no-pipes")],
        [("graphfeed-shm", "a|b|c|d")],
        [("graphfeed-shm", b"\xff\xfe|x|y")],
        [("graphfeed-shm", None)],
        [object()],
        [("graphfeed-shm", "/\x00|p|t")],
    ],
)
def test_garbage_metadata_never_raises(tmp_path: Path, metadata: object) -> None:
    # Deliberately malformed: a peer's metadata is untrusted input, whatever its type.
    assert shm.OfferVerifier([tmp_path]).accept(metadata) is None  # type: ignore[arg-type]


def test_offer_for_missing_dir_is_none(tmp_path: Path) -> None:
    assert shm.ShmOffer.create(tmp_path / "missing") is None
    assert shm.shared_offer(tmp_path / "missing") is None


def test_shared_offer_is_cached(tmp_path: Path) -> None:
    a = shm.shared_offer(tmp_path)
    assert a is not None
    assert shm.shared_offer(tmp_path) is a
    assert len([p for p in tmp_path.iterdir() if p.name.startswith(shm.PROBE_PREFIX)]) == 1
    a.close()
