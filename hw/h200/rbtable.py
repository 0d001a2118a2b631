#!/usr/bin/env python3
"""The router benchmark's tables (routerbench.py's routerbench.jsonl, issue 54).

    rbtable.py RESULTS_DIR      (or the .jsonl itself)

Per cell (workload, sharing level, policy): TTFT p50/p90/p99 and the requests' median output
tokens/s of each run, shown as the median over the runs (min-max); where the requests' KV came
from (GPU prefix cache, DRAM, S3, recompute: shares of the prompt tokens, all runs); the requests no
engine line accounts for (the target: 0) and those that got no answer; then cache_aware's TTFT
p50 over round_robin's, and the router's own overhead. Every figure is read from the rows.
"""

from __future__ import annotations

import json
import sys
from pathlib import Path

TIERS = ("gpu", "dram", "s3", "recompute")


def pct(xs: list[float], p: float) -> float | None:
    """The p-th percentile, nearest rank (the smallest value with at least p % at or below)."""
    xs = sorted(xs)
    if not xs:
        return None
    k = max(0, min(len(xs) - 1, -(-len(xs) * p // 100) - 1))
    return xs[int(k)]


def median(xs: list[float]) -> float | None:
    """The median of the figures there are; None of none."""
    xs = sorted(x for x in xs if x is not None)
    if not xs:
        return None
    m = len(xs) // 2
    return xs[m] if len(xs) % 2 else (xs[m - 1] + xs[m]) / 2


def spread(xs: list[float | None], digits: int = 3) -> str:
    """median (min-max) over the runs; a single run as itself."""
    xs = [x for x in xs if x is not None]
    if not xs:
        return "-"
    m = median(xs)
    if len(xs) == 1:
        return f"{m:.{digits}f}"
    return f"{m:.{digits}f} ({min(xs):.{digits}f}-{max(xs):.{digits}f})"


def load(path: str) -> list[dict]:
    """The rows of a results folder's routerbench.jsonl (or of that file)."""
    p = Path(path)
    if p.is_dir():
        p = p / "routerbench.jsonl"
    return [json.loads(line) for line in p.read_text().splitlines() if line.strip()]


def per_run(rows: list[dict]) -> dict:
    """(workload, level, policy) -> run -> that run's figures."""
    out: dict = {}
    for r in rows:
        if r.get("kind") != "request":
            continue
        key = (r["workload"], r["level"], r["policy"])
        out.setdefault(key, {}).setdefault(r["run"], []).append(r)
    cells = {}
    for key, runs in out.items():
        cells[key] = {}
        for run, reqs in runs.items():
            ttft = [x["ttft"] for x in reqs if x.get("status") == 200 and x.get("ttft") is not None]
            tps = [x["out_tps"] for x in reqs if x.get("out_tps")]
            cells[key][run] = {
                "n": len(reqs),
                "p50": pct(ttft, 50),
                "p90": pct(ttft, 90),
                "p99": pct(ttft, 99),
                "tps": median(tps),
                "tiers": [x["source"]["tier"] for x in reqs if x.get("source")],
                "tokens": {t: sum(x["source"][t] for x in reqs if x.get("source")) for t in TIERS},
                "unaccounted": sum(
                    1 for x in reqs if x.get("status") == 200 and not x.get("source")
                ),
                "failed": sum(1 for x in reqs if x.get("status") != 200),
            }
    return cells


def table(rows: list[dict]) -> str:
    """The cells' table, the policies' ratios and the router's overhead, as markdown."""
    cells = per_run(rows)
    share = {}
    for r in rows:
        if r.get("kind") == "cell":
            share[(r["workload"], r["level"])] = r["sharing"]["followups"]
    head = (
        "| workload | sharing | policy | runs | requests | TTFT p50 s | TTFT p90 s | TTFT p99 s "
        "| output tok/s | GPU | DRAM | S3 | recompute | unaccounted | failed |\n"
        "|---|---|---|---|---|---|---|---|---|---|---|---|---|---|---|"
    )
    out = [head]
    for key in sorted(cells, key=lambda k: (k[0], k[1], k[2])):
        runs = cells[key]
        figs = list(runs.values())
        tokens = {t: sum(f["tokens"][t] for f in figs) for t in TIERS}
        total = sum(tokens.values())
        frac = {t: tokens[t] / total if total else 0.0 for t in TIERS}
        lvl = share.get(key[:2])
        out.append(
            f"| {key[0]} | {key[1]} %{f' ({lvl:.2f})' if lvl is not None else ''} | {key[2]} "
            f"| {len(runs)} | {sum(f['n'] for f in figs)} "
            f"| {spread([f['p50'] for f in figs])} | {spread([f['p90'] for f in figs])} "
            f"| {spread([f['p99'] for f in figs])} | {spread([f['tps'] for f in figs], 1)} "
            + " ".join(f"| {frac[t]:.2f}" for t in TIERS)
            + f" | {sum(f['unaccounted'] for f in figs)} | {sum(f['failed'] for f in figs)} |"
        )
    out.append("")
    out.append(ratios(cells))
    out.append("")
    out.append(cross_check(rows))
    over = overhead(rows)
    if over:
        out.append("")
        out.append(over)
    return "\n".join(out)


def ratios(cells: dict) -> str:
    """cache_aware's TTFT p50 (median over runs) over round_robin's, per workload and level."""
    lines = [
        "| workload | sharing | cache_aware p50 s | round_robin p50 s "
        "| round_robin / cache_aware |",
        "|---|---|---|---|---|",
    ]
    for wl, lvl in sorted({(k[0], k[1]) for k in cells}):
        ca = median([f["p50"] for f in cells.get((wl, lvl, "cache_aware"), {}).values()])
        rr = median([f["p50"] for f in cells.get((wl, lvl, "round_robin"), {}).values()])
        ratio = f"{rr / ca:.2f}" if ca and rr else "-"
        lines.append(
            f"| {wl} | {lvl} % | {'-' if ca is None else f'{ca:.3f}'} "
            f"| {'-' if rr is None else f'{rr:.3f}'} | {ratio} |"
        )
    return "\n".join(lines)


def cross_check(rows: list[dict]) -> str:
    """The per-request accounting against the engines' own counters, per cell and engine: the
    prompt tokens (``vllm:prompt_tokens``) and the GPU prefix cache's (``vllm:prefix_cache_hits``)
    the requests' lines add up to."""
    mine: dict = {}
    for r in rows:
        src = r.get("source")
        if r.get("kind") == "request" and src:
            k = (r.get("label"), src["engine"])
            got = mine.setdefault(k, [0, 0])
            got[0] += src.get("prompt", 0)
            got[1] += src.get("gpu", 0)
    n = agree = 0
    off = []
    for c in (r for r in rows if r.get("kind") == "cell"):
        for engine, ctr in (c.get("counters") or {}).items():
            want = (ctr.get("vllm:prompt_tokens"), ctr.get("vllm:prefix_cache_hits"))
            if None in want:
                continue
            n += 1
            have = tuple(mine.get((c.get("label"), engine), [0, 0]))
            if have == tuple(int(x) for x in want):
                agree += 1
            else:
                off.append(f"{c.get('label')}/{engine}: lines {have}, counters {want}")
    text = (f"Counters: {agree} of {n} cell engines' prompt and GPU-hit tokens equal the "
            "requests' lines")  # fmt: skip
    return text + ("" if not off else "; not: " + "; ".join(off[:5]))


def overhead(rows: list[dict]) -> str:
    """The router's own overhead: median TTFT straight to an engine and through the router."""
    over = [r for r in rows if r.get("kind") == "overhead"]
    if not over:
        return ""
    lines = [
        "| prompt words | pairs | direct TTFT p50 s | through the router p50 s | added s |",
        "|---|---|---|---|---|",
    ]
    for o in over:
        for size, s in o["summary"].items():
            lines.append(f"| {size} | {s['n']} | {s['direct']} | {s['router']} | {s['added_s']} |")
    return "\n".join(lines)


if __name__ == "__main__":
    print(table(load(sys.argv[1])))
