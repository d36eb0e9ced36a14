"""Edge minibatches (link prediction) as systems of ``bench throughput --edges RELATION``.

Both sides train on the rows of edge split ``train`` (:func:`graphfeed.bench.harness.edge_rows`):
``batch_size`` positive edges per minibatch, ``num_negatives`` uniform negatives each (the
destination corrupted over its node type), and each minibatch's seed edges and their reverse
twins left out of every hop (``exclude="reverse_id"``, the twin from the rows' ``rev_eid``):

- in-process DGL: ``DataLoader`` over the train edge ids with ``as_edge_prediction_sampler(
  NeighborSampler(fanouts), exclude=<seeds + twins>, negative_sampler=Uniform(k))`` on the graph
  :func:`~graphfeed.bench.harness.load_global` builds (whose edge ids are graphfeed's global
  ones in a one-type graph, and graphfeed's minus the type's first id, type-wise, in a typed one);
- the sampler service (``gf_sampler``): the loader's own step (:func:`graphfeed.loader.edges.sample_step`:
  seeds, negatives, exclusions) with the sampling call to the service;
- the data loaders (``gf_e2e``, ``gf_embedded``): :func:`job` added to their job.
"""

from __future__ import annotations

from typing import Any

import numpy as np

from graphfeed.bench.systems import System, steady

EXCLUDE = "reverse_id"
NEGATIVE_SAMPLER = "uniform"
DISTDGL_EXCLUSION = (
    "nominal: DGL 2.1's DistGraph.sample_neighbors ignores exclude_edges, so DistDGL's neighbourhoods keep "
    "the seed edges and their twins (less work than graphfeed and in-process DGL)"
)


def job(num_negatives: int) -> dict[str, Any]:
    """The edge fields of a graphfeed job, as the DGL side samples."""
    return {
        "seed_edges": True,
        "num_negatives": num_negatives,
        "negative_sampler": NEGATIVE_SAMPLER,
        "exclude": EXCLUDE,
    }


def describe(rows: np.ndarray, schema: Any, num_negatives: int) -> dict[str, Any]:
    """What a report says of edge mode."""
    from graphfeed.common.schema import etype_name

    return {
        "relation": etype_name(schema.etypes[int(rows[0, 2])]),
        "num_negatives": num_negatives,
        "negative_sampler": NEGATIVE_SAMPLER,
        "exclude": EXCLUDE,
        "train_edges": len(rows),
        "train_edges_with_twin": int((rows[:, 4] >= 0).sum()),
    }


