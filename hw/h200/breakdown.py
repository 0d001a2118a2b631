#!/usr/bin/env python3
"""One request's time inside the engine, from the trace ``trace/sitecustomize.py`` writes.

    breakdown.py TRACE T_SENT TTFT          -> one JSON object

The window is [T_SENT, T_SENT + TTFT] (the request's send time and its time to first token).
Phases (seconds from the send unless named ``_s``):

- ``lookup_at`` / ``lookup_s``: LMCache's lookup of the request's chunks (the remote backend's
  ``batched_async_contains``: HEADs for the stock connector, kvceph's concurrent lookup)
- ``fetch_s``, ``fetch_GB``, ``fetch_GBps``: the remote backend's fetch of the hit chunks into
  LMCache's pinned buffer (first start to last end; async loading prefetches at lookup time)
- ``respond_at``: when LMCache answered vLLM's scheduler with the loadable length
- ``retrieve_at`` / ``retrieve_s``: ``LMCacheEngine.retrieve`` (the copy into vLLM's paged KV
  on the GPU, and anything it still fetches); ``copy_s``: the GPU connector's copies within it
- ``gap_*``: what lies between: send -> lookup (tokenizing, scheduling), fetch end -> respond,
  respond -> retrieve (the scheduler's next step), retrieve end -> first token (the prefill of
  what was not loaded, and the first decode step)
"""

from __future__ import annotations

import json
import sys
from pathlib import Path


def events(path: str, t0: float, t1: float) -> list[dict]:
    out = []
    p = Path(path)
    if not p.exists():
        return out
    for line in p.read_text(errors="replace").splitlines():
        try:
            e = json.loads(line)
        except ValueError:
            continue
        if "t1" in e and e["t1"] >= t0 and e["t0"] <= t1:
            out.append(e)
    return out


def _union(spans: list[tuple[float, float]]) -> float:
    total, end = 0.0, None
    for a, b in sorted(spans):
        if end is None or a > end:
            total += b - a
            end = b
        elif b > end:
            total += b - end
            end = b
    return total


def breakdown(path: str, sent: float, ttft: float, slack: float = 0.5) -> dict:
    evs = events(path, sent - slack, sent + ttft + slack)
    by: dict[str, list[dict]] = {}
    for e in evs:
        by.setdefault(e["ph"], []).append(e)

    def first(ph):
        return min((e["t0"] for e in by.get(ph, ())), default=None)

    def last(ph):
        return max((e["t1"] for e in by.get(ph, ())), default=None)

    def rel(t):
        return round(t - sent, 3) if t is not None else None

    out: dict = {"events": len(evs)}
    contains = by.get("contains", []) + by.get("contains_sync", [])
    if contains:
        out["lookup_at"] = rel(min(e["t0"] for e in contains))
        out["lookup_s"] = round(_union([(e["t0"], e["t1"]) for e in contains]), 3)
        out["lookup_keys"] = sum(e.get("n", 0) for e in contains)
        out["lookup_hits"] = sum(e.get("hit", 0) or 0 for e in contains)
    fetch = by.get("fetch", []) + by.get("fetch_blocking", [])
    if fetch:
        f0, f1 = min(e["t0"] for e in fetch), max(e["t1"] for e in fetch)
        nbytes = sum(e.get("bytes", 0) for e in fetch)
        out.update(
            fetch_at=rel(f0),
            fetch_s=round(f1 - f0, 3),
            fetch_GB=round(nbytes / 1e9, 3),
            fetch_GBps=round(nbytes / (f1 - f0) / 1e9, 3) if f1 > f0 else None,
            fetch_chunks=sum(e.get("got", 0) for e in fetch),
        )
    if by.get("respond"):
        out["respond_at"] = rel(first("respond"))
    if by.get("retrieve"):
        r0, r1 = first("retrieve"), last("retrieve")
        out["retrieve_at"], out["retrieve_s"] = rel(r0), round(r1 - r0, 3)
        copies = [(e["t0"], e["t1"]) for e in by.get("to_gpu_batched", []) + by.get("to_gpu", [])]
        out["copy_s"] = round(_union(copies), 3) if copies else None
    # the gaps between the phases, in the order a warm request passes them
    marks = [("send", sent)]
    for name, key in (("lookup", "lookup_at"), ("fetch_end", None), ("respond", "respond_at"),
                      ("retrieve", "retrieve_at")):  # fmt: skip
        if name == "fetch_end":
            if "fetch_s" in out:
                marks.append((name, sent + out["fetch_at"] + out["fetch_s"]))
        elif key in out:
            marks.append((name, sent + out[key]))
    if "retrieve_s" in out:
        marks.append(("retrieve_end", sent + out["retrieve_at"] + out["retrieve_s"]))
    marks.append(("first_token", sent + ttft))
    pairs = zip(marks, marks[1:], strict=False)
    out["gaps"] = {f"{a}->{b}": round(tb - ta, 3) for (a, ta), (b, tb) in pairs}
    return out


if __name__ == "__main__":
    a = sys.argv[1:]
    print(json.dumps(breakdown(a[0], float(a[1]), float(a[2]))))
