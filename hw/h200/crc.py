#!/usr/bin/env python3
"""The crc32c check's cost from a results folder's cells.jsonl (plan050.txt / plan050h.txt):
per document length, warm TTFT from the bucket with the check on and off (min/median/max of the
counted warms; the warm-up after an engine start is shown apart, not counted), and on/off of the
medians.
    crc.py RESULTS_DIR
A variant name ending in ``nc`` ran with ``kvceph_connector_verify_crc32c: false``.
"""

import json
import statistics
import sys
from pathlib import Path


def rows(results: str) -> list[dict]:
    """The warm cells of the crc steps (labels ``c<len>-<variant>-w<i>`` / ``-warmup``)."""
    out = []
    for line in (Path(results) / "cells.jsonl").read_text().splitlines():
        r = json.loads(line)
        if r.get("kind") == "warm" and r.get("cold_label", "").startswith("c"):
            out.append(r)
    return out


def table(cells: list[dict]) -> list[str]:
    """One line per length: on and off (min/median/max, n), the warm-ups, on/off of medians."""
    by: dict[tuple, list] = {}
    warmups: dict[tuple, float] = {}
    for r in cells:
        on = not r["variant"].endswith("nc")
        key = (r["document_tokens"], on)
        if r["label"].endswith("-warmup"):
            warmups[key] = r["ttft_s"]
        elif r["hit_tokens"] == r["expected_hit_tokens"]:
            by.setdefault(key, []).append(r["ttft_s"])
    lines = ["tokens | check on: min/median/max s (n) | check off | on/off | warm-ups (on, off)"]
    for n in sorted({k[0] for k in by}):
        on, off = by.get((n, True), []), by.get((n, False), [])
        f = lambda v: (  # noqa: E731
            f"{min(v):.3f}/{statistics.median(v):.3f}/{max(v):.3f} ({len(v)})" if v else "-"
        )
        ratio = f"{statistics.median(on) / statistics.median(off):.3f}" if on and off else "-"
        wu = [warmups.get((n, True)), warmups.get((n, False))]
        lines.append(f"{n} | {f(on)} | {f(off)} | {ratio} | {wu}")
    return lines


if __name__ == "__main__":
    print("\n".join(table(rows(sys.argv[1]))))
