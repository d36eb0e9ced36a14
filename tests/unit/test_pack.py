"""Offline sampling and packed features, in process: packs hold exactly the base store's rows,
reproduce the loader's minibatches, feed it byte-identical features, and a damaged or foreign
pack is never served."""

from __future__ import annotations

import dataclasses
import hashlib
import json
import logging
from collections.abc import Iterator
from pathlib import Path
from typing import Any, Literal

import numpy as np
import pytest

from graphfeed import cli
from graphfeed.common.errors import InvalidArgument
from graphfeed.graph_store.partitions import LocalPartitionSet
from graphfeed.loader.core import Loader
from graphfeed.loader.job import JobSpec
from graphfeed.loader.packs.format import MANIFEST, GraphIdentity, PackManifest, PackMismatch, job_key
from graphfeed.loader.packs.reader import PackReader
from graphfeed.loader.packs.tier import PackStats, PackTier
from graphfeed.pack.offline import sample_epoch
from graphfeed.pack.writer import PackOptions, pack_epoch
from graphfeed.sampler.core import MultiHopSampler
from tests.graphs import arithmetic_features

JOB = JobSpec(job_id="p", job_seed=5, batch_size=8, fanouts=(3, 2), shuffle=True)
OPTS = PackOptions(steps_per_pack=3, resident_bytes=10 * 16)  # 10 resident rows of 4 float32


@pytest.fixture
def packed(parts: LocalPartitionSet, tmp_path: Path) -> tuple[Path, PackManifest]:
    m = pack_epoch(parts, JOB, 1, tmp_path, OPTS)
    return tmp_path, m


def digest(a: np.ndarray) -> str:
    return hashlib.sha256(np.ascontiguousarray(a).tobytes()).hexdigest()


def stream_all(loader: Loader, job: JobSpec = JOB, epoch: int = 1) -> Iterator[Any]:
    with loader.stream(job, epoch) as s:
        yield from s


@pytest.mark.parametrize("resident", ["reuse", "degree"])
def test_every_step_reads_the_base_stores_rows_from_its_pack(
    parts: LocalPartitionSet, orig: np.ndarray, tmp_path: Path, resident: Literal["reuse", "degree"]
) -> None:
    m = pack_epoch(parts, JOB, 1, tmp_path, dataclasses.replace(OPTS, resident=resident))
    # O_DIRECT and one pread thread for one of the two (each is a way the loader may read)
    direct = resident == "degree"
    reader = PackReader.open(
        tmp_path / job_key(JOB, 1), GraphIdentity.of(parts.info), JOB, 1, direct=direct, threads=1 if direct else 4
    )
    resident_ids = reader.resident_ids()
    assert len(resident_ids) == 10 and m.num_steps > 2 * OPTS.steps_per_pack
    sampled = sample_epoch(parts, MultiHopSampler(parts), JOB, 1)
    for step, ids in enumerate(sampled.input_nodes):
        found, rows = reader.rows(step, ids)
        np.testing.assert_array_equal(found, ~np.isin(ids, resident_ids))  # every other row is packed
        np.testing.assert_array_equal(rows, arithmetic_features(orig[ids[found]]))
    assert m.stats["blow_up"] == sum(p.rows_bytes for p in m.packs) / (100 * 16)
    reader.close()


def test_pack_samples_the_loaders_minibatches(parts: LocalPartitionSet, packed: tuple[Path, PackManifest]) -> None:
    _, m = packed
    sampled = sample_epoch(parts, MultiHopSampler(parts), JOB, 1)
    loader = Loader(parts, MultiHopSampler(parts), cache_policy="none")
    try:
        got = [digest(mb.blocks.input_nodes) for mb in stream_all(loader)]
    finally:
        loader.close()
    assert got == [digest(ids) for ids in sampled.input_nodes]
    assert [s.num_input for p in m.packs for s in p.steps] == [len(ids) for ids in sampled.input_nodes]


@pytest.mark.parametrize("policy", ["none", "static_degree", "lru"])
def test_loader_with_packs_gives_byte_identical_minibatches(
    parts: LocalPartitionSet, packed: tuple[Path, PackManifest], policy: str
) -> None:
    root, _ = packed
    runs = {}
    for pack_root in (None, root):
        loader = Loader(
            parts,
            MultiHopSampler(parts),
            cache_policy=policy,
            cache_bytes=20 * 16,
            pack_root=pack_root,
            lookahead_steps=2,
        )
        try:
            runs[pack_root] = [
                (digest(mb.features), digest(mb.labels), mb.stats.pack_rows) for mb in stream_all(loader)
            ]
            stats = loader.pack_stats
        finally:
            loader.close()
    assert [r[:2] for r in runs[root]] == [r[:2] for r in runs[None]]
    assert stats.hits == sum(r[2] for r in runs[root]) > 0 and stats.disk_bytes > 0 and stats.fallbacks == 0


