"""Trainable node embeddings held by the graph-stores (issue 25): DistDGL's ``DistEmbedding``
with ``SparseAdagrad``/``SparseAdam`` run where the rows live.

:class:`~graphfeed.graph_store.embeddings.store.EmbeddingStore` holds a partition's tables;
see :mod:`~graphfeed.graph_store.embeddings.table` for versions, durability and exact replay.
"""
