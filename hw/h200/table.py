#!/usr/bin/env python3
"""Summary of an H200 run's measurements: one row per warm request, with its cold request and the
raw GET rate of the same S3 setup.   table.py RESULTS_DIR [--markdown | --json]"""

import json
import sys
from pathlib import Path


def rows(results: Path) -> list[dict]:
    def lines(name):
        p = results / name
        if not p.exists():
            return []
        return [json.loads(x) for x in p.read_text().splitlines() if x.startswith("{")]

    cells = lines("cells.jsonl")
    raw = {}
    for r in lines("rawget.jsonl"):
        if r.get("throughput_target_gbps") == "default (10)":
            raw[(r["label"].split("-")[0], r["rgw"])] = r["GBps"]
    cold = {c["label"]: c for c in cells if c["kind"] == "cold"}
    out = []
    for w in (c for c in cells if c["kind"] == "warm"):
        c = cold.get(w["cold_label"], {})
        rgw = int(w["label"].split("-rgw")[1].split("-")[0])
        out.append(
            {
                "variant": w["variant"],
                "chunk": w["chunk_size"],
                "rgw": rgw,
                "prompt": c.get("prompt_tokens"),
                "kv_GB": round(w["kv_bytes"] / 1e9, 2),
                "cold_s": w["cold_ttft_s"],
                "warm_s": w["ttft_s"],
                "warm/cold": w["warm_over_cold"],
                "loaded": int(w["hit_tokens"]) if w["hit_tokens"] is not None else None,
                "expected": w["expected_hit_tokens"],
                "achieved_GBps": w["achieved_GBps"],
                "raw_GET_GBps": raw.get((f"c{w['chunk_size']}", rgw)),
                "break_even_GBps": w["break_even_GBps"],
                "label": w["label"],
            }
        )
    return out


def fmt(v):
    if v is None:
        return "-"
    if isinstance(v, float):
        return f"{v:.3f}" if v < 10 else f"{v:.1f}"
    return f"{v:,}" if isinstance(v, int) else str(v)


def main(results: str, markdown: bool) -> None:
    rs = rows(Path(results))
    if not rs:
        return
    keys = [k for k in rs[0] if k != "label"]
    if "--json" in sys.argv:
        print(json.dumps(rs, indent=1))
    elif markdown:
        print("| " + " | ".join(keys) + " |")
        print("|" + "---|" * len(keys))
        for r in rs:
            print("| " + " | ".join(fmt(r[k]) for k in keys) + " |")
    else:
        print("  ".join(f"{k:>14}" for k in keys))
        for r in rs:
            print("  ".join(f"{fmt(r[k]):>14}" for k in keys))


if __name__ == "__main__":
    main(sys.argv[1], "--markdown" in sys.argv)
