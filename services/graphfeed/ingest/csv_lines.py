"""Reading the lines of a user's CSV (edge list, labels, features) with the rules in the README's
"Input formats": every refusal names the file, the line and the node, never an internal position.

- a UTF-8 BOM is dropped; blank lines and ``#``/``%`` comment lines are skipped anywhere;
- the delimiter is tab, comma, semicolon or space (the first found in the first data line; runs
  of spaces are one delimiter);
- whitespace around a field is stripped, then one pair of matching quotes (``"x"`` or ``'x'``);
  a double-quoted field may hold the delimiter;
- an empty field is refused, naming its line;
- a line longer than :data:`MAX_LINE_BYTES` is refused after reading that much (a file without
  newlines is not loaded whole).
"""

from __future__ import annotations

import csv
import re
from collections.abc import Iterator
from pathlib import Path

import numpy as np

from graphfeed.common.errors import InvalidArgument, NotFound

MAX_LINE_BYTES = 8 << 20
"""Longest line read (8 MiB: a feature row of ~500k numbers); a longer one is refused."""

HEADER_CHOICES = ("auto", "yes", "no")
"""``--header``: whether an edge list's first data line names its columns."""

NODE_ID_CHOICES = ("auto", "int", "name")
"""``--node-ids``: integers (``007`` is node 7), names (``007`` and ``7`` are two nodes), or auto."""

INT64_MAX = (1 << 63) - 1
_INT = re.compile(r"[+-]?[0-9]+\Z")  # ASCII digits only: '²' or '--5' are not integers
_DELIMITERS = ("\t", ",", ";", " ")
_CHUNK_BYTES = 1 << 20
_ALL_INTS = re.compile(r"(?:[+-]?[0-9]+\n)*[+-]?[0-9]+")
_ANY_INT = re.compile(r"^[+-]?[0-9]+$", re.MULTILINE)


def is_int(text: str) -> bool:
    """Whether ``text`` is a decimal integer literal (ASCII digits, an optional sign)."""
    return _INT.match(text) is not None


def is_number(text: str) -> bool:
    """Whether ``float`` reads ``text`` (NaN and infinity included: refused later, by name)."""
    try:
        float(text)
    except ValueError:
        return False
    return True


def read_rows(f: Path, delimiter: str | None = None) -> Iterator[tuple[int, list[str]]]:
    """(1-based line number, fields) of each data line of ``f``, by the module's rules.

    Raises:
        NotFound: ``f`` does not exist.
        InvalidArgument: ``f`` cannot be read, is not UTF-8 text, has a line over
            :data:`MAX_LINE_BYTES` or an empty field.
    """
    delim = delimiter
    for no, text in _lines(f):
        if delim is None:
            delim = next((d for d in _DELIMITERS if d in text), ",")
        try:
            fields = _split(text, delim)
        except ValueError as e:
            raise InvalidArgument(f"{f}: line {no}: {e} ({text[:80]!r}); a field ends at its line's end") from e
        if "" in fields:
            raise InvalidArgument(
                f"{f}: line {no}: field {fields.index('') + 1} is empty ({text[:80]!r}); every field needs a value"
            )
        yield no, fields


def _lines(f: Path) -> Iterator[tuple[int, str]]:
    """(line number, stripped text) of the non-blank, non-comment lines, each read with a bound."""
    if not f.exists():
        raise NotFound(f"{f} does not exist")
    if not f.is_file():
        raise InvalidArgument(f"{f} is not a file")
    try:
        fh = open(f, "rb")  # noqa: SIM115 - closed below; open errors are the user's to see
    except OSError as e:
        raise InvalidArgument(f"{f}: cannot read it: {e.strerror}") from e
    with fh:
        no, rest = 0, b""
        while True:
            try:
                chunk = fh.read(_CHUNK_BYTES)
            except OSError as e:
                raise InvalidArgument(f"{f}: cannot read line {no + 1}: {e.strerror}") from e
            if no == 0 and not rest:
                chunk = chunk.removeprefix(b"\xef\xbb\xbf")  # a UTF-8 BOM
            raws = (rest + chunk).split(b"\n")
            rest = raws.pop() if chunk else b""
            if len(rest) > MAX_LINE_BYTES:
                raise InvalidArgument(
                    f"{f}: line {no + len(raws) + 1} is longer than {MAX_LINE_BYTES >> 20} MiB; "
                    "not a text edge list or node table?"
                )
            for text in _decode(f, no, raws):
                no += 1
                text = text.strip()
                if text and text[0] not in "#%":
                    yield no, text
            if not chunk:
                return


