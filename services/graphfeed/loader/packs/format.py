"""The on-disk format of packed minibatch features.

A pack directory holds one epoch of one job's rank (``<pack root>/<job_key(job, epoch)>/``):

* ``manifest.json``: :class:`PackManifest`: the graph's identity, the job fields that decide
  the minibatches, the epoch, the feature's dtype and row shape, and per pack file its byte
  layout and checksums, per step its byte range and checksum.
* ``resident.npy``: the gids (int64, ascending) left out of the packs because many
  minibatches share them: a memory cache tier is meant to hold them.
* ``pack-NNNNN.bin``: the union of the non-resident input rows of consecutive steps, each row
  once, in the order the steps first read them: step ``first_step``'s rows, then the rows
  step ``first_step + 1`` adds, and so on (so a step's rows all lie in ``[0, offset +
  nbytes)``). The rows region is padded to :data:`ALIGN` bytes, then come the rows' gids
  (int64, same order), padded too, so that O_DIRECT reads need no bounce buffer.

Checksums are CRC-32 (``zlib.crc32``; xxhash is not a dependency): one per step's range of
rows and one for each pack's gids, so a flipped byte or a truncated file is detected before a
row is served. Files are written to a temporary name and renamed, the manifest last.
"""

from __future__ import annotations

import hashlib
import json
from dataclasses import asdict, dataclass, field
from pathlib import Path

import numpy as np

from graphfeed.common.errors import DataLoss, FailedPrecondition
from graphfeed.graph_store.types import PartitionInfo
from graphfeed.loader.job import JobSpec

FORMAT_VERSION = 1
ALIGN = 4096  # bytes: a page, and the O_DIRECT alignment of every block device we target
MANIFEST = "manifest.json"
RESIDENT = "resident.npy"


class PackMismatch(FailedPrecondition):
    """A pack written for another graph, job, fanouts or epoch than the one asked for."""


class PackCorrupt(DataLoss):
    """A pack file whose bytes fail their checksum, or shorter than its manifest says."""