def damage(path: Path, how: str, row_bytes: int) -> None:
    data = bytearray(path.read_bytes())
    if how == "flip":
        data[row_bytes + 1] ^= 0x40  # inside the second row (what is padding is never served)
    else:
        data = data[: len(data) // 2]
    path.write_bytes(bytes(data))


@pytest.mark.parametrize("how", ["flip", "truncate"])
def test_damaged_pack_falls_back_to_the_base_store(
    parts: LocalPartitionSet, packed: tuple[Path, PackManifest], orig: np.ndarray, how: str
) -> None:
    root, m = packed
    damage(root / job_key(JOB, 1) / m.packs[1].file, how, m.row_bytes)
    loader = Loader(parts, MultiHopSampler(parts), cache_policy="none", pack_root=root, lookahead_steps=2)
    try:
        for mb in stream_all(loader):
            np.testing.assert_array_equal(mb.features, arithmetic_features(orig[mb.blocks.input_nodes]))
        stats = loader.pack_stats
    finally:
        loader.close()
    assert stats.fallbacks == 1 and stats.hits > 0


def test_packs_of_another_job_graph_or_epoch_are_refused(
    parts: LocalPartitionSet, packed: tuple[Path, PackManifest]
) -> None:
    root, _ = packed
    pack_dir, graph = root / job_key(JOB, 1), GraphIdentity.of(parts.info)
    for job, epoch, graph_, field in [
        (dataclasses.replace(JOB, job_seed=6), 1, graph, "job_seed"),
        (dataclasses.replace(JOB, fanouts=(3, 3)), 1, graph, "fanouts"),
        (JOB, 2, graph, "epoch"),
        (JOB, 1, dataclasses.replace(graph, num_edges=graph.num_edges + 1), "num_edges"),
    ]:
        with pytest.raises(PackMismatch, match=field):
            PackReader.open(pack_dir, graph_, job, epoch)


def test_loader_refuses_packs_written_for_another_graph(
    parts: LocalPartitionSet, packed: tuple[Path, PackManifest], orig: np.ndarray
) -> None:
    root, _ = packed
    manifest = root / job_key(JOB, 1) / MANIFEST
    d = json.loads(manifest.read_text())
    d["graph"]["schema_digest"] = "0" * 16  # as after re-ingesting with another node-data schema
    manifest.write_text(json.dumps(d))
    loader = Loader(parts, MultiHopSampler(parts), cache_policy="none", pack_root=root)
    try:
        for mb in stream_all(loader):
            np.testing.assert_array_equal(mb.features, arithmetic_features(orig[mb.blocks.input_nodes]))
        assert loader.pack_stats.refused == 1 and loader.pack_stats.hits == 0
    finally:
        loader.close()


def test_the_next_pack_is_read_while_the_current_one_serves(
    parts: LocalPartitionSet, packed: tuple[Path, PackManifest]
) -> None:
    root, m = packed
    reader = PackReader.open(root / job_key(JOB, 1), GraphIdentity.of(parts.info), JOB, 1)
    tier = PackTier(reader, PackStats(), lookahead_steps=2)
    try:
        second = m.packs[1].first_step
        tier.prefetch(second - 3)  # the window [s, s + 2] ends before pack 1
        assert set(tier._loads) == {0}
        tier.prefetch(second - 2)  # the window reaches pack 1: it is read ahead
        assert set(tier._loads) == {0, 1}
        tier.prefetch(second)  # pack 0 is done with: dropped
        assert set(tier._loads) == {1}
        tier.prefetch(second + 1)  # (packs of 3 steps) the window reaches pack 2
        assert set(tier._loads) == {1, 2}
        tier._loads[2].result()
    finally:
        tier.close()


def test_pack_command_over_a_partition_root(
    arith_root: Path, tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    args = [
        "pack",
        "--data",
        str(arith_root),
        "--out",
        str(tmp_path),
        "--batch-size",
        "8",
        "--fanouts",
        "3,2",
        "--job-seed",
        "5",
    ]
    assert cli.main([*args, "--epochs", "1:3", "--steps-per-pack", "3", "--resident-bytes", "160"]) == 0
    lines = [json.loads(line) for line in capsys.readouterr().out.splitlines()]
    assert [line["epoch"] for line in lines] == [1, 2]
    for epoch in (1, 2):  # the job the command describes is JOB (shuffled, as the trainer's loaders do)
        assert PackManifest.load(tmp_path / job_key(JOB, epoch)).epoch == epoch


def test_an_epoch_without_packs_is_counted_and_said(
    parts: LocalPartitionSet, packed: tuple[Path, PackManifest], orig: np.ndarray, caplog: pytest.LogCaptureFixture
) -> None:
    """A loader given a pack root that streams an epoch nobody packed reads every miss from the
    graph-stores: exact, but slow, so it warns and counts instead of falling back silently."""
    root, _ = packed
    loader = Loader(parts, MultiHopSampler(parts), cache_policy="none", pack_root=root, pack_reuse=False)
    try:
        with caplog.at_level(logging.WARNING, logger="graphfeed.loader.packs.tier"):
            for mb in stream_all(loader, epoch=7):  # epoch 7 was never packed
                np.testing.assert_array_equal(mb.features, arithmetic_features(orig[mb.blocks.input_nodes]))
        assert loader.pack_stats.unpacked == 1 and loader.pack_stats.hits == 0
        assert any("no packs for job" in r.getMessage() and "epoch=7" in r.getMessage() for r in caplog.records)
    finally:
        loader.close()


def written_rows(root: Path, m: PackManifest, parts: LocalPartitionSet, job: JobSpec = JOB) -> list[int]:
    """Rows in each pack file as read back from the files (the gids a reader finds there)."""
    reader = PackReader.open(root / job_key(job, m.epoch), GraphIdentity.of(parts.info), job, m.epoch)
    try:
        return [len(reader.read_pack(i).sorted_ids) for i in range(len(m.packs))]
    finally:
        reader.close()


@pytest.mark.parametrize("target", [1.2, 1.6, 2.0])
def test_packs_span_steps_and_keep_the_blow_up_under_the_target(
    parts: LocalPartitionSet, tmp_path: Path, target: float
) -> None:
    """Blow-up = rows written for the epoch (counted in the pack files) / rows of the table."""
    opts = PackOptions(max_blow_up=target, resident_bytes=10 * 16)
    m = pack_epoch(parts, JOB, 1, tmp_path, opts)
    rows = written_rows(tmp_path, m, parts)
    assert sum(rows) / 100 <= target and m.stats["blow_up"] == sum(rows) / 100
    assert any(len(p.steps) > 1 for p in m.packs)  # rows of a pack are shared by its steps
    # one pack per step would write more than the target here: the sizing is what met it
    assert sum(s.num_packed for p in m.packs for s in p.steps) / 100 > target
    share = (target * 100 - (100 - 10)) / m.num_steps
    for p, n in zip(m.packs[:-1], rows[:-1], strict=True):  # each but the last closed once within its share
        assert n <= len(p.steps) * share


def test_a_target_below_one_table_packs_the_epoch_once(parts: LocalPartitionSet, tmp_path: Path) -> None:
    m = pack_epoch(parts, JOB, 1, tmp_path, PackOptions(max_blow_up=0.5))
    assert len(m.packs) == 1 and written_rows(tmp_path, m, parts) == [m.packs[0].num_rows]
    assert m.packs[0].num_rows == len(
        np.unique(np.concatenate(sample_epoch(parts, MultiHopSampler(parts), JOB, 1).input_nodes))
    )


def test_max_pack_bytes_bounds_a_pack_but_never_splits_a_step(parts: LocalPartitionSet, tmp_path: Path) -> None:
    cap = 40 * 16  # rows of 4 float32
    m = pack_epoch(parts, JOB, 1, tmp_path, PackOptions(max_blow_up=0.5, max_pack_bytes=cap))
    rows = written_rows(tmp_path, m, parts)
    assert len(m.packs) > 1 and m.stats["largest_pack_bytes"] == max(rows) * 16
    for p, n in zip(m.packs, rows, strict=True):
        assert n * 16 <= cap or len(p.steps) == 1
    tiny = pack_epoch(parts, JOB, 1, tmp_path / "tiny", PackOptions(max_pack_bytes=16))
    assert all(len(p.steps) == 1 for p in tiny.packs) and len(tiny.packs) == tiny.num_steps


@pytest.mark.parametrize(
    ("options", "match"),
    [
        ({"max_blow_up": 0.0}, "max_blow_up must be > 0"),
        ({"max_pack_bytes": -1}, "max_pack_bytes must be >= 0"),
        ({"steps_per_pack": -2}, "steps_per_pack must be >= 0"),
        ({"resident": "hot"}, "resident must be"),
        ({"sample_workers": 0}, "sample_workers >= 1"),
    ],
)
def test_bad_pack_options_are_refused(
    parts: LocalPartitionSet, tmp_path: Path, options: dict[str, Any], match: str
) -> None:
    with pytest.raises(InvalidArgument, match=match):
        pack_epoch(parts, JOB, 1, tmp_path, PackOptions(**options))
    assert not list(tmp_path.iterdir())  # nothing written


@pytest.mark.parametrize(
    ("flags", "match"),
    [
        (["--max-blow-up", "0"], "--max-blow-up"),
        (["--max-pack-bytes", "-5"], "--max-pack-bytes"),
        (["--epochs", "3:1"], "--epochs"),
        (["--epochs", "two"], "--epochs"),
    ],
)
def test_pack_command_refuses_bad_flags(
    arith_root: Path, tmp_path: Path, capsys: pytest.CaptureFixture[str], flags: list[str], match: str
) -> None:
    with pytest.raises(SystemExit) as exc:
        cli.main(["pack", "--data", str(arith_root), "--out", str(tmp_path), *flags])
    assert exc.value.code != 0 and match in capsys.readouterr().err
    assert not list(tmp_path.iterdir())


def test_epochs_packed_ahead_are_each_served_exactly(
    arith_root: Path, parts: LocalPartitionSet, orig: np.ndarray, tmp_path: Path
) -> None:
    """``graphfeed pack --epochs 0:3`` with the default sizing, then three epochs streamed: every
    epoch finds its own packs, and every feature row equals the source row."""
    flags = ["--batch-size", "8", "--fanouts", "3,2", "--job-seed", "5", "--resident-bytes", "160"]
    assert cli.main(["pack", "--data", str(arith_root), "--out", str(tmp_path), "--epochs", "0:3", *flags]) == 0
    loader = Loader(parts, MultiHopSampler(parts), cache_policy="lru", cache_bytes=20 * 16, pack_root=tmp_path)
    try:
        hits = []
        for epoch in range(3):
            before = loader.pack_stats.hits
            for mb in stream_all(loader, epoch=epoch):
                np.testing.assert_array_equal(mb.features, arithmetic_features(orig[mb.blocks.input_nodes]))
            hits.append(loader.pack_stats.hits - before)
        stats = loader.pack_stats
    finally:
        loader.close()
    assert all(h > 0 for h in hits) and stats.unpacked == stats.refused == stats.fallbacks == 0


def test_an_epoch_whose_rows_are_all_resident_packs_empty_steps(
    parts: LocalPartitionSet, orig: np.ndarray, tmp_path: Path
) -> None:
    m = pack_epoch(parts, JOB, 1, tmp_path, PackOptions(resident="degree", resident_bytes=100 * 16))
    assert m.stats["blow_up"] == 0 and m.num_resident == 100
    loader = Loader(
        parts, MultiHopSampler(parts), cache_policy="static_degree", cache_bytes=100 * 16, pack_root=tmp_path
    )
    try:
        for mb in stream_all(loader):
            np.testing.assert_array_equal(mb.features, arithmetic_features(orig[mb.blocks.input_nodes]))
        assert loader.pack_stats.fallbacks == 0
    finally:
        loader.close()


def test_an_epoch_without_packs_is_served_exactly_from_another_epochs_packs(
    parts: LocalPartitionSet, orig: np.ndarray, tmp_path: Path, caplog: pytest.LogCaptureFixture
) -> None:
    """Packs sized to span the epoch hold most rows of any epoch's steps: epoch 7, never packed,
    reads what it can from epoch 1's packs (the same rows, so exact) and the rest from the stores."""
    pack_epoch(parts, JOB, 1, tmp_path, PackOptions(max_blow_up=1.0))
    loader = Loader(parts, MultiHopSampler(parts), cache_policy="none", pack_root=tmp_path)
    try:
        with caplog.at_level(logging.WARNING, logger="graphfeed.loader.packs.tier"):
            rows = misses = 0
            for mb in stream_all(loader, epoch=7):
                np.testing.assert_array_equal(mb.features, arithmetic_features(orig[mb.blocks.input_nodes]))
                rows, misses = rows + len(mb.blocks.input_nodes), misses + mb.stats.cache_misses
        stats = loader.pack_stats
    finally:
        loader.close()
    assert stats.reused == 1 and stats.unpacked == stats.refused == stats.fallbacks == 0
    assert 0 < stats.hits <= misses == rows  # no cache: every row a miss, served from the packs or the stores
    assert any("serving its misses from epoch 1's packs" in r.getMessage() for r in caplog.records)


def test_a_pack_finds_the_same_rows_with_its_gid_table_as_by_search(
    parts: LocalPartitionSet, packed: tuple[Path, PackManifest]
) -> None:
    root, _ = packed
    reader = PackReader.open(root / job_key(JOB, 1), GraphIdentity.of(parts.info), JOB, 1)
    try:
        pack = reader.read_pack(1)
    finally:
        reader.close()
    table, search = pack.with_dense(100), dataclasses.replace(pack, dense=None)
    ids = np.random.default_rng(0).permutation(100)  # packed and not
    (f1, at1), (f2, at2) = table.find(ids), search.find(ids)
    np.testing.assert_array_equal(f1, f2)
    np.testing.assert_array_equal(at1, at2)
    assert 0 < f1.sum() < 100 and set(ids[f1]) == set(pack.sorted_ids.tolist())
