"""Where every benchmark's results go: JSON for machines, markdown for people, side by side,
each with the machine's load at the start and the end of the run (a shared machine drifts)."""

from __future__ import annotations

import json
import os
import sys
from pathlib import Path
from typing import Any


def machine() -> dict[str, Any]:
    """Load averages (1, 5, 15 min), CPUs, and torch's thread count where torch is loaded
    (DGL and the trainers' side run on those threads); None where it is not."""
    torch = sys.modules.get("torch")
    return {
        "loadavg": [round(x, 2) for x in os.getloadavg()],
        "cpu_count": os.cpu_count(),
        "torch_threads": torch.get_num_threads() if torch is not None else None,
    }


def write(out: Path, result: dict, table: str, started: dict[str, Any] | None = None) -> None:
    """Writes ``result`` to ``out`` (JSON) and ``table`` next to it (``.md``), and prints the
    table; with ``started`` (:func:`machine` at the start), the machine at start and end too."""
    if started is not None:
        end = machine()
        result = {**result, "machine_load": {"start": started, "end": end}}
        table += (
            f"\nMachine: {end['cpu_count']} CPUs, load average {started['loadavg'][0]:.2f} at the start, "
            f"{end['loadavg'][0]:.2f} at the end; torch threads {end['torch_threads'] or '-'}.\n"
        )
    out.parent.mkdir(parents=True, exist_ok=True)
    out.write_text(json.dumps(result, indent=2))
    out.with_suffix(".md").write_text(table)
    print(table)
    print(f"wrote {out} and {out.with_suffix('.md')}")