def align(n: int) -> int:
    """``n`` rounded up to a multiple of :data:`ALIGN`."""
    return -(-n // ALIGN) * ALIGN


@dataclass(frozen=True)
class GraphIdentity:
    """What makes packed rows valid for a graph: the same nodes, layout and node-data schema."""

    dataset: str
    num_nodes: int
    num_edges: int
    node_offsets: tuple[int, ...]
    schema_digest: str  # of every node-data name, dtype and row shape, and the layout version

    @classmethod
    def of(cls, info: PartitionInfo) -> GraphIdentity:
        """The identity of the graph ``info`` (any partition's) describes."""
        schema = {n: [np.dtype(d.dtype).str, list(d.row_shape)] for n, d in sorted(info.node_data.items())}
        text = json.dumps({"node_data": schema, "schema_version": info.schema_version}, sort_keys=True)
        digest = hashlib.blake2b(text.encode(), digest_size=8).hexdigest()
        offsets = tuple(int(x) for x in info.node_offsets)
        return cls(info.dataset, int(info.num_nodes), int(info.num_edges), offsets, digest)


@dataclass(frozen=True)
class PackedJob:
    """The job fields that decide an epoch's minibatches and the rows packed for them."""

    job_seed: int
    split: str
    batch_size: int
    fanouts: tuple[int, ...]
    replace: bool
    shuffle: bool
    drop_last: bool
    rank: int
    world_size: int
    feature_name: str
    etype_fanouts: tuple[tuple[int, str, int], ...] = ()
    # an edge job's draw: (num_negatives, negative_sampler, negatives_avoid_positives, exclude); () a node job
    edges: tuple[int | str | bool, ...] = ()

    @classmethod
    def of(cls, job: JobSpec) -> PackedJob:
        """The fields of ``job`` that packing depends on (not its id, labels or wire dtype)."""
        edges = (job.num_negatives, job.negative_sampler, job.negatives_avoid_positives, job.exclude)
        return cls(
            job.job_seed,
            job.split,
            job.batch_size,
            tuple(job.fanouts),
            job.replace,
            job.shuffle,
            job.drop_last,
            job.rank,
            job.world_size,
            job.feature_name,
            tuple(tuple(e) for e in job.etype_fanouts),  # type: ignore[misc]
            edges if job.seed_edges else (),
        )

    def fields(self) -> dict:
        """The fields as JSON values; ``edges`` only for an edge job, so a node job's key (and
        packs written before edge jobs were packed) stays what it was."""
        d = asdict(self)
        if not self.edges:
            del d["edges"]
        return d


def job_key(job: JobSpec, epoch: int) -> str:
    """The directory name of ``job``'s packs for ``epoch`` under a pack root: a digest of
    :class:`PackedJob` (so a loader finds the packs of a job without being told where)."""
    text = json.dumps(PackedJob.of(job).fields(), sort_keys=True)
    return f"{hashlib.blake2b(text.encode(), digest_size=8).hexdigest()}-e{epoch}"


@dataclass(frozen=True)
class StepRange:
    """The rows a step reads first within its pack: ``nbytes`` at byte ``offset`` (CRC ``crc32``)."""

    step: int
    offset: int
    nbytes: int
    crc32: int
    num_input: int  # input nodes of the step
    num_packed: int  # of them, rows in the pack (the rest are resident)


@dataclass(frozen=True)
class PackFile:
    """One pack file: ``num_rows`` rows at byte 0, their gids at ``ids_offset`` (CRC ``ids_crc32``)."""

    file: str
    first_step: int
    num_rows: int
    ids_offset: int
    file_bytes: int
    ids_crc32: int
    steps: tuple[StepRange, ...]

    @property
    def rows_bytes(self) -> int:
        """Bytes of rows (unpadded): the end of the last step's range."""
        last = self.steps[-1]
        return last.offset + last.nbytes


@dataclass(frozen=True)
class PackManifest:
    """Everything needed to check and read one epoch's packs (see the module docstring)."""

    graph: GraphIdentity
    job: PackedJob
    epoch: int
    dtype: str
    row_shape: tuple[int, ...]
    num_steps: int
    num_resident: int
    resident_crc32: int
    packs: tuple[PackFile, ...]
    stats: dict[str, float] = field(default_factory=dict)
    format_version: int = FORMAT_VERSION

    @property
    def row_bytes(self) -> int:
        """Bytes of one feature row."""
        return np.dtype(self.dtype).itemsize * int(np.prod(self.row_shape, dtype=np.int64))

    def check(self, graph: GraphIdentity, job: JobSpec, epoch: int) -> None:
        """Refuses packs of another graph, job or epoch.

        Raises:
            PackMismatch: naming the first field that differs.
        """
        theirs = (("graph", self.graph, graph), ("job", self.job, PackedJob.of(job)), ("epoch", self.epoch, epoch))
        for what, have, want in theirs:
            if have == want:
                continue
            if isinstance(have, int):
                raise PackMismatch(f"the packs are for epoch {have}, not epoch {want}")
            for name, value in asdict(have).items():
                asked = getattr(want, name)
                if (tuple(value) if isinstance(value, list) else value) != asked:
                    raise PackMismatch(
                        f"the packs were written for another {what}: {name} is {value!r} there, {asked!r} here"
                    )
            raise PackMismatch(f"the packs were written for another {what}")

    def to_json(self) -> str:
        """The manifest as JSON text."""
        return json.dumps({**asdict(self), "row_bytes": self.row_bytes}, indent=1, sort_keys=True)

    @classmethod
    def load(cls, pack_dir: Path) -> PackManifest:
        """Reads ``pack_dir/manifest.json``.

        Raises:
            FailedPrecondition: missing, unreadable, or of another format version.
        """
        path = Path(pack_dir) / MANIFEST
        try:
            d = json.loads(path.read_text())
        except (OSError, ValueError) as exc:
            raise FailedPrecondition(f"cannot read the pack manifest {path}: {exc}") from exc
        if d.get("format_version") != FORMAT_VERSION:
            raise PackMismatch(f"{path} has pack format {d.get('format_version')}, this build reads {FORMAT_VERSION}")
        d.pop("row_bytes", None)
        g = d.pop("graph")
        d["graph"] = GraphIdentity(**{**g, "node_offsets": tuple(g["node_offsets"])})
        job = d["job"]
        etype_fanouts = tuple((int(a), str(b), int(c)) for a, b, c in job.get("etype_fanouts", ()))
        edges = tuple(job.get("edges", ()))
        d["job"] = PackedJob(
            **{**job, "fanouts": tuple(job["fanouts"]), "etype_fanouts": etype_fanouts, "edges": edges}
        )
        d["row_shape"] = tuple(d["row_shape"])
        d["packs"] = tuple(PackFile(**{**p, "steps": tuple(StepRange(**s) for s in p["steps"])}) for p in d["packs"])
        return cls(**d)

    def pack_of(self, step: int) -> int:
        """Index of the pack holding ``step``'s rows."""
        firsts = [p.first_step for p in self.packs]
        i = int(np.searchsorted(firsts, step, side="right")) - 1
        if not 0 <= step < self.num_steps or i < 0:
            raise FailedPrecondition(f"step {step} is not in the packs of epoch {self.epoch} ({self.num_steps} steps)")
        return i
