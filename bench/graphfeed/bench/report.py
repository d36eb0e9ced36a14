"""Where every benchmark's results go: JSON for machines, markdown for people, side by side."""

from __future__ import annotations

import json
from pathlib import Path


def write(out: Path, result: dict, table: str) -> None:
    """Writes ``result`` to ``out`` (JSON) and ``table`` next to it (``.md``), and prints the table."""
    out.parent.mkdir(parents=True, exist_ok=True)
    out.write_text(json.dumps(result, indent=2))
    out.with_suffix(".md").write_text(table)
    print(table)
    print(f"wrote {out} and {out.with_suffix('.md')}")
