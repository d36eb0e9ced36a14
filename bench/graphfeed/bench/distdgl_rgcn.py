"""An RGCN training step inside DistDGL's trainer process (``python -m graphfeed.bench.distdgl
trainer --rgcn``): the DistDGL side of ``graphfeed bench embeddings``' throughput part.

The same :class:`~graphfeed.trainer.hetero_models.RGCN` as graphfeed's job, its featureless node
types embedded by ``dgl.distributed.DistEmbedding`` tables (each type's rows partitioned like its
nodes, held by the DistDGL servers) trained by ``dgl.distributed.optim.SparseAdam``, dense
parameters by Adam, as DistDGL's RGCN example trains ogbn-mag. Input features are pulled from
the ``feat`` DistTensors. DistDGL's partitions carry no labels, so the labels are drawn at random
(seeded): the step's work is the same, its accuracy meaningless; this is for steps/s only.

One trainer for two machines: DGL 2.1 creates a new DistTensor (a ``DistEmbedding``, each of
SparseAdam's state tensors) by each client asking the servers of *its own* machine to allocate
their part (``KVClient.init_data``), so with no trainer on machine 1 its server never gets the
tables and the first pull of a row it owns fails there. :func:`_init_on_every_machine` makes the
one trainer also send that request to the other machines' servers, as their trainers would.
"""

from __future__ import annotations

import functools
import math
from collections.abc import Callable
from typing import Any

import dgl
import torch
import torch.nn.functional as F
from torch import nn

from graphfeed.trainer.hetero_models import RGCN, input_features, rgcn_optimizers


def _init_on_every_machine() -> None:
    """Wraps ``KVClient.init_data`` to also send the request to the servers of every other machine."""
    from dgl.distributed import rpc
    from dgl.distributed.graph_partition_book import PartitionPolicy
    from dgl.distributed.kvstore import INIT_MSG, InitDataRequest, KVClient

    original = KVClient.init_data
    if getattr(original, "gf_every_machine", False):
        return

    def init_data(self: Any, name: str, shape: Any, dtype: Any, part_policy: Any, init_func: Any, *a: Any) -> None:
        original(self, name, shape, dtype, part_policy, init_func, *a)
        book = part_policy.partition_book
        for part in range(book.num_partitions()):
            if part == part_policy.part_id:
                continue
            other = PartitionPolicy(part_policy.policy_str, book)
            other._part_id = part  # noqa: SLF001 - the other machine's view of the same policy
            size = [other.get_part_size(), *list(shape)[1:]]
            req = InitDataRequest(
                name, tuple(size), dgl.backend.reverse_data_type_dict[dtype], other.policy_str, init_func
            )
            for n in range(self._group_count):
                rpc.send_request(part * self._group_count + n, req)
            for _ in range(self._group_count):
                assert rpc.recv_response().msg == INIT_MSG

    init_data.gf_every_machine = True  # type: ignore[attr-defined]
    KVClient.init_data = init_data


def _uniform(shape: tuple[int, int], dtype: torch.dtype, bound: float) -> torch.Tensor:
    return torch.empty(shape, dtype=dtype).uniform_(-bound, bound)


class DistEmbeddingModule(nn.Module):
    """A ``DistEmbedding`` as the RGCN's embedding of one type (no torch parameters)."""

    def __init__(self, g: Any, ntype: str, dim: int) -> None:
        super().__init__()
        n = g.num_nodes(ntype)
        # Xavier's bound, as the other systems' tables; DGL pickles the initializer to the
        # servers, so it is a module-level function (the servers import this module)
        init = functools.partial(_uniform, bound=math.sqrt(6.0 / (n + dim)))
        policy = g.get_node_partition_policy(ntype)
        self.table = dgl.distributed.DistEmbedding(n, dim, f"gf-emb-{ntype}", init, policy)

    def forward(self, ids: torch.Tensor) -> torch.Tensor:
        return self.table(ids)


def rgcn_trainer(
    g: Any, feat: dict[str, Any], target: str, hidden: int, lr: float, num_classes: int, num_layers: int
) -> Callable[[Any, int], tuple[int, dict[str, list[int]]]]:
    """``steps(loader, n)``: trains ``n`` minibatches of ``loader`` (new shuffled epochs as
    needed); returns the block edges and the feature rows pulled by type (as ``_minibatches``)."""
    _init_on_every_machine()
    if not torch.distributed.is_initialized():  # DistDGL's sparse optimizers step through a process group
        from graphfeed.bench.systems import free_port

        torch.distributed.init_process_group("gloo", init_method=f"tcp://127.0.0.1:{free_port()}", rank=0, world_size=1)
    torch.manual_seed(0)
    widths = {nt: int(t.shape[1]) for nt, t in feat.items()}
    embeddings = {nt: DistEmbeddingModule(g, nt, hidden) for nt in g.ntypes if nt not in feat}
    num_nodes = {nt: g.num_nodes(nt) for nt in g.ntypes}
    model = RGCN(g.canonical_etypes, widths, num_nodes, hidden, num_classes, num_layers, embeddings=embeddings)
    opts: list[Any] = rgcn_optimizers(model, lr)
    if embeddings:
        opts.append(dgl.distributed.optim.SparseAdam([m.table for m in embeddings.values()], lr=lr))
    labels = torch.Generator().manual_seed(0)

    def steps(loader: Any, n: int) -> tuple[int, dict[str, list[int]]]:
        edges = done = 0
        rows: dict[str, list[int]] = {}
        model.train()
        while done < n:
            for input_nodes, seeds, blocks in loader:  # a new shuffled epoch on each pass
                edges += sum(b.num_edges() for b in blocks)
                for nt, ids in input_nodes.items():
                    blocks[0].srcnodes[nt].data[dgl.NID] = ids
                    if nt in feat:
                        x = feat[nt][ids]
                        blocks[0].srcnodes[nt].data["feat"] = x
                        rows[nt] = [rows.get(nt, [0])[0] + x.shape[0], *x.shape[1:]]
                logits = model(blocks, input_features(blocks[0], "feat"))[target]
                y = torch.randint(num_classes, (len(seeds[target]),), generator=labels)
                loss = F.cross_entropy(logits, y)
                for opt in opts:
                    opt.zero_grad()
                loss.backward()
                for opt in opts:
                    opt.step()
                done += 1
                if done == n:
                    break
        return edges, rows

    return steps
