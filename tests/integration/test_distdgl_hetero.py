"""DistDGL on a typed graph: a heterograph partitioned per node type and trained from
``{ntype: ids}`` on the same 2 emulated machines as ``test_distdgl_bench``.

Three node types (papers with 6-wide features and the training split, authors with 3-wide
features, featureless venues), two relations and their ``rev_`` reverses, as ``hetero_graph``
builds them; graphfeed ingests it and ``load_global`` hands DistDGL the DGL heterograph.
"""

from __future__ import annotations

import json
import os
import shutil
from pathlib import Path

import dgl
import numpy as np
import pytest

from graphfeed.bench.distdgl import DistDGLSystem, ensure_partitions
from graphfeed.bench.harness import load_global
from graphfeed.ingest.graph import hetero_graph
from graphfeed.ingest.partition import write_partitioned

pytestmark = [
    pytest.mark.integration,
    pytest.mark.slow,
    pytest.mark.skipif(
        os.geteuid() != 0 or not all(shutil.which(t) for t in ("unshare", "nsenter", "ss")),
        reason="emulated machines need root (mount namespaces), util-linux (unshare, nsenter) and iproute2 (ss)",
    ),
]
PAPERS, AUTHORS, VENUES = 300, 200, 12
WIDTH = {"paper": 6, "author": 3}


@pytest.fixture(scope="module")
def typed_root(tmp_path_factory: pytest.TempPathFactory) -> Path:
    rng = np.random.default_rng(5)
    writes = (rng.integers(0, AUTHORS, 900), rng.integers(0, PAPERS, 900))
    published = (np.arange(PAPERS), np.arange(PAPERS) % VENUES)
    g = hetero_graph(
        "typed-distdgl",
        {"paper": PAPERS, "author": AUTHORS, "venue": VENUES},
        {("author", "writes", "paper"): writes, ("paper", "published_in", "venue"): published},
        {
            "paper": {"feat": rng.random((PAPERS, WIDTH["paper"]), dtype=np.float32)},
            "author": {"feat": rng.random((AUTHORS, WIDTH["author"]), dtype=np.float32)},
        },
        {"paper": {"train": np.arange(0, PAPERS, 2)}},  # every other paper: train_mask has both classes
        add_reverse=True,
    )
    root = tmp_path_factory.mktemp("typed") / "g"
    write_partitioned(g, root, 2, method="metis")
    return root


@pytest.fixture(scope="module")
def part_config(typed_root: Path, tmp_path_factory: pytest.TempPathFactory) -> Path:
    return ensure_partitions(typed_root, tmp_path_factory.mktemp("distdgl"), load_global)


def test_heterograph_partitions_keep_types_and_the_callers_graph(typed_root: Path, tmp_path: Path) -> None:
    g, feat, train = load_global(typed_root)
    config = ensure_partitions(typed_root, tmp_path, lambda _root: (g, feat, train))
    meta = json.loads(config.read_text())
    assert (meta["num_parts"], meta["num_nodes"]) == (2, PAPERS + AUTHORS + VENUES)
    assert set(meta["ntypes"]) == {"paper", "author", "venue"}
    assert set(meta["etypes"]) == {":".join(e) for e in g.canonical_etypes} and len(meta["etypes"]) == 4
    # METIS balanced the training papers across the parts (balance_ntypes as {ntype: classes})
    parts = [dgl.data.utils.load_tensors(str(config.parent / f"part{p}" / "node_feat.dgl")) for p in range(2)]
    assert all(set(part) == {"paper/feat", "paper/train_mask", "author/feat"} for part in parts)
    per_part = [int(part["paper/train_mask"].sum()) for part in parts]
    assert sum(per_part) == len(train["paper"]) and min(per_part) >= 0.4 * sum(per_part), per_part
    assert all(not g.nodes[nt].data for nt in g.ntypes), "feat/train_mask are the caller's graph's no longer"


def test_distnodedataloader_samples_a_heterograph_on_two_machines(
    typed_root: Path, part_config: Path, tmp_path: Path
) -> None:
    train = load_global(typed_root)[2]
    assert set(train) == {"paper"}
    with DistDGLSystem(part_config, tmp_path, [4, 4], batch_size=32) as system:
        assert system.num_train == len(train["paper"]) == PAPERS // 2
        assert system.feat_shapes == {nt: [n, WIDTH[nt]] for nt, n in (("paper", PAPERS), ("author", AUTHORS))}
        runs = [system.run(2), system.run(6)]  # 6 x 32 > 150 training papers: the second run crosses an epoch
        assert [r.minibatches for r in runs] == [2, 6]
        assert all(r.sampled_edges > 0 and r.seconds > 0 for r in runs)
        # each feature type's rows arrived at its own width; venues have none to pull
        assert set(system.pulled) == set(WIDTH), system.pulled
        assert all(rows > 0 and width == WIDTH[nt] for nt, (rows, width) in system.pulled.items())
    assert system.close() == {"server-0": 0, "server-1": 0, "trainer": 0}
