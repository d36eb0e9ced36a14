"""Packed out-of-core features (DiskGNN), the loader's side: :mod:`.format` (the on-disk layout a
pack writer and reader share), :mod:`.reader` (preads, optionally ``O_DIRECT``) and :mod:`.tier`
(the tier between the cache and the graph-stores). ``graphfeed pack`` writes them
(:mod:`graphfeed.pack`)."""
