"""Shared memory, owner locks: the files of a writer that was killed are swept by the next
writer, a live writer's never."""

from __future__ import annotations

import os
import signal
import subprocess
import sys
from pathlib import Path

from graphfeed.common import shm


def test_files_of_a_killed_writer_are_swept_and_a_live_one_s_are_not(tmp_path: Path) -> None:
    """A writer SIGKILLed with a pooled, an unclaimed and a lent segment leaves them behind;
    the next process to write into the directory removes them (its owner lock is free), but
    never the files of a writer that is alive."""
    code = (
        "import os, signal, sys\n"
        "from pathlib import Path\n"
        "from graphfeed.common import shm\n"
        "d = Path(sys.argv[1])\n"
        "pool = shm.SegmentPool(d)\n"
        "a = pool.acquire(4096); b = pool.acquire(4096)\n"
        "os.rename(a.path, str(a.path) + shm.LENT_SUFFIX)\n"  # as a reader's claim
        "shm.Segment.create(d, 100)\n"
        "assert shm.ShmOffer.create(d) is not None\n"  # a client's probe file
        "print(shm.owner_token(d), flush=True)\n"
        "os.kill(os.getpid(), signal.SIGKILL)\n"
    )
    res = subprocess.run([sys.executable, "-c", code, str(tmp_path)], capture_output=True, text=True, timeout=60)
    assert res.returncode == -signal.SIGKILL, res.stderr
    dead = res.stdout.strip()
    left = [n for n in os.listdir(tmp_path) if dead in n]
    assert len(left) == 5 and f"{shm.OWNER_PREFIX}{dead}" in left  # 3 segments, a probe, the owner lock
    live = shm.Segment.create(tmp_path, 64)  # this process's first write here sweeps
    assert not [n for n in os.listdir(tmp_path) if dead in n]
    assert shm.sweep_dead_owners(tmp_path) == 0 and live.path.exists()
    assert f"{shm.OWNER_PREFIX}{shm.owner_token(tmp_path)}" in os.listdir(tmp_path)
    live.close()
