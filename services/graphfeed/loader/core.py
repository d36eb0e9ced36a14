"""The loader core: jobs, epoch plans, a feature cache per feature name, minibatch streams.

:class:`Loader` validates a job, plans its epoch (:mod:`graphfeed.loader.plan`) and starts a
:class:`~graphfeed.loader.stream.MinibatchStream` (look-ahead sampling, cached gathering,
bounded queue). Knows nothing of gRPC; metrics are recorded through the ``on_minibatch`` hook
and by reading :meth:`Loader.cache_stats` / :meth:`Loader.queue_depth`.
"""

from __future__ import annotations

import dataclasses
import logging
import threading
import weakref
from collections.abc import Callable
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path

import numpy as np

from graphfeed.common.buffers import BufferPool
from graphfeed.common.errors import InvalidArgument, NotFound, OutOfRange
from graphfeed.common.limits import FETCH_IDS_PER_CALL
from graphfeed.common.placement import HostPlacement, Placement
from graphfeed.common.schema import DEFAULT_NTYPE
from graphfeed.graph_store.types import NodeDataInfo, PartitionSet
from graphfeed.loader.cache.base import CacheOptions, TierStats
from graphfeed.loader.cache.options import check_policy
from graphfeed.loader.cache.policies import make_cache
from graphfeed.loader.cache.shared import CacheGroup, SharedCache
from graphfeed.loader.edges import EdgeSeeds, edge_seeds, edge_split_rows
from graphfeed.loader.gather import Gatherer
from graphfeed.loader.job import JobInfo, JobSpec
from graphfeed.loader.minibatch import ReadyMinibatch
from graphfeed.loader.packs.tier import PackStats, PackTier, open_pack_tier
from graphfeed.loader.plan import EpochPlan, split_ids
from graphfeed.loader.stream import Channel, MinibatchStream, StreamWork
from graphfeed.loader.wire import check_wire_dtype
from graphfeed.sampler.types import BlockSampler

__all__ = ["Loader"]

log = logging.getLogger(__name__)


