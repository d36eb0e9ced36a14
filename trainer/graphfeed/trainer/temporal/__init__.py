"""graphfeed.trainer.temporal: continuous TGN training on a stream of timestamped interactions.

- :mod:`.events`: the stream (CollegeMsg, LastFM tag events), chronological 70/15/15 split.
- :mod:`.neighbors`: the :class:`~.neighbors.NeighborSource` protocol and the in-process
  reference (most recent k in-edges strictly before t, vectorized NumPy).
- :mod:`.store_source`: the same protocol over graphfeed's temporal graph-store API.
- :mod:`.model`, :mod:`.memory`: the TGN weights and the per-node memory the trainer keeps.
- :mod:`.loop`: chronological training, AP / MRR per chunk, atomic checkpoints, exact resume.

Run ``python -m graphfeed.trainer.temporal --dataset collegemsg`` (see ``--help``).
"""
