"""Where every benchmark's results go: JSON for machines, markdown for people, side by side,
each with the machine's load at the start and the end of the run (a shared machine drifts).

A run is *quiet* when, at its start and at its end (before anything of the benchmark runs and
after everything stopped), other processes kept fewer than :data:`QUIET_CORES` cores busy. A
ratio against in-process DGL taken on a busy machine flatters graphfeed (DGL's two OpenMP
threads lose far more to other load than graphfeed's many processes), so a run that is not
quiet is marked so in the JSON (``"quiet": false``) and at the top of its table."""

from __future__ import annotations

import json
import os
import sys
import time
from pathlib import Path
from typing import Any

QUIET_CORES = 0.25
"""Most cores other processes may keep busy for a run to count as quiet."""


def _busy_seconds() -> tuple[float, float]:
    """(CPU seconds all processes spent busy, CPU seconds this process spent) since boot."""
    with open("/proc/stat", encoding="ascii") as f:
        user, nice, system, _idle, _iowait, irq, softirq, steal, *_ = (int(x) for x in f.readline().split()[1:])
    tick = os.sysconf("SC_CLK_TCK")
    own = os.times()
    return (user + nice + system + irq + softirq + steal) / tick, own.user + own.system


def other_busy_cores(seconds: float = 2.0) -> float | None:
    """Cores kept busy by processes other than this one over ``seconds`` (None without /proc)."""
    try:
        busy0, own0 = _busy_seconds()
        time.sleep(seconds)  # a sampling window, not synchronisation
        busy1, own1 = _busy_seconds()
    except (OSError, ValueError):
        return None
    return round(max(0.0, (busy1 - busy0) - (own1 - own0)) / seconds, 2)


def machine() -> dict[str, Any]:
    """Load averages (1, 5, 15 min), CPUs, torch's thread count where torch is loaded (DGL and
    the trainers' side run on those threads; None where it is not), and the cores other
    processes keep busy now (:func:`other_busy_cores`)."""
    torch = sys.modules.get("torch")
    return {
        "loadavg": [round(x, 2) for x in os.getloadavg()],
        "cpu_count": os.cpu_count(),
        "torch_threads": torch.get_num_threads() if torch is not None else None,
        "other_busy_cores": other_busy_cores(),
    }


def quiet(*samples: dict[str, Any]) -> bool:
    """Whether other processes kept fewer than :data:`QUIET_CORES` cores busy in every sample."""
    return all((s.get("other_busy_cores") or 0.0) < QUIET_CORES for s in samples)


def write(out: Path, result: dict, table: str, started: dict[str, Any] | None = None) -> None:
    """Writes ``result`` to ``out`` (JSON) and ``table`` next to it (``.md``), and prints the
    table; with ``started`` (:func:`machine` at the start), the machine at start and end too."""
    if started is not None:
        end = machine()
        calm = quiet(started, end)
        result = {**result, "machine_load": {"start": started, "end": end}, "quiet": calm}
        table += (
            f"\nMachine: {end['cpu_count']} CPUs, load average {started['loadavg'][0]:.2f} at the start, "
            f"{end['loadavg'][0]:.2f} at the end; other processes kept {started['other_busy_cores']} / "
            f"{end['other_busy_cores']} cores busy; torch threads {end['torch_threads'] or '-'}.\n"
        )
        if not calm:
            warning = (
                f"**Not quiet**: other processes kept {QUIET_CORES} cores or more busy at the start or the end; "
                "ratios against in-process DGL taken now flatter graphfeed and are not valid. Re-run on an idle "
                "machine.\n\n"
            )
            table = warning + table
            print(warning.strip(), file=sys.stderr)
    out.parent.mkdir(parents=True, exist_ok=True)
    out.write_text(json.dumps(result, indent=2))
    out.with_suffix(".md").write_text(table)
    print(table)
    print(f"wrote {out} and {out.with_suffix('.md')}")
