#!/usr/bin/env python3
"""Charts of an H200 run (table.py's rows).   plot.py RESULTS_DIR OUT.png

Four panels: TTFT cold and warm per prompt length for each connector (median, min-max bars)
beside ceph.io's blog figures (MI300X); warm/cold against the targets; the engine's fetch rate
against the run's ceiling; where the warm request's time went (medians).
"""

import sys
from pathlib import Path

import matplotlib

matplotlib.use("Agg")
import matplotlib.pyplot as plt  # noqa: E402

sys.path.insert(0, str(Path(__file__).resolve().parent))
from table import BLOG, FETCH_TARGET, TARGETS, rows  # noqa: E402

COLORS = {"lmcache": "tab:blue", "kvceph": "tab:orange"}


def _series(rs, conn):
    return sorted((r for r in rs if r["connector"] == conn), key=lambda r: r["tokens"])


def _err(stats):
    return [[s[1] - s[0] for s in stats], [s[2] - s[1] for s in stats]]


def main(results: str, out: str) -> None:
    allr = rows(Path(results))
    base = [r for r in allr if r["chunk"] == 256 and r["kv"] == "bfloat16"]
    conns = [c for c in ("lmcache", "kvceph") if any(r["connector"] == c for r in base)]
    fig, ((a, b), (c, d)) = plt.subplots(2, 2, figsize=(15, 10))
    for conn in conns:
        rs = _series(base, conn)
        x = [r["tokens"] / 1000 for r in rs]
        col = COLORS[conn]
        a.errorbar(x, [r["warm_s"][1] for r in rs], yerr=_err([r["warm_s"] for r in rs]),
                   marker="o", color=col, label=f"{conn}: warm (S3)", capsize=3)  # fmt: skip
        a.errorbar(x, [r["cold_s"][1] for r in rs], yerr=_err([r["cold_s"] for r in rs]),
                   marker="s", ls="--", color=col, alpha=0.6, label=f"{conn}: cold",
                   capsize=3)  # fmt: skip
        b.plot(x, [r["warm/cold"] for r in rs], marker="o", color=col, label=conn)
        if conn != "lmcache":
            b.plot(x, [r["warm/stock_cold"] for r in rs], marker="o", ls=":", color=col,
                   label=f"{conn} warm / stock cold")  # fmt: skip
        c.plot(x, [r["fetch_GBps"] for r in rs], marker="o", color=col, label=f"{conn}: fetch")
    bx = sorted(set(BLOG))[:-1]
    a.plot([n / 1000 for n in bx], [BLOG[n][0] for n in bx], "k:", marker="x", label="blog: cold")
    a.plot([n / 1000 for n in bx], [BLOG[n][1] for n in bx], "k-.", marker="x", label="blog: warm")
    a.set(xscale="log", yscale="log", xlabel="prompt (k tokens)", ylabel="TTFT (s)",
          title="TTFT, chunk 256, bf16 KV (median, min-max)")  # fmt: skip
    a.legend(fontsize=7)
    tx = sorted(n for n in TARGETS if n != 130560)
    b.plot([n / 1000 for n in tx], [TARGETS[n] for n in tx], "r_", ms=20, mew=2, label="target")
    b.plot([n / 1000 for n in bx], [BLOG[n][1] / BLOG[n][0] for n in bx], "kx", label="blog")
    b.axhline(1.0, color="grey", lw=0.8)
    b.set(xscale="log", xlabel="prompt (k tokens)", ylabel="warm / cold", ylim=(0, None),
          title="warm / cold TTFT against the targets")  # fmt: skip
    b.legend(fontsize=8)
    ceil = [r for r in base if r["ceiling_GBps"] and r["ceiling_of"] != "layout"]
    layout = next((r["ceiling_GBps"] for r in base if r["ceiling_of"] == "layout"), None)
    if layout:
        c.axhline(layout, color="grey", ls="--", label="the layout's ceiling (64 x 64 MiB)")
    if ceil:
        xs = sorted({r["tokens"] for r in ceil})
        cv = [max(r["ceiling_GBps"] for r in ceil if r["tokens"] == n) for n in xs]
        c.plot([n / 1000 for n in xs], cv, "k-", marker="^", label="the run's ceiling")
        c.plot([n / 1000 for n in xs], [v * FETCH_TARGET for v in cv], "r:", label="80 % of it")
    c.set(xscale="log", xlabel="prompt (k tokens)", ylabel="GB/s", ylim=(0, None),
          title="the engine's fetch from S3 vs plain parallel GETs into pinned memory")  # fmt: skip
    c.legend(fontsize=8)
    heads = [r for r in base if r["tokens"] in (16384, 32768, 126976, 130560)]
    heads.sort(key=lambda r: (r["tokens"], r["connector"]))
    parts = (("lookup_s", "lookup"), ("fetch_s", "fetch"), ("retrieve_s", "copy to GPU (retrieve)"))
    bottom = [0.0] * len(heads)
    for key, name in parts:
        vals = [r[key] or 0.0 for r in heads]
        d.bar(range(len(heads)), vals, bottom=bottom, label=name)
        bottom = [x + v for x, v in zip(bottom, vals, strict=True)]
    rest = [max(0.0, r["warm_s"][1] - s) for r, s in zip(heads, bottom, strict=True)]
    d.bar(range(len(heads)), rest, bottom=bottom, label="everything else", color="lightgrey")
    d.set_xticks(range(len(heads)), [f"{r['tokens'] // 1000}k\n{r['connector']}" for r in heads])
    d.set(ylabel="s (medians)", title="where the warm request's time went")
    d.legend(fontsize=8)
    fig.suptitle("kvceph on an H200: vLLM 0.26.0 + LMCache 0.5.6, Ceph 16.2.15 RGW (memstore)")
    fig.tight_layout()
    fig.savefig(out, dpi=100)


if __name__ == "__main__":
    main(sys.argv[1], sys.argv[2])
