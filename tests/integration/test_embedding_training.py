"""The RGCN job with ``--embeddings server`` (issue 25): the featureless ``tag`` type's table
lives in the two graph-stores, trains there, and a trainer that crashed after a step it had not
checkpointed resumes to the same embedding rows and model weights as an uninterrupted run.

Real gRPC servers of every service (in this process); the typed graph of
tests/integration/test_hetero_end_to_end.py.
"""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path

import numpy as np
import pytest
import torch

from graphfeed.graph_store.partitions import RemotePartitionSet
from graphfeed.ingest.partition import write_partitioned
from graphfeed.trainer.remote_embedding import RemoteEmbedding
from graphfeed.trainer.train import Trainer
from tests.integration.inprocess import InProcessCluster
from tests.integration.test_hetero_end_to_end import typed_graph
from tests.integration.test_hetero_training import config

pytestmark = [pytest.mark.integration]


@pytest.fixture(scope="module")
def cluster(tmp_path_factory: pytest.TempPathFactory) -> Iterator[InProcessCluster]:
    root = tmp_path_factory.mktemp("typed-emb") / "g"
    write_partitioned(typed_graph(), root, 2, method="random", seed=3)
    c = InProcessCluster.start(root)
    yield c
    c.stop()


def server_config(c: InProcessCluster, **over: object):  # noqa: ANN201
    return config(c.loader.address, embeddings="server", graph_stores=[s.address for s in c.graph_stores], **over)


def tag_rows(c: InProcessCluster, job: str, dim: int = 16) -> np.ndarray:
    """Every tag's row of ``job``'s table, read from the graph-stores."""
    parts = RemotePartitionSet([s.address for s in c.graph_stores], timeout_s=10)
    emb = parts.embeddings()
    try:
        schema = parts.info.types
        return emb.pull(f"{job}:tag", schema.to_gids("tag", np.arange(schema.num_nodes("tag"))), dim)
    finally:
        emb.close()
        parts.close()


def test_rgcn_trains_tag_embeddings_in_the_graph_stores(cluster: InProcessCluster) -> None:
    trainer = Trainer(server_config(cluster, epochs=3, job_id="rgcn-srv"))
    try:
        assert isinstance(trainer.model.embed["tag"], RemoteEmbedding)
        assert not any("embed" in n for n, _ in trainer.model.named_parameters())  # nothing local
        before = tag_rows(cluster, "rgcn-srv")
        reports = trainer.fit()
        assert reports[-1].loss < reports[0].loss
        assert not np.array_equal(before, tag_rows(cluster, "rgcn-srv"))  # the tags learned, server-side
    finally:
        trainer.close()


def test_resume_after_a_crash_gives_the_same_rows_and_weights(cluster: InProcessCluster, tmp_path: Path) -> None:
    whole = Trainer(server_config(cluster, job_id="srv-whole", checkpoint=tmp_path / "whole.pt"))
    try:
        whole.fit()
    finally:
        whole.close()
    ckpt = tmp_path / "split.pt"
    # Checkpoints after steps 3 and 6; the "crash" comes after step 4, which the tables applied
    # but no checkpoint recorded: the resumed job must drop it and compute it again.
    first = Trainer(server_config(cluster, job_id="srv-split", checkpoint=ckpt, checkpoint_every=3, stop_after_steps=4))
    try:
        first.train_epoch()  # no fit(): nothing written after the 4th step, as in a kill -9
    finally:
        first.close()
    assert torch.load(ckpt)["embeddings_step"] == (0, 2)
    second = Trainer(server_config(cluster, job_id="srv-split", checkpoint=ckpt))
    try:
        second.fit()
    finally:
        second.close()
    a, b = torch.load(tmp_path / "whole.pt"), torch.load(ckpt)
    assert b["applied"] == a["applied"]  # same minibatches, digest for digest
    assert a["embeddings_step"] == b["embeddings_step"]
    for k, v in a["model"].items():
        assert torch.equal(v, b["model"][k]), k
    assert tag_rows(cluster, "srv-split").tobytes() == tag_rows(cluster, "srv-whole").tobytes()
