"""Test certificates made with the openssl command: a CA and certificates it signs."""

from __future__ import annotations

import shutil
import subprocess
from pathlib import Path

import pytest


def openssl(*args: str, cwd: Path) -> None:
    """Runs openssl in ``cwd``; fails the test when openssl is not installed."""
    exe = shutil.which("openssl")
    if exe is None:
        pytest.fail("openssl is needed to make the test certificates (apt-get install openssl)", pytrace=False)
    subprocess.run([exe, *args], cwd=cwd, check=True, capture_output=True, timeout=60)


def make_ca(d: Path, cert: str) -> None:
    """A self-signed CA in ``d``: ``ca.key`` and the certificate file ``cert``."""
    openssl(
        "req",
        "-x509",
        "-newkey",
        "rsa:2048",
        "-nodes",
        "-days",
        "2",
        "-subj",
        "/CN=graphfeed-test-ca",
        "-keyout",
        "ca.key",
        "-out",
        cert,
        cwd=d,
    )


def issue(d: Path, name: str, ca_cert: str, *, cn: str | None = None, loopback: bool = False, cert: str = "") -> None:
    """``name.key`` and a certificate (``cert``, default ``name.pem``) for ``cn`` (default ``name``)
    signed by the CA in ``d``; ``loopback``: valid for 127.0.0.1 and localhost (a server's)."""
    openssl(
        "req",
        "-newkey",
        "rsa:2048",
        "-nodes",
        "-subj",
        f"/CN={cn or name}",
        "-keyout",
        f"{name}.key",
        "-out",
        f"{name}.csr",
        cwd=d,
    )
    ext: list[str] = []
    if loopback:
        (d / "san.ext").write_text("subjectAltName=IP:127.0.0.1,DNS:localhost\n")
        ext = ["-extfile", "san.ext"]
    openssl(
        "x509",
        "-req",
        "-in",
        f"{name}.csr",
        "-CA",
        ca_cert,
        "-CAkey",
        "ca.key",
        "-CAcreateserial",
        "-days",
        "2",
        "-out",
        cert or f"{name}.pem",
        *ext,
        cwd=d,
    )
