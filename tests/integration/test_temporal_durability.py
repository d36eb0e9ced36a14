"""kill -9 a graph-store during appends (issue 16, the short version of `graphfeed bench append`):
real `graphfeed serve graph-store` processes, a writer appending in a loop through the routing
client, each graph-store killed once mid-stream and restarted on the same partition, port and
append dir. Every acknowledged edge must then be stored exactly once, and both processes must
shut down cleanly; also with small thresholds, so that snapshots are written and the log truncated
while the writer streams (the kill may hit one being written)."""

from __future__ import annotations

from pathlib import Path

import pytest

from graphfeed.bench.append import kill_trials
from graphfeed.bench.temporal import temporal_graph

pytestmark = pytest.mark.integration


SNAPSHOTS = ("--temporal-max-blocks", "4", "--temporal-snapshot-min-edges", "1000")


@pytest.mark.timeout(1500)  # deadlines inside scale with load (restarts on a busy machine); this only catches a hang
@pytest.mark.parametrize("snapshots", [False, True], ids=["log-only", "snapshots"])
def test_no_acknowledged_edge_is_lost_or_applied_twice_across_kill_9(tmp_path: Path, snapshots: bool) -> None:
    root = temporal_graph(tmp_path / "g", nodes=2_000, edges=20_000, seed=1, partitions=2)
    trials = kill_trials(
        root,
        tmp_path / "work",
        trials=2,
        batch_edges=200,
        seed=1,
        extra_args=SNAPSHOTS if snapshots else (),
        batches_before_kill=40 if snapshots else 5,
    )
    assert [t["killed"] for t in trials] == [0, 1]
    for t in trials:
        assert t["retries"] >= 1, f"the kill must hit the stream (the writer retried nothing): {t}"
        assert (t["lost"], t["duplicated"]) == (0, 0), t
        assert t["stored"] == t["acked"] > 0
    assert trials[1]["acked"] > trials[0]["acked"]
    logs = sorted((tmp_path / "work" / "logs").glob("*.log"))
    assert len(logs) == 4, logs  # two starts of each graph-store
    for log in logs:
        assert "Traceback" not in log.read_text(errors="replace"), log
    written = sorted((tmp_path / "work").glob("appends-*/snapshots/snap-*"))
    assert len(written) == (2 if snapshots else 0), written  # the newest snapshot of each partition, older ones removed