def _typewise(schema: Any, eids: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """``(edge type ids, type-wise ids)`` of global edge ids (DGL's ids in load_global's graph)."""
    types = schema.etype_of(eids)
    return types, eids - np.asarray(schema.etype_offsets, np.int64)[types]


def reference_edges(g: Any, rows: np.ndarray, schema: Any) -> dict[str, Any]:
    """The train edges in load_global's graph ``g``: ``etype`` (canonical; None on a one-type
    graph), ``seeds`` (edge ids), ``twins`` (each seed's reverse twin, -1 for none) and ``rev``
    (the twins' canonical type; None on a one-type graph)."""
    import torch

    eids, twins = rows[:, 3], rows[:, 4].copy()
    if g.is_homogeneous:
        return {"etype": None, "rev": None, "seeds": torch.from_numpy(eids), "twins": torch.from_numpy(twins)}
    canon = tuple(schema.etypes[int(rows[0, 2])])
    has = twins >= 0
    twin_types, twins[has] = _typewise(schema, twins[has])
    if len(twin_types) and (twin_types != twin_types[0]).any():
        raise ValueError("the reverse twins of one relation span several edge types")
    rev = tuple(schema.etypes[int(twin_types[0])]) if len(twin_types) else canon
    seeds = torch.from_numpy(_typewise(schema, eids)[1])
    return {"etype": canon, "rev": rev, "seeds": seeds, "twins": torch.from_numpy(twins)}


def dgl_exclusion(g: Any, rows: np.ndarray, schema: Any) -> tuple[Any, Any]:
    """``(train edge ids, exclude)`` for DGL's edge DataLoader on load_global's graph ``g``: the
    seeds (a tensor, or ``{canonical etype: tensor}`` on a heterograph) and a callable that maps a
    minibatch's seed edges to them plus their reverse twins (graphfeed's ``reverse_id``)."""
    import torch

    e = reference_edges(g, rows, schema)
    canon, rev, seeds, twins = e["etype"], e["rev"], e["seeds"], e["twins"]
    has = twins >= 0
    table = torch.full((g.num_edges(canon),), -1, dtype=torch.int64)
    table[seeds[has]] = twins[has]
    if canon is None:

        def exclude(seed_edges: Any) -> Any:
            twin = table[seed_edges]
            return torch.cat([seed_edges, twin[twin >= 0]])

        return seeds, exclude

    def exclude_typed(seed_edges: dict) -> dict:
        own = seed_edges[canon]
        twin = table[own]
        twin = twin[twin >= 0]
        if rev == canon:
            return {canon: torch.cat([own, twin])}
        return {canon: own, rev: twin}

    return {canon: seeds}, exclude_typed


def dgl_system(
    g: Any,
    feat: Any,
    rows: np.ndarray,
    schema: Any,
    fanouts: list[int],
    batch_size: int,
    num_negatives: int,
    gather: bool,
) -> System:
    """In-process DGL's edge DataLoader (+ ``feat[input_nodes]`` with ``gather``; per type on a
    heterograph, ``feat`` then ``{ntype: table}``)."""
    import dgl

    seeds, exclude = dgl_exclusion(g, rows, schema)
    sampler = dgl.dataloading.as_edge_prediction_sampler(
        dgl.dataloading.NeighborSampler(fanouts),
        exclude=exclude,
        negative_sampler=dgl.dataloading.negative_sampler.Uniform(num_negatives),
    )
    loader = dgl.dataloading.DataLoader(g, seeds, sampler, batch_size=batch_size, shuffle=True, drop_last=False)

    def gather_rows(input_nodes: Any) -> object:
        if isinstance(feat, dict):
            return {t: table[input_nodes[t]] for t, table in feat.items() if t in input_nodes}
        return feat[input_nodes]

    return steady(lambda _epoch: loader, gather_rows if gather else None)


def sampler_system(
    address: str,
    rows: np.ndarray,
    schema: Any,
    fanouts: list[int],
    batch_size: int,
    num_negatives: int,
    inflight: int,
    shm_dir: str | None,
) -> System:
    """The loader's edge step against the sampler service (seeds = every endpoint of the
    positives and negatives, their exclusions on the wire), ``inflight`` calls outstanding,
    taken in step order, blocks decoded here."""
    from concurrent.futures import ThreadPoolExecutor

    from graphfeed.loader.edges import EdgeSeeds, sample_step
    from graphfeed.loader.job import JobSpec
    from graphfeed.sampler.client import SamplerClient

    client = SamplerClient(address, shm_dir=shm_dir or None)
    spec = JobSpec(fanouts=tuple(fanouts), batch_size=batch_size, job_id="bench-sampler", **job(num_negatives))
    edges = EdgeSeeds(rows, schema, spec, None)
    pool = ThreadPoolExecutor(max_workers=inflight, thread_name_prefix="bench-edge-sample")
    epoch = [0]

    def run(steps: int) -> int:
        epoch[0] += 1
        plan = edges.plan(epoch[0])

        def call(s: int) -> Any:
            return pool.submit(sample_step, client, spec, fanouts, plan, edges, s)

        calls = {s: call(s) for s in range(min(inflight, steps))}
        sampled = 0
        for step in range(steps):
            sb, _pairs = calls.pop(step).result()
            if step + inflight < steps:
                calls[step + inflight] = call(step + inflight)
            sampled += sb.num_sampled_edges
        return sampled

    return run
