"""graphfeed.trainer: the client side of graphfeed, for training scripts.

``RemoteDataLoader`` is a drop-in for ``dgl.dataloading.DataLoader`` fed by a graphfeed
loader service::

    from graphfeed.trainer import RemoteDataLoader
    loader = RemoteDataLoader("127.0.0.1:50051", "train", fanouts=[10, 10], batch_size=256)
    for input_nodes, output_nodes, blocks in loader:
        x = blocks[0].srcdata["feat"]; y = blocks[-1].dstdata["label"]

``EmbeddedDataLoader`` has the same interface over a ``graphfeed.loader.core.Loader`` running in
the trainer's process (no loader service; on a GPU with a GPU cache tier, features arrive on
the device through DLPack).
"""

from __future__ import annotations

import importlib
from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:
    from graphfeed.trainer.dataloader import EmbeddedDataLoader, EpochStats, RemoteDataLoader

__all__ = ["EmbeddedDataLoader", "EpochStats", "RemoteDataLoader"]


def __getattr__(name: str) -> Any:
    # Imported on first use (PEP 562): the data loaders pull in torch and DGL (seconds), which
    # ``graphfeed --help`` does not need when it reads graphfeed.trainer.config.
    if name in __all__:
        return getattr(importlib.import_module("graphfeed.trainer.dataloader"), name)
    raise AttributeError(f"module {__name__!r} has no attribute {name!r}")
