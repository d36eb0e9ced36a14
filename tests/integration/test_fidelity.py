"""GraphSAGE on Cora through graphfeed learns as well as with DGL's in-process DataLoader.

Same model class, init seed, 60/20/20 split, fanouts and hyper-parameters; accuracy is
averaged over three seeds so that a real regression, not seed noise, decides.
"""

from __future__ import annotations

import numpy as np
import pytest

from graphfeed.trainer.baseline import train_in_process
from graphfeed.trainer.train import TrainConfig, Trainer

pytestmark = [pytest.mark.integration, pytest.mark.slow]
SEEDS = (0, 1, 2)


def test_graphsage_on_cora_matches_in_process_dgl(cora, cora_cluster) -> None:  # noqa: ANN001
    ours, theirs = [], []
    for seed in SEEDS:
        cfg = TrainConfig(
            loader_address=cora_cluster.loader.address, epochs=10, batch_size=256, fanouts=[10, 10], seed=seed, job_id=f"fid-{seed}"
        )
        trainer = Trainer(cfg)
        try:
            trainer.fit()
            ours.append(trainer.evaluate("test"))
        finally:
            trainer.close()
        theirs.append(train_in_process(cora, cfg)["test_acc"])
    print(f"graphfeed test acc {ours} mean {np.mean(ours):.4f}; in-process DGL {theirs} mean {np.mean(theirs):.4f}")
    assert np.mean(ours) >= 0.80
    assert abs(np.mean(ours) - np.mean(theirs)) <= 0.02
