"""Look-ahead caching: Belady's rule over the minibatches already sampled.

The loader samples ``lookahead_steps`` minibatches ahead of gathering, and sampling is
deterministic, so the input nodes of those steps are the exact future accesses. The pipeline
announces each one as soon as it is sampled (:meth:`LookaheadCache.on_sampled`). Every
decision ranks rows by

1. when they are next accessed in the window (sooner first: Belady's rule, "evict what is
   needed furthest in the future"), then
2. how often they were accessed so far (more first): beyond the window nothing is known, and
   on skewed graphs past frequency predicts later accesses well.

After each minibatch (``admit``) the cache keeps the best ``capacity`` rows among those it held
and those just fetched (misses that rank lower are not cached: Belady's bypass). It also
prefetches, in the background, the misses of the sampled steps 2 to
``lookahead_prefetch_steps + 1`` ahead, into free slots or in place of rows needed nowhere in
the window and accessed less often. Prefetching never removes a fetch (every row is fetched
once per residence either way); it moves fetches off the minibatch path, and the displacement
rule keeps it from evicting a row with a known nearer use or a hotter row. With a full cache
and a window of a few steps (the steady state) it seldom finds room: Belady's rule already
keeps the cache full of rows the window needs.

Memory: the window holds ``lookahead_steps`` id arrays per stream (8 bytes per input node) on
top of the sampled blocks the pipeline holds anyway; the policy adds 14 bytes per graph node
(next-use time, access count, two masks)."""

from __future__ import annotations

import numpy as np

from graphfeed.loader.cache.base import AccessKey, CacheOptions, CachePolicy, Rows, RowsAt, all_rows
from graphfeed.loader.cache.belady import NEVER
from graphfeed.loader.cache.tiers import HostTier

_FREQ_MAX = np.int64(2**31 - 1)


