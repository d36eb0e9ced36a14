"""The loader's feature cache, one package for the whole family.

- :mod:`.base`: the :class:`~graphfeed.loader.cache.base.CachePolicy` /
  ``DeviceCachePolicy`` interfaces and the simple policies (none, static by degree, LRU);
- :mod:`.options`: the policies' tuning, declared once (``CacheOptions``);
- :mod:`.policies`: ``make_cache``, the one place a policy is built by name;
- :mod:`.massivegnn` (MassiveGNN's score-decay prefetch and eviction), :mod:`.lookahead`
  (Belady's rule over the sampled window) and :mod:`.belady` (the offline bound);
- :mod:`.tiers` (host slots) and :mod:`.gpu_tier` (a GPU tier around any policy; CuPy only there);
- :mod:`.shared` (one cache per feature, shared by a loader's streams) and :mod:`.prefetch`
  (fetches off the minibatch path).
"""