class Loader:
    """Epoch plans, look-ahead sampling, a feature cache and bounded minibatch streams.

    Args:
        partitions: the graph's partitions (remote or in-process).
        sampler: multi-hop block sampler (remote or in-process).
        cache_policy: one of :data:`~graphfeed.loader.cache.base.POLICIES`: "none", "static_degree",
            "lru", "massivegnn" or "lookahead".
        cache_bytes: host cache budget per feature name, in bytes.
        cache_options: tuning of the massivegnn and lookahead policies (default: their defaults).
        gpu_cache_bytes: GPU cache tier budget per feature name, in bytes, in front of the host
            cache (0: none; ignored where no CUDA GPU with CuPy is usable).
        lookahead_steps: sampler calls kept in flight ahead of gathering, per stream (>= 1); the
            lookahead policy sees each step of this window as soon as it is sampled.
        max_inflight: ready minibatches buffered per stream (>= 1).
        sample_workers: threads running sampler calls, shared by all streams (>= 1).
        max_ids_per_request: ids per graph-store request.
        on_minibatch: called with each minibatch as the consumer takes it (for metrics).
        pack_root: where ``graphfeed pack`` wrote packed features; a stream whose job and epoch
            have packs there serves its cache misses from them (:mod:`graphfeed.loader.packs.tier`).
            None: no pack tier.
        pack_read_threads: preads in flight per pack read (>= 1).
        pack_direct_io: read packs with ``O_DIRECT`` (bypassing the page cache).
        pack_reuse: an epoch with no packs of its own is served from the job's nearest packed
            epoch's packs (exact rows; what they lack comes from the graph-stores).
    """

    def __init__(
        self,
        partitions: PartitionSet,
        sampler: BlockSampler,
        *,
        cache_policy: str = "static_degree",
        cache_bytes: int = 64 << 20,
        cache_options: CacheOptions | None = None,
        gpu_cache_bytes: int = 0,
        lookahead_steps: int = 8,
        max_inflight: int = 2,
        sample_workers: int = 2,
        max_ids_per_request: int = FETCH_IDS_PER_CALL,
        on_minibatch: Callable[[ReadyMinibatch], None] | None = None,
        pack_root: Path | None = None,
        pack_read_threads: int = 4,
        pack_direct_io: bool = False,
        pack_reuse: bool = True,
    ) -> None:
        check_policy(cache_policy)
        for name, value in (
            ("lookahead_steps", lookahead_steps),
            ("max_inflight", max_inflight),
            ("sample_workers", sample_workers),
        ):
            if value < 1:
                raise InvalidArgument(f"{name} must be >= 1, got {value}")
        self.partitions = partitions
        self.sampler = sampler
        self.cache_policy = cache_policy
        self.cache_bytes = cache_bytes
        self.cache_options = cache_options or CacheOptions()  # checked when it was made
        self.gpu_cache_bytes = gpu_cache_bytes
        self.lookahead_steps = lookahead_steps
        self.max_inflight = max_inflight
        self.max_ids_per_request = max_ids_per_request
        self.on_minibatch = on_minibatch
        self.pack_root = pack_root
        self.pack_read_threads = max(1, pack_read_threads)
        self.pack_direct_io = pack_direct_io
        self.pack_reuse = pack_reuse
        self.pack_stats = PackStats()
        self._pool = ThreadPoolExecutor(max_workers=sample_workers, thread_name_prefix="loader-sample")
        # host feature arrays of minibatches: a few per stream in flight (queued, being sent)
        self.host_placement = HostPlacement(BufferPool(max_buffers=2 * max_inflight + 2))
        self._lock = threading.Lock()
        self._splits: dict[str, np.ndarray] = {}
        self._edge_rows: dict[str, np.ndarray] = {}
        self._positives: np.ndarray | None = None  # keys of every edge split's edges (negatives_avoid_positives)
        self._caches: dict[str, SharedCache] = {}
        self._streams: weakref.WeakSet[MinibatchStream] = weakref.WeakSet()

    def _split_ids(self, name: str) -> np.ndarray:
        """The split's gids over all partitions, ascending (partitions own ascending ranges)."""
        with self._lock:
            if name not in self._splits:
                self._splits[name] = split_ids(self.partitions, name)
            return self._splits[name]

    def _plan(self, job: JobSpec, epoch: int) -> tuple[EpochPlan, EdgeSeeds | None]:
        """The epoch plan, and for an edge job (``seed_edges``) its edge seeds."""
        job.validate()
        if epoch < 0:
            raise InvalidArgument(f"epoch must be >= 0, got {epoch}")
        known = self.partitions.info.node_data
        # An edge job attaches no node labels; a graph with no node data at all trains on embeddings only.
        checked = [("feature_name", job.feature_name)] if known else []
        checked += [] if job.seed_edges else [("label_name", job.label_name)]
        for what, name in checked:
            if name and not self._tables(name):
                raise NotFound(f"{what} {name!r} is not a node-data name; known: {sorted(known)}")
        for key in self._tables(job.feature_name):
            check_wire_dtype(job, np.dtype(known[key].dtype))
        job.sampler_fanouts(self.partitions.info.types)  # edge types named in the job exist
        if job.seed_edges:
            edges = self._edge_seeds(job)
            return edges.plan(epoch), edges
        return EpochPlan.for_job(self._split_ids(job.split), job, epoch), None

    def _edge_seeds(self, job: JobSpec) -> EdgeSeeds:
        """The job's edge split (fetched once per name) with its negative and exclusion rules."""
        with self._lock:
            seeds = edge_seeds(self.partitions, job, self._edge_split, self._positives)
            if seeds.positives is not None:
                self._positives = seeds.positives
        return seeds

    def _edge_split(self, name: str) -> np.ndarray:
        """Edge split ``name``'s rows, fetched once (called under ``_lock``)."""
        if name not in self._edge_rows:
            self._edge_rows[name] = edge_split_rows(self.partitions, name)
        return self._edge_rows[name]

    def _tables(self, name: str) -> list[str]:
        return self.partitions.info.tables(name)

    def describe(self, job: JobSpec) -> JobInfo:
        """Steps and seeds per epoch for the job's rank, feature shape/type, classes, nodes.

        Raises:
            InvalidArgument: bad job spec (a ``feature_wire_dtype`` for features that are not
                floating point included). NotFound: unknown split or node-data name.
        """
        plan, edges = self._plan(job, 0)
        info = self.partitions.info
        tables = self._tables(job.feature_name)
        spec = info.node_data[tables[0]] if tables else None  # a typed graph: its first type's
        return JobInfo(
            plan.num_steps,
            plan.num_seeds,
            tuple(spec.row_shape) if spec else (),
            np.dtype(spec.dtype if spec else np.float32),
            info.num_classes,
            info.num_nodes,
            info.types,
            {info.node_data[k].ntype: tuple(info.node_data[k].row_shape) for k in self._tables(job.feature_name)}
            if info.types.is_hetero
            else {},
            "" if edges is None else edges.relation,
        )

    def _cache(self, feature_name: str) -> SharedCache:
        """The cache of node-data key ``feature_name``. In a typed graph each node type's table
        has its own, and ``cache_bytes`` is shared among the tables of one name in proportion to
        their sizes (rows x row bytes), so every type's hottest rows compete for a fair share."""
        with self._lock:
            if feature_name not in self._caches:
                info = self.partitions.info
                schema = info.types
                spec = info.node_data[feature_name]
                budget, select = self.cache_bytes, None
                if schema.is_hetero:
                    ntype, _, name = feature_name.partition("/")
                    sizes = {
                        k: schema.num_nodes(info.node_data[k].ntype) * _row_bytes(info.node_data[k])
                        for k in info.tables(name)
                    }
                    budget = int(self.cache_bytes * sizes[feature_name] / max(1, sum(sizes.values())))
                    t = schema.ntype_id(ntype)
                    select = lambda ids, t=t: ids[schema.ntype_of(ids) == t]  # noqa: E731
                policy = make_cache(
                    self.cache_policy,
                    budget,
                    row_shape=spec.row_shape,
                    dtype=spec.dtype,
                    num_nodes=info.num_nodes,
                    max_ids_per_request=self.max_ids_per_request,
                    options=self.cache_options,
                )
                if self.gpu_cache_bytes > 0:  # imported only when asked for: CPU-only loaders never load it
                    from graphfeed.loader.cache.gpu_tier import with_gpu_tier  # noqa: PLC0415 - the GPU kernels, for GPU tiers only

                    policy = with_gpu_tier(policy, self.gpu_cache_bytes, max_ids_per_request=self.max_ids_per_request)
                self._caches[feature_name] = SharedCache(policy, self.max_ids_per_request, select)
            return self._caches[feature_name]

    def stream(
        self,
        job: JobSpec,
        epoch: int,
        start_step: int = 0,
        placement: Placement | None = None,
        *,
        on_device: bool = False,
    ) -> MinibatchStream:
        """Starts streaming steps ``[start_step, steps_per_epoch)`` of ``epoch``.

        ``placement``: where each minibatch's host features are assembled (e.g. shared memory
        the consumer maps); None: :attr:`host_placement`, ordinary pooled memory.
        ``on_device``: when the feature's cache has a GPU tier, deliver features as device arrays
        (GPU and pinned host-tier hits read by one kernel, misses copied up; for a consumer in
        this process on that GPU, see :meth:`gpu_features`); otherwise ignored (NumPy arrays).
        A job's ``feature_wire_dtype`` converts host features after the gather (the cache keeps
        full precision; the converted features are then assembled in ordinary memory, ``placement``
        unused); device features stay at the stored precision (:mod:`graphfeed.loader.wire`).

        Raises:
            InvalidArgument: bad job spec. NotFound: unknown split or node-data name.
            OutOfRange: ``start_step`` past the end (equal to the end streams nothing).
            The stream itself raises whatever sampling or gathering raised (e.g. Unavailable).
        """
        plan, edges = self._plan(job, epoch)
        if edges is not None:
            job = dataclasses.replace(job, label_name="")  # DGL's edge loader attaches no node labels
        if not 0 <= start_step <= plan.num_steps:
            raise OutOfRange(f"start_step {start_step} is past the end of epoch {epoch} ({plan.num_steps} steps)")
        tables = [] if job.skip_features else self._tables(job.feature_name)
        caches = CacheGroup({key: self._cache(key) for key in tables})
        if self.partitions.info.types.is_hetero:
            on_device = False  # per-type features are host arrays (the GPU tier serves one-type graphs)
        if job.feature_wire_dtype:
            placement = None  # the features are converted before they are sent: no use assembling them in shared memory
            first = next(iter(caches.caches.values()))
            if on_device and first.device_policy is not None:  # device features cross no wire: stored precision
                job = dataclasses.replace(job, feature_wire_dtype="")
        gatherer = Gatherer(
            partitions=self.partitions,
            caches=caches,
            feature_name=job.feature_name,
            label_name=job.label_name,
            max_ids_per_request=self.max_ids_per_request,
            placement=placement or self.host_placement,
            on_device=on_device,
            packs=self._pack_tiers(job, epoch, list(caches.caches)),
        )
        work = StreamWork(
            sampler=self.sampler,
            pool=self._pool,
            gatherer=gatherer,
            job=job,
            fanouts=job.sampler_fanouts(self.partitions.info.types),
            plan=plan,
            edges=edges,
            start_step=start_step,
            lookahead_steps=self.lookahead_steps,
            channel=Channel(self.max_inflight),
        )
        log.info(
            "stream job=%s rank=%d/%d epoch=%d steps [%d, %d)",
            job.job_id,
            job.rank,
            job.world_size,
            epoch,
            start_step,
            plan.num_steps,
        )
        stream = MinibatchStream(work, self.on_minibatch)
        self._streams.add(stream)
        return stream

    def _pack_tiers(self, job: JobSpec, epoch: int, keys: list[str]) -> dict[str, PackTier]:
        """The packed tier of each table ``keys`` names that has packs for ``job``'s ``epoch``
        (a typed graph's tables are packed apart, each under the job with its key as feature)."""
        if self.pack_root is None:
            return {}
        tiers = {}
        for key in keys:
            tier = open_pack_tier(
                self.pack_root,
                self.partitions.info,
                dataclasses.replace(job, feature_name=key) if key != job.feature_name else job,
                epoch,
                self.pack_stats,
                lookahead_steps=self.lookahead_steps,
                threads=self.pack_read_threads,
                direct=self.pack_direct_io,
                reuse=self.pack_reuse,
            )
            if tier is not None:
                tiers[key] = tier
        return tiers

    def warm_cache(self, feature_name: str) -> None:
        """Fills ``feature_name``'s caches now (as its first stream would at its first
        minibatch), so that a job's start does not pay for it.

        Raises:
            KeyError: not a node-data name.
        """
        keys = self._tables(feature_name)
        if not keys:
            raise KeyError(feature_name)
        for key in keys:
            self._cache(key).ensure_warm(self.partitions, key)

    def gpu_features(self, feature_name: str) -> bool:
        """Whether streams with ``on_device`` deliver this feature as device arrays (its cache
        has a GPU tier: ``gpu_cache_bytes`` > 0 and a usable GPU; one-type graphs)."""
        if self.partitions.info.types.is_hetero:
            return False
        return self._cache(feature_name).device_policy is not None

    def cache_stats(self, by_ntype: bool = False) -> list[TierStats]:
        """Counters per tier name, summed over the caches of all feature names (``by_ntype``:
        per tier and node type, the node type of each cache's table: a label set bounded by
        the graph's schema)."""
        with self._lock:
            tiers = [
                dataclasses.replace(t.stats(), ntype=self.partitions.info.node_data[key].ntype)
                if by_ntype
                else t.stats()
                for key, c in self._caches.items()
                for t in c.policy.tiers()
            ]
        out: dict[tuple[str, str], TierStats] = {}
        for t in tiers:
            k = (t.tier, t.ntype)
            out[k] = t if k not in out else out[k] + t
        if self.pack_root is not None:
            out[("pack", DEFAULT_NTYPE)] = self.pack_stats.tier()
        return list(out.values())

    def queue_depth(self) -> int:
        """Ready minibatches waiting in all open streams."""
        return sum(s.queued for s in list(self._streams))

    def open_streams(self) -> int:
        """Streams handed out and not yet closed (StreamMinibatches calls in progress)."""
        return sum(1 for s in list(self._streams) if not s.closed)

    def close(self) -> None:
        """Stops every stream, the sampling pool and background prefetches (partitions and sampler
        stay open: the caller owns them)."""
        for s in list(self._streams):
            s.close()
        self._pool.shutdown(wait=False, cancel_futures=True)
        with self._lock:
            for c in self._caches.values():
                c.close()


def _row_bytes(spec: NodeDataInfo) -> int:
    return int(np.dtype(spec.dtype).itemsize * int(np.prod(spec.row_shape, dtype=np.int64)))
