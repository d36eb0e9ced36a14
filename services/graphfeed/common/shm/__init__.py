"""Shared-memory transport for bulk tensors between processes on one host.

The bytes travel through files in a tmpfs directory (default ``/dev/shm``); a gRPC message
only carries (segment name, byte offset). docs/ARCHITECTURE.md ("Transport") tells the story;
this is the protocol, role by role (one module each).

Offer (:mod:`.offer`). Both sides must see the same directory (same host, same mount, same
user): the client writes a probe file and offers ``dir|probe|token`` in the call's metadata
(:class:`ShmOffer`, one per process and directory: :func:`shared_offer`); the server uses
shared memory only if it reads that token from that probe in an allowed directory
(:class:`OfferVerifier`), and otherwise answers inline.

Create (:mod:`.segment`, :mod:`.pool`). The writer creates one file per message
(:class:`Segment`, ``graphfeed-seg-<owner token>-<counter>-<hex>``) and lays the message's
arrays out in it (:class:`Arena`, 64-byte aligned). A writer that sends many equally large
messages (a loader's minibatch features) reuses its files instead (:class:`SegmentPool`):
allocating and zeroing fresh tmpfs pages costs more than the copy into them. A reused file
gets a fresh name per lease, so a name still means one message.

Claim (:mod:`.reader`). The reader maps the file copy-on-write and claims it at once
(:class:`SegmentReader`): a plain segment is unlinked (the mapping outlives the unlink, so
the kernel refcounts the memory and no ring buffer or cross-process slot tracking is needed);
a recycled one is renamed ``<name>.lent``, and ``<name>.free`` once its mapping is gone, when
the writer's pool may lease it again (the writer rewrites only ``.free`` files, so a reader
never sees a later message's bytes). A server that writes into a peer's recycled files keeps
its mappings across calls (:class:`PeerSegments`).

Unclaimed (:mod:`.registry`, :mod:`.backpressure`). The writer's :class:`SegmentRegistry`
removes (or hands back ``.free``) what nobody claims: at once when a stream is cancelled,
after a TTL otherwise, everything at shutdown. A stream bounds how many of its messages are
sent and not yet claimed (:class:`Backpressure`, woken by inotify when a file is claimed).

Quota (:mod:`.quota`). One client (one offer) may hold only so much unclaimed in the directory,
and some room is always kept free (:class:`ShmQuota`): past either, its next response or
minibatch goes inline instead, so a stuck or hostile client cannot make every other client's
segments fail for want of room. A segment that finds no room after all also goes inline.

Dead owners (:mod:`.owner_locks`). A writer that dies without cleaning up (SIGKILL, the OOM
killer) must not leave its files in the tmpfs for good (they are memory). Every writing process
holds an *owner lock* in the directory (``graphfeed-owner-<token>``, ``flock``-ed until it
exits; the kernel drops the lock however the process ends), and its segment and probe names
carry the token. The first process to write into a directory sweeps the files of every owner
whose lock is free (:func:`owner_token`, :func:`sweep_dead_owners`). ``flock`` works across
pods that share a node's ``/dev/shm``, where pids do not.
"""

from graphfeed.common.shm.backpressure import Backpressure, CallContext
from graphfeed.common.shm.files import (
    ALIGN,
    DEFAULT_DIR,
    FREE_SUFFIX,
    LENT_SUFFIX,
    METADATA_KEY,
    OWNER_PREFIX,
    PROBE_PREFIX,
    SEGMENT_PREFIX,
)
from graphfeed.common.shm.offer import OfferVerifier, ShmOffer, shared_offer
from graphfeed.common.shm.owner_locks import owner_token, sweep_dead_owners
from graphfeed.common.shm.pool import SegmentPool
from graphfeed.common.shm.quota import ShmQuota
from graphfeed.common.shm.reader import PeerSegments, SegmentReader
from graphfeed.common.shm.registry import SegmentRegistry
from graphfeed.common.shm.segment import Arena, Segment

__all__ = [
    "ALIGN",
    "DEFAULT_DIR",
    "FREE_SUFFIX",
    "LENT_SUFFIX",
    "METADATA_KEY",
    "OWNER_PREFIX",
    "PROBE_PREFIX",
    "SEGMENT_PREFIX",
    "Arena",
    "Backpressure",
    "CallContext",
    "OfferVerifier",
    "PeerSegments",
    "Segment",
    "SegmentPool",
    "SegmentReader",
    "SegmentRegistry",
    "ShmOffer",
    "ShmQuota",
    "owner_token",
    "shared_offer",
    "sweep_dead_owners",
]
