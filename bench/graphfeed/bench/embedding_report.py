"""The markdown of ``graphfeed bench embeddings`` (:mod:`graphfeed.bench.embeddings`' JSON)."""

from __future__ import annotations

LABELS = {
    "dgl": "DGL (NodeEmbedding + dgl SparseAdam)",
    "local": "graphfeed, nn.Embedding(sparse) + torch SparseAdam",
    "server": "graphfeed, graph-store tables + SparseAdam",
}


def table(r: dict) -> str:
    """All parts ``r`` has, one section each."""
    out = []
    if "fidelity" in r:
        out += _fidelity(r["fidelity"])
    if "durability" in r:
        out += _durability(r["durability"])
    if "throughput" in r:
        out += _throughput(r["throughput"])
    return "\n".join(out) + "\n"


def _fidelity(f: dict) -> list[str]:
    ran = [s for s in LABELS if f["test_acc"].get(s)]
    lines = [
        f"### Fidelity: RGCN on `{f['source']}`, featureless {f['job']['featureless_types'] or 'types of the graph'}",
        "",
        f"Job {f['job']}; test accuracy per seed.",
        "",
        "| seed | " + " | ".join(LABELS[s] for s in ran) + " |",
        "|---:|" + "---:|" * len(ran),
    ]
    for i, seed in enumerate(f["seeds"]):
        lines.append(f"| {seed} | " + " | ".join(f"{f['test_acc'][s][i]:.4f}" for s in ran) + " |")
    lines.append("| mean ± std | " + " | ".join(f"{f['mean'][s]:.4f} ± {f['std'][s]:.4f}" for s in ran) + " |")
    lines.append(
        "| s per run (mean) | " + " | ".join(f"{sum(f['seconds'][s]) / len(f['seconds'][s]):.0f}" for s in ran) + " |"
    )
    gaps = ", ".join(
        f"{k.removeprefix('server_minus_').removesuffix('_points')}: **{v:+.2f}**"
        for k, v in f.items()
        if k.startswith("server_minus_")
    )
    lines += ["", f"server minus (points): {gaps}; within 1 point: **{'yes' if f['within_1_point'] else 'no'}**", ""]
    return lines


def _durability(d: dict) -> list[str]:
    lines = [
        f"### Durability: kill -9 of a graph-store during pushes (`{d['dataset']}`, table of `{d['ntype']}`)",
        "",
        (
            f"{len(d['trials'])} trials, {d['retries']} retried calls, {d['duplicate_acks']} replayed pushes "
            f"answered duplicate, {d['lost_or_twice']} steps lost or applied twice; rows + optimizer state + "
            f"step history byte-equal to an uninterrupted run: **{'yes' if d['equal'] else 'no'}**; "
            f"steps whose pulled rows differed: {d['pulled_rows_differ']}"
        ),
        "",
        "| trial | killed partition | steps (cumulative) | retries | duplicate acks | restart s | applied | equal |",
        "|---:|---:|---:|---:|---:|---:|---|---|",
    ]
    for t in d["trials"]:
        eq = t["rows_equal"] and t["state_equal"] and t["history_equal"]
        lines.append(
            f"| {t['trial']} | {t['killed']} | {t['steps']} | {t['retries']} | {t['duplicate_acks']} "
            f"| {t['down_s']:.1f} | {t['applied_steps']} | {'yes' if eq else 'no'} |"
        )
    return [*lines, ""]


def _throughput(t: dict) -> list[str]:
    m, per = t["median_steps_per_s"], t["steps_per_s"]
    names = {"local": "trainer-side nn.Embedding(sparse)", "server": "graph-store tables"}
    names["distdgl"] = "DistDGL DistEmbedding + SparseAdam (2 servers, 1 trainer)"
    ratios = f"server / local: **{t['server_over_local']:.2f}×**"
    if "server_over_distdgl" in t:
        ratios += f", server / DistDGL: **{t['server_over_distdgl']:.2f}×**"
    else:
        ratios += f"; DistDGL: {t['distdgl']}"
    return [
        (
            f"### Throughput: RGCN training steps/s end to end, one rank (`{t['dataset']}`, batch {t['batch_size']}, "
            f"{t.get('trainer_threads', '?')} trainer threads)"
        ),
        "",
        (
            f"{t['steps']} timed steps after {t['warmup']}; runs alternated; same minibatches (local, server): "
            f"{'yes' if t['same_minibatches'] else 'NO'}"
        ),
        "",
        "| embeddings | steps/s per run | median |",
        "|---|---|---:|",
        *(f"| {names[k]} | {_runs(per[k])} | {m[k]:.2f} |" for k in per),
        "",
        ratios,
        "",
    ]


def _runs(rates: list[float]) -> str:
    return ", ".join(f"{x:.2f}" for x in rates)
