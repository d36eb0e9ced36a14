"""graphfeed.trainer.linkpred: link prediction (issue 26) over the edge splits made at ingest.

- :mod:`.config`: :class:`~.config.LinkPredConfig`, the hyper-parameters.
- :mod:`.models`: encoders (GraphSAGE, RGCN) with no class head, the :class:`~.models.DotScorer`
  and :class:`~.models.MLPScorer` of node pairs, the BCE and margin losses, and
  :func:`~.models.build_link_predictor`.
- :mod:`.metrics`: MRR and Hits@K as OGB's linkproppred Evaluator ranks, Recall@K and NDCG@K as
  LightGCN evaluates user-item graphs, and :func:`~.metrics.eval_negatives`: the one source of
  evaluation negatives, so graphfeed and the DGL reference rank against the same ones.
- :mod:`.inference`: layer-wise full-neighbor inference (DGL's GraphSAGE example), one loop
  for any source of one-layer blocks.
- :mod:`.evaluate`: the metrics of a split from every node's embedding.
- :mod:`.baseline`: the reference run entirely in-process with DGL's own DataLoader.
"""