def _decode(f: Path, no: int, raws: list[bytes]) -> list[str]:
    """The text of lines ``no + 1...``: decoded in one go, line by line only to name a bad line."""
    try:
        return b"\n".join(raws).decode("utf-8").split("\n") if raws else []
    except UnicodeDecodeError:
        for i, raw in enumerate(raws):
            try:
                raw.decode("utf-8")
            except UnicodeDecodeError as e:
                raise InvalidArgument(f"{f}: line {no + i + 1} is not UTF-8 text (byte {e.start + 1})") from e
        raise


def _split(text: str, delim: str) -> list[str]:
    if delim == " ":
        parts = text.split()
    elif '"' in text:
        if text.count('"') % 2:
            raise ValueError("a double quote is not closed")
        parts = next(csv.reader([text], delimiter=delim, skipinitialspace=True))
    else:
        parts = text.split(delim)
    if "'" in text or '"' in text:
        return [_unquote(p.strip()) for p in parts]
    if " " in text or (delim != "\t" and "\t" in text):
        return [p.strip() for p in parts]
    return parts  # nothing to strip (the common case, kept fast)


def _unquote(x: str) -> str:
    if len(x) >= 2 and x[0] == x[-1] and x[0] in "\"'":
        return x[1:-1].strip()
    return x


def parse_ints(where: Path, texts: list[str], lines: np.ndarray, what: str, hint: str = "") -> np.ndarray:
    """``texts`` (integers, from ``lines``) as int64; a non-integer or a value out of the int64
    range is refused, naming it (as ``what``) and its line."""
    if not all_ints(texts):
        bad = next(i for i, x in enumerate(texts) if not is_int(x))
        raise InvalidArgument(f"{where}: line {lines[bad]}: {what} {texts[bad][:40]!r} is not an integer{hint}")
    values = [int(x) for x in texts]
    try:
        return np.array(values, dtype=np.int64)
    except OverflowError:
        big = next(i for i, v in enumerate(values) if not -INT64_MAX - 1 <= v <= INT64_MAX)
        raise InvalidArgument(
            f"{where}: line {lines[big]}: {what} {texts[big][:40]} is outside the 64-bit integer range{hint}"
        ) from None


def all_ints(texts: list[str]) -> bool:
    """Whether every one of ``texts`` (no newlines: they are fields of lines) is an integer (one C-level pass)."""
    return not texts or _ALL_INTS.fullmatch("\n".join(texts)) is not None


def id_kind(where: Path, ids: list[str], lines: np.ndarray, mode: str) -> str:
    """ "int" or "name" for the edge list's node ids by ``--node-ids`` (auto: int when every id
    is an integer, name when none is; a mix is refused, naming the odd one out and its line)."""
    if mode != "auto":
        return mode
    if all_ints(ids):
        return "int"
    if _ANY_INT.search("\n".join(ids)) is None:
        return "name"
    mask = np.fromiter((is_int(x) for x in ids), dtype=bool, count=len(ids))
    odd = np.flatnonzero(~mask if 2 * mask.sum() >= len(ids) else mask)[0]  # the minority
    raise InvalidArgument(
        f"{where}: line {lines[odd]}: node ids mix integers and names (e.g. {ids[odd][:40]!r}); "
        "pass --node-ids name to read every id as a name (007 and 7 then differ), or fix the typo"
    )
