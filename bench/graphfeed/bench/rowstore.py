"""``graphfeed bench rowstore``: where a bounded-memory graph-store reads its rows from (issue 17).

One partition of ``--rows`` random 512-byte rows (float32 x 128) is written by the real
partition writer (RocksDB in 1 MiB row chunks + the flat ``node_data/feat.bin``), plus a
RocksDB keyed per row. Batches of ``--batches`` sorted unique random row ids are read by:

* ``rocksdb_chunks``: ``multi_get`` of the chunks holding the rows (the layout ingest writes),
  then the rows sliced out;
* ``rocksdb_rows``: ``multi_get`` of per-row keys (what re-keying the store would give);
* ``flat_pread`` / ``flat_direct``: :class:`~graphfeed.graph_store.diskrows.FlatRows`,
  buffered or ``O_DIRECT``, with 1, 4 and 8 I/O threads;
* ``memmap``: ``np.memmap`` fancy indexing of the flat file (what PyG/DGL users do);
* ``store_direct_25pct``: the graph-store itself at a budget of 25 % of the table, ``O_DIRECT``,
  8 I/O threads.

**cold**: the page cache is dropped (``echo 1 > /proc/sys/vm/drop_caches``, root) and RocksDB
reopened before every sample; **warm**: the whole file is in the page cache. Disk bytes are
the process's storage reads (``/proc/self/io`` ``read_bytes``); amplification is those over
the bytes of the rows asked for. Without root, cold runs are skipped (``O_DIRECT`` is then the
only honest cold number, and it is in the warm table).

Examples::

    graphfeed bench rowstore                        # 500k rows (256 MB), ~3 min on 2 cores
    graphfeed bench rowstore --quick                # 200k rows, 10k-row batches, 1 sample
"""

from __future__ import annotations

import argparse
import statistics
import tempfile
import time
from collections.abc import Callable
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path
from typing import cast

import numpy as np
from rocksdict import AccessType, Options, Rdict, WriteBatch

from graphfeed.bench import harness
from graphfeed.bench.disk_stores import drop_caches, read_bytes
from graphfeed.common.partition import PartitionReader, flat_node_data_path, part_dir_name
from graphfeed.graph_store.diskrows import FlatRows, direct_alignment
from graphfeed.graph_store.store import GraphStore
from graphfeed.ingest.graph import GraphData
from graphfeed.ingest.partition import write_partitioned

F = 128  # float32 features: 512-byte rows
ROW_BYTES = F * 4
Reader = Callable[[np.ndarray], np.ndarray]


def _warm(path: Path) -> None:
    with open(path, "rb") as f:
        while f.read(16 << 20):
            pass


def build(root: Path, rows: int) -> Path:
    """Writes one partition of ``rows`` random feature rows and a per-row RocksDB next to it."""
    v = np.arange(rows, dtype=np.int64)
    feat = np.random.default_rng(0).random((rows, F), dtype=np.float32)
    g = GraphData(
        name="rowstore-bench",
        num_nodes=rows,
        src=(v + 1) % rows,
        dst=v,
        node_data={"feat": feat},
        splits={},
        num_classes=1,
    )
    write_partitioned(g, root, 1, method="random")
    db = Rdict(str(root / "per-row-db"), options=_raw_options())
    for start in range(0, rows, 50_000):
        wb = WriteBatch(raw_mode=True)
        for r in range(start, min(rows, start + 50_000)):
            wb.put(_row_key(r), feat[r].tobytes())
        db.write(wb)
    db.flush()
    db.close()
    return root / part_dir_name(0)


def _raw_options() -> Options:
    opt = Options(raw_mode=True)
    opt.create_if_missing(True)
    return opt


def _row_key(r: int) -> bytes:
    return b"r/%010d" % r


