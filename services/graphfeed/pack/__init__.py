"""Offline sampling and packed minibatch features (DiskGNN).

graphfeed's sampling is a pure function of (job seed, epoch, step), so an epoch's minibatches
can be sampled ahead of training and the feature rows each one will read are known.
``graphfeed pack`` (``graphfeed.pack.writer``) samples an epoch exactly as the loader
would, groups consecutive minibatches into packs and writes each pack's union of input rows
once, contiguously, in the order its minibatches first read them; the rows many minibatches
share are not packed but listed as memory-resident (a cache tier holds them anyway).
:class:`~graphfeed.pack.reader.PackReader` serves a minibatch's rows from its pack with a few
large preads, verifying checksums. The format is in :mod:`graphfeed.pack.format`.
"""