class LookaheadCache(CachePolicy):
    """Belady over the sampled window, access frequency beyond it, background prefetch.

    Next uses are kept per node as a *time*, maintained incrementally: announcing a step
    lowers its nodes' next-use time to the step's; gathering a step re-resolves only that
    step's nodes, scanning the remaining window nearest first and stopping once all are found.
    A stream's step ``s`` has time ``base + s``, ``base`` fixed when the stream is first seen
    (so with several streams sharing the cache, they are assumed to advance at the same pace).

    Args:
        tier: the host tier.
        options: ``lookahead_prefetch_steps`` (0 disables prefetch).
    """

    name = "lookahead"

    def __init__(self, tier: HostTier, options: CacheOptions) -> None:
        super().__init__(tier)
        self.prefetch_steps = options.lookahead_prefetch_steps
        n = tier.num_nodes if tier.capacity_rows else 0
        self._window: dict[AccessKey, np.ndarray] = {}
        self._base: dict[int, int] = {}  # stream -> time of its step 0
        self._cursor: dict[int, int] = {}  # stream -> last step gathered
        self._planned: set[AccessKey] = set()  # steps whose misses were prefetched already
        self._clock = 0  # minibatches gathered, all streams
        self._next = np.full(n, NEVER, dtype=np.int64)  # time of each node's next announced access
        self._freq = np.zeros(n, dtype=np.int32)
        self._mark = np.zeros(n, dtype=bool)  # scratch
        self._inflight = np.zeros(n, dtype=bool)

    @property
    def window(self) -> list[AccessKey]:
        """Announced steps not gathered yet, sorted."""
        return sorted(self._window)

    def next_use(self, ids: np.ndarray) -> np.ndarray:
        """Steps from now until each node's next announced access (NEVER if none)."""
        t = self._next[np.asarray(ids, dtype=np.int64)]
        return np.where(t == NEVER, NEVER, t - self._clock)

    def on_sampled(self, key: AccessKey, ids: np.ndarray) -> None:
        if not self.tier.capacity_rows:
            return
        ids = np.asarray(ids, dtype=np.int64)
        self._window[key] = ids
        self._next[ids] = np.minimum(self._next[ids], self._time(key))  # a step's ids are unique
        self._plan_prefetch()

    def on_access(self, ids: np.ndarray, hit_mask: np.ndarray, key: AccessKey | None = None) -> None:
        if not self.tier.capacity_rows:
            return
        ids = np.asarray(ids, dtype=np.int64)
        self._freq[ids] += 1  # int32: wraps only after 2^31 accesses of one node
        if key is None:
            return
        now = self._time(key)
        self._clock = max(self._clock, now)
        self._window.pop(key, None)
        self._planned.discard(key)
        self._cursor[key[0]] = max(key[1], self._cursor.get(key[0], key[1]))
        self._resolve(ids[self._next[ids] <= now])

    def admit(self, miss_ids: np.ndarray, rows: Rows) -> None:
        if not self.tier.capacity_rows:
            return
        miss_ids = np.asarray(miss_ids, dtype=np.int64)
        new = ~self.tier.contains(miss_ids)  # a prefetch or another stream may have inserted some
        self._admit(miss_ids[new], RowsAt(rows, np.flatnonzero(new)))
        self._plan_prefetch()

    def forget(self, stream: int) -> None:
        gone = [k for k in self._window if k[0] == stream]
        stale = [self._window.pop(k) for k in gone]
        self._planned = {k for k in self._planned if k[0] != stream}
        self._cursor.pop(stream, None)
        self._base.pop(stream, None)
        if stale:
            self._resolve(np.unique(np.concatenate(stale)))

    # -- next uses and ranking ---------------------------------------------------------------

    def _time(self, key: AccessKey) -> int:
        stream, step = key
        if stream not in self._base:
            self._base[stream] = self._clock + 1 - step  # its first announced step is the next access
        return self._base[stream] + step

    def _resolve(self, ids: np.ndarray) -> None:
        """Recomputes the next-use time of ``ids`` from the window, nearest step first."""
        if not len(ids):
            return
        self._next[ids] = NEVER
        self._mark[ids] = True
        left = len(ids)
        for t, key in sorted((self._time(k), k) for k in self._window):
            entry = self._window[key]
            found = entry[self._mark[entry]]
            if len(found):
                self._next[found] = t
                self._mark[found] = False
                left -= len(found)
                if not left:
                    return
        self._mark[ids] = False

    def _rank(self, gids: np.ndarray) -> np.ndarray:
        """Sort key, lower = more worth keeping: (next-use time, -access count)."""
        return (self._next[gids] << 31) | (_FREQ_MAX - self._freq[gids])

    def _admit(self, ids: np.ndarray, rows: Rows) -> None:
        """Keeps the ``capacity`` best-ranked rows among those held and ``ids`` (O(held + ids))."""
        if len(ids) <= self.tier.num_free:
            self.tier.insert(ids, all_rows(rows))
            return
        cap = self.tier.capacity_rows
        used = self.tier.used_slots()
        keys = np.concatenate([self._rank(self.tier.ids_at(used)), self._rank(ids)])
        keep = np.zeros(len(keys), dtype=bool)
        keep[np.argpartition(keys, cap - 1)[:cap]] = True  # more candidates than capacity here
        self.tier.evict_slots(used[~keep[: len(used)]])
        take = keep[len(used) :]
        self.tier.insert(ids[take], rows[take])

    # -- prefetch --------------------------------------------------------------------------

    def _due(self) -> list[AccessKey]:
        """Announced steps 2 to ``prefetch_steps + 1`` ahead of a stream that has started, not
        planned yet. The very next step is skipped: its own gather starts before a prefetch
        could land. Before a stream's first gather the cache is filling on demand, and a
        prefetch would only race with that."""
        out = []
        for stream, step in self._window:
            cur = self._cursor.get(stream)
            if cur is not None and 2 <= step - cur <= self.prefetch_steps + 1 and (stream, step) not in self._planned:
                out.append((stream, step))
        return sorted(out)

    def _plan_prefetch(self) -> None:
        """Prefetches the misses of the due steps (see :meth:`_due`) that have room (see :meth:`_room_for`)."""
        if not self.prefetch_steps or self.prefetcher is None:
            return
        due = self._due()
        if not due:
            return
        want = self._window[due[0]] if len(due) == 1 else np.unique(np.concatenate([self._window[k] for k in due]))
        want = want[~self.tier.contains(want) & ~self._inflight[want]]
        if len(want):
            freq = self._freq[want]
            room = self._room_for(freq)
            if room < len(want):  # the most accessed first
                want = want[np.argsort(-freq, kind="stable")[:room]]
        if not len(want) or self._prefetch(want):
            self._planned.update(due)
            self._inflight[want] = True

    def _displaceable(self) -> tuple[np.ndarray, np.ndarray]:
        """Held slots a prefetch may take: rows needed nowhere in the window, and their access counts."""
        used = self.tier.used_slots()
        held = self.tier.ids_at(used)
        out = self._next[held] == NEVER
        return used[out], self._freq[held[out]]

    def _room_for(self, freq: np.ndarray) -> int:
        """How many of the candidates (their access counts ``freq``) a prefetch can place: the
        free slots, then, pairing the most accessed candidates with the least accessed
        displaceable rows, one row for each candidate accessed more often than it.

        Displacing only less-accessed rows keeps a prefetch from costing bytes: the candidate
        is fetched for its step anyway, while the displaced row, if it is needed again after
        the window, would have to be fetched once more.
        """
        free = self.tier.num_free
        if free >= len(freq):
            return len(freq)
        _, held = self._displaceable()
        if not len(held) or held.min() >= freq.max():  # the steady state: nothing to displace
            return free
        extra = -np.sort(-freq)[free : free + len(held)]
        return free + int(np.count_nonzero(extra > np.sort(held)[: len(extra)]))

    def _landed(self, ids: np.ndarray, rows: np.ndarray) -> None:
        super()._landed(ids, rows)
        self._inflight[ids] = False
        new = np.flatnonzero(~self.tier.contains(ids))
        new = new[np.argsort(-self._freq[ids[new]], kind="stable")]
        n = self._room_for(self._freq[ids[new]])
        n_evict = max(n - self.tier.num_free, 0)
        if n_evict:
            slots, held = self._displaceable()
            self.tier.evict_slots(slots[np.argsort(held, kind="stable")[:n_evict]])
        self.tier.insert(ids[new[:n]], np.asarray(rows)[new[:n]], prefetched=True)

    def _prefetch_failed(self, ids: np.ndarray, error: BaseException) -> None:
        super()._prefetch_failed(ids, error)
        self._inflight[ids] = False
