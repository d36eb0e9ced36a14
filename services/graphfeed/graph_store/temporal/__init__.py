"""The temporal graph (GNNFlow's dynamic graphs, issue 16): durable edge appends and temporal
sampling inside each graph-store, and their routing across graph-stores. The pieces:

- :mod:`~graphfeed.graph_store.temporal.store`: one partition's store (:class:`TemporalStore`:
  validation, idempotent appends, group commit, snapshots published to samplers);
- :mod:`~graphfeed.graph_store.temporal.index`: the time-indexed adjacency (GNNFlow's per-node
  block lists as a base CSR + append blocks chained per row) and immutable snapshots;
- :mod:`~graphfeed.graph_store.temporal.append_log`: the RocksDB log that makes an append durable
  before it is acknowledged and replays it at open;
- :mod:`~graphfeed.graph_store.temporal.sampling`: the compiled recent / uniform-before-t sampler;
- :mod:`~graphfeed.graph_store.temporal.compactor`: the background thread that compacts;
- :mod:`~graphfeed.graph_store.temporal.snapshot`: the compacted graph on disk, so that the
  log can be truncated and a restart replays only the batches after it.
- :mod:`~graphfeed.graph_store.temporal.types`: the values it returns;
- :mod:`~graphfeed.graph_store.temporal.client`: appends and multi-hop temporal sampling over a
  partition set, routed by owner (:class:`TemporalClient`);
- :mod:`~graphfeed.graph_store.temporal.replay`: ``graphfeed append``, a CSV of timestamped
  edges streamed into the graph-stores.
"""
