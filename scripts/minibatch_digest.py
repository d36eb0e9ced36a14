"""Digest of every minibatch a fixed job streams, through every path: for refactors that must
not change what trainers receive.

Starts two graph-stores, a sampler and a loader on ``DATA`` (an ingested graph) twice — with
shared memory and with every tensor inline on the wire — and streams two epochs of ``train``
(shuffled) and one pass of ``val`` through ``RemoteDataLoader``, plus two epochs through
``EmbeddedDataLoader``; each minibatch's input/output nodes, every block's edges and ids, the
input features and the labels are hashed. Run it from two checkouts and compare the JSON::

    python scripts/minibatch_digest.py DATA before.json      # at the old commit
    python scripts/minibatch_digest.py DATA after.json       # at the new one
    cmp before.json after.json
"""

from __future__ import annotations

import hashlib
import json
import sys
import tempfile
from pathlib import Path
from typing import Any

import numpy as np


def _h(x: Any) -> str:
    a = np.ascontiguousarray(x.numpy() if hasattr(x, "numpy") else x)
    return hashlib.sha256(a.tobytes() + str(a.dtype).encode() + str(a.shape).encode()).hexdigest()[:16]


def _digest(loader: Any, epochs: int) -> list[str]:
    out = []
    for epoch in range(epochs):
        loader.set_epoch(epoch)
        for input_nodes, output_nodes, blocks in loader:
            parts = [_h(input_nodes), _h(output_nodes)]
            for b in blocks:
                src, dst = b.edges()
                parts += [_h(src), _h(dst), _h(b.edata["_ID"]), _h(b.srcdata["_ID"])]
            parts += [_h(blocks[0].srcdata["feat"]), _h(blocks[-1].dstdata["label"])]
            out.append(hashlib.sha256("".join(parts).encode()).hexdigest()[:16])
    return out


def main(data: Path, out: Path) -> None:
    from graphfeed.cluster import LocalCluster
    from graphfeed.graph_store.partitions import RemotePartitionSet
    from graphfeed.loader.core import Loader
    from graphfeed.sampler.client import SamplerClient
    from graphfeed.trainer.dataloader import EmbeddedDataLoader, RemoteDataLoader

    result: dict[str, list[str]] = {}
    for name, shm_dir in (("shm", "/dev/shm"), ("inline", "")):
        with tempfile.TemporaryDirectory() as logs:
            cluster = LocalCluster.start(data, Path(logs), shm_dir=None if shm_dir else "")
            try:
                if cluster.loader is None or cluster.sampler is None:
                    raise RuntimeError("the cluster started without a loader or sampler")
                for split, shuffle, epochs in (("train", True, 2), ("val", False, 1)):
                    remote = RemoteDataLoader(
                        cluster.loader.address,
                        split,
                        fanouts=[5, 10],
                        batch_size=512,
                        seed=7,
                        shuffle=shuffle,
                        shm_dir=shm_dir,
                    )
                    result[f"{name}-{split}"] = _digest(remote, epochs)
                    remote.close()
                partitions = RemotePartitionSet([s.address for s in cluster.graph_stores])
                core = Loader(
                    partitions, SamplerClient(cluster.sampler.address), cache_policy="lru", cache_bytes=1 << 20
                )
                embedded = EmbeddedDataLoader(core, "train", fanouts=[5, 10], batch_size=512, seed=7, shuffle=True)
                result[f"{name}-embedded"] = _digest(embedded, 2)
                core.close()
                partitions.close()
            finally:
                cluster.stop()
    out.write_text(json.dumps(result, indent=0))
    print(f"{sum(map(len, result.values()))} minibatch digests -> {out}")


if __name__ == "__main__":
    main(Path(sys.argv[1]), Path(sys.argv[2]))