def _rocksdb_chunks(part: Path) -> tuple[Reader, Callable[[], None]]:
    reader = PartitionReader(part)
    per_chunk = reader.manifest.node_data["feat"].rows_per_chunk
    db = reader._db  # noqa: SLF001 - the bench reads the stored chunks the way a multi_get store would

    def read(ids: np.ndarray) -> np.ndarray:
        chunks = np.unique(ids // per_chunk)
        values = cast("list[bytes]", db.get([b"nd/feat/%08d" % c for c in chunks]))
        out = np.empty((len(ids), F), np.float32)
        where = np.searchsorted(chunks, ids // per_chunk)
        for k, value in enumerate(values):
            mine = np.flatnonzero(where == k)
            out[mine] = np.frombuffer(value, np.float32).reshape(-1, F)[ids[mine] - chunks[k] * per_chunk]
        return out

    return read, reader.close


def _rocksdb_rows(root: Path) -> tuple[Reader, Callable[[], None]]:
    db = Rdict(str(root / "per-row-db"), options=_raw_options(), access_type=AccessType.read_only())

    def read(ids: np.ndarray) -> np.ndarray:
        values = cast("list[bytes]", db.get([_row_key(int(r)) for r in ids]))
        return np.frombuffer(b"".join(values), np.float32).reshape(-1, F)

    return read, db.close


def _flat(part: Path, direct: bool, threads: int) -> tuple[Reader, Callable[[], None]]:
    pool = ThreadPoolExecutor(threads) if threads > 1 else None
    rows = PartitionReader(part)
    n = rows.num_owned
    rows.close()
    flat = FlatRows(flat_node_data_path(part, "feat"), n, ROW_BYTES, direct=direct, pool=pool)

    def read(ids: np.ndarray) -> np.ndarray:
        out = np.empty((len(ids), F), np.float32)
        flat.read(ids, out, np.arange(len(ids), dtype=np.int64))
        return out

    def close() -> None:
        flat.close()
        if pool is not None:
            pool.shutdown()

    return read, close


def _memmap(part: Path) -> tuple[Reader, Callable[[], None]]:
    table = np.memmap(flat_node_data_path(part, "feat"), dtype=np.float32, mode="r").reshape(-1, F)
    return (lambda ids: np.asarray(table[ids])), lambda: None


def _store(part: Path, budget: int) -> tuple[Reader, Callable[[], None]]:
    store = GraphStore.open(part, memory_budget=budget, direct_io=True, io_threads=8)
    return (lambda ids: store.get_node_data("feat", ids)), store.close


def methods(root: Path, part: Path, table_bytes: int) -> dict[str, Callable[[], tuple[Reader, Callable[[], None]]]]:
    """Every way of reading rows the bench compares, by name; each opens fresh (cold caches)."""
    out: dict[str, Callable[[], tuple[Reader, Callable[[], None]]]] = {
        "rocksdb_chunks": lambda: _rocksdb_chunks(part),
        "rocksdb_rows": lambda: _rocksdb_rows(root),
        "memmap": lambda: _memmap(part),
    }
    for threads in (1, 4, 8):
        out[f"flat_pread_t{threads}"] = lambda t=threads: _flat(part, False, t)  # type: ignore[misc]
        out[f"flat_direct_t{threads}"] = lambda t=threads: _flat(part, True, t)  # type: ignore[misc]
    out["store_direct_25pct"] = lambda: _store(part, table_bytes // 4)
    return out


def measure(
    opener: Callable[[], tuple[Reader, Callable[[], None]]], ids: list[np.ndarray], cold: bool, expect: np.ndarray
) -> dict:
    """Median seconds and total disk bytes over the batches in ``ids`` (one sample each)."""
    times, disk = [], 0
    for batch in ids:
        if cold:
            drop_caches(1)
        read, close = opener()
        try:
            before, t0 = read_bytes(), time.perf_counter()
            rows = read(batch)
            times.append(time.perf_counter() - t0)
            disk += read_bytes() - before
        finally:
            close()
        if not np.array_equal(rows, expect[batch]):
            raise AssertionError("a reader returned wrong rows")
    asked = sum(len(b) for b in ids) * ROW_BYTES
    t = statistics.median(times)
    return {"seconds": t, "rows_per_s": len(ids[0]) / t, "disk_bytes": disk, "amplification": disk / asked}


def run(args: argparse.Namespace) -> int:
    """Builds the partition, runs every method cold and warm, writes JSON + markdown."""
    if args.quick:
        args.rows, args.batches, args.samples = 200_000, [10_000], 1
    with tempfile.TemporaryDirectory(dir=args.tmp) as tmp:
        root = Path(tmp)
        t0 = time.perf_counter()
        part = build(root, args.rows)
        print(f"built {args.rows} rows in {time.perf_counter() - t0:.1f}s")
        expect = np.fromfile(flat_node_data_path(part, "feat"), np.float32).reshape(-1, F)
        align = direct_alignment(flat_node_data_path(part, "feat"))
        read, close = _flat(part, True, 1)  # compiled code loaded now, not in the first cold sample
        read(np.arange(2, dtype=np.int64))
        close()
        can_drop = not args.no_drop and drop_caches(1)
        rng = np.random.default_rng(1)
        results = []
        for batch in args.batches:
            ids = [np.sort(rng.choice(args.rows, batch, replace=False)) for _ in range(args.samples)]
            for state in ["cold", "warm"] if can_drop else ["warm"]:
                for name, opener in methods(root, part, args.rows * ROW_BYTES).items():
                    if args.only and not any(o in name for o in args.only):
                        continue
                    if state == "warm":
                        _warm(flat_node_data_path(part, "feat"))
                    r = measure(opener, ids, state == "cold", expect)
                    results.append({"method": name, "batch": batch, "state": state, **r})
                    print(
                        f"{state:4s} {batch:7d} {name:20s} {r['seconds'] * 1e3:9.1f} ms  amp {r['amplification']:7.2f}"
                    )
    del expect
    result = {
        "rows": args.rows,
        "row_bytes": ROW_BYTES,
        "samples": args.samples,
        "page_cache_dropped": can_drop,
        "direct_alignment": align,
        "results": results,
    }
    harness.write(args, result, _table(result), "rowstore")
    return 0


def _table(result: dict) -> str:
    lines = [
        (
            f"# rowstore: random {result['row_bytes']}-byte rows out of {result['rows']} "
            f"({result['rows'] * result['row_bytes'] >> 20} MiB)"
        ),
        "",
        "| state | batch | method | ms (median) | rows/s | disk bytes / bytes asked |",
        "|---|---:|---|---:|---:|---:|",
    ]
    for r in result["results"]:
        ms, per_s = r["seconds"] * 1e3, r["rows_per_s"]
        lines.append(
            f"| {r['state']} | {r['batch']} | {r['method']} | {ms:.1f} | {per_s:,.0f} | {r['amplification']:.2f} |"
        )
    return "\n".join(lines) + "\n"


def register(subparsers: argparse._SubParsersAction) -> None:
    """Adds ``bench rowstore``."""
    help = "random rows from disk: RocksDB vs flat file (pread, O_DIRECT) vs memmap"
    harness.register(subparsers, "rowstore", __doc__, help, add_arguments, run)


def add_arguments(p: argparse.ArgumentParser) -> None:
    p.add_argument("--rows", type=int, default=500_000, help="rows of 512 bytes in the table (default 500000)")
    p.add_argument(
        "--batches",
        type=int,
        nargs="+",
        default=[10_000, 100_000],
        help="sorted unique ids per batch (default 10000 100000)",
    )
    p.add_argument(
        "--samples", type=int, default=2, help="batches per method and size; the median time is reported (default 2)"
    )
    p.add_argument("--only", nargs="*", default=[], help="run only methods whose name contains one of these")
    p.add_argument(
        "--tmp", type=Path, default=None, help="where the partition is written (default the system temp dir)"
    )
    p.add_argument("--quick", action="store_true", help="200k rows, 10k-row batches, 1 sample")
    p.add_argument("--no-drop", action="store_true", help="warm runs only: leave the (machine-wide) page cache alone")
