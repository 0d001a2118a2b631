#!/usr/bin/env python3
"""Chart of an H200 run's measurements (table.py's rows).   plot.py RESULTS_DIR OUT.png"""

import sys
from pathlib import Path

import matplotlib

matplotlib.use("Agg")
import matplotlib.pyplot as plt  # noqa: E402

sys.path.insert(0, str(Path(__file__).resolve().parent))
from table import rows  # noqa: E402


def main(results: str, out: str) -> None:
    rs = rows(Path(results))
    lengths = [r for r in rs if r["variant"] == "base" and r["rgw"] == 1]
    cells = [r for r in rs if r["prompt"] and r["prompt"] > 120000]
    fig, (a, b, c) = plt.subplots(1, 3, figsize=(16, 4.6))
    x = [f"{r['prompt'] // 1000}k" for r in lengths]
    w = 0.38
    a.bar([i - w / 2 for i in range(len(x))], [r["cold_s"] for r in lengths], w, label="cold")
    a.bar([i + w / 2 for i in range(len(x))], [r["warm_s"] for r in lengths], w, label="warm (S3)")
    a.set_xticks(range(len(x)), x)
    a.set_ylabel("TTFT (s)")
    a.set_title("prompt length (chunk 256, 1 radosgw)", fontsize=10)
    a.legend()
    names = [f"{r['variant']}\nchunk {r['chunk']}\n{r['rgw']} rgw" for r in cells]
    b.bar(range(len(cells)), [r["warm_s"] for r in cells], color="tab:orange", label="warm")
    for i, r in enumerate(cells):
        b.hlines(r["cold_s"], i - 0.4, i + 0.4, colors="tab:blue", label="cold" if not i else None)
    b.set_xticks(range(len(cells)), names, fontsize=7)
    b.set_ylabel("TTFT (s)")
    b.set_title(f"{cells[0]['prompt']:,} tokens ({cells[0]['kv_GB']} GB of KV)", fontsize=10)
    b.legend()
    allr = lengths + cells[1:]
    labels = [f"{r['prompt'] // 1000}k c{r['chunk']}\n{r['variant']} {r['rgw']}rgw" for r in allr]
    for key, name in (
        ("achieved_GBps", "LMCache load"),
        ("raw_GET_GBps", "raw awscrt GET"),
        ("break_even_GBps", "break-even"),
    ):
        c.plot(range(len(allr)), [r[key] for r in allr], marker="o", label=name)
    c.set_xticks(range(len(allr)), labels, fontsize=6)
    c.set_ylabel("GB/s")
    c.set_ylim(0, None)
    c.set_title("bandwidth: achieved vs the setup's raw GET vs break-even", fontsize=10)
    c.legend(fontsize=8)
    fig.suptitle("kvceph on an H200: vLLM 0.26.0 + LMCache 0.5.6, Ceph 16.2.15 RGW", fontsize=11)
    fig.tight_layout()
    fig.savefig(out, dpi=100)


if __name__ == "__main__":
    main(sys.argv[1], sys.argv[2])
