"""Where each request's KV came from, from the engines' own lines (routerbench.py, issue 54).

Pure: text in, figures out (tests/unit/test_hw_h200_rbench.py runs it on recorded lines).

vLLM 0.25.1 + LMCache 0.5.6 (in-process) write, per request, in the engine's log:

    LMCache INFO: Reqid: <id>, Total tokens N, Inference Engine computed tokens: G,
        LMCache hit tokens: H, need to load: L
    LMCache INFO: [req_id=<id>] Retrieved R out of L required tokens (from N total tokens) ...

G is what vLLM's GPU prefix cache served (the scheduler's computed tokens, before LMCache is
asked), R what LMCache loaded into the request. LMCache's lines do not say from which tier:
its async prefetch asks the DRAM tier (LocalCPUBackend) first and the remote backend for the
chunks after the DRAM tier's hits (``StorageManager.async_lookup_and_prefetch``), so the
trace's records of the remote backend for that request (``trace/sitecustomize.py``: ``contains``
with the chunks it was asked for, ``fetch`` with the chunks it returned) place the DRAM/S3
boundary. Tokens [0, G) came from the GPU, [G, G + R) were loaded (the DRAM tier's chunks
first, then S3's), the rest was computed.

The lab engine (the CPU dry run's stand-in) writes one line with all four figures:

    lmcache: request=<id> prompt_tokens=N hit_tokens=H loaded_tokens=R dram_tokens=D
        local_hit_tokens=G computed_tokens=C ...
"""

from __future__ import annotations

import json
import re
from collections.abc import Iterable
from dataclasses import asdict, dataclass

TIERS = ("gpu", "dram", "s3", "recompute")
_ANSI = re.compile(r"\x1b\[[0-9;]*m")
REQ = re.compile(
    r"Reqid: (\S+?), Total tokens (\d+), Inference Engine computed tokens: (\d+), "
    r"LMCache hit tokens: (\d+), need to load: (\d+)"
)
RETRIEVED = re.compile(r"\[req_id=(\S+?)\] Retrieved (\d+) out of (\d+) required tokens")
LAB = re.compile(r"lmcache: request=(\S+) (.*)")


@dataclass
class Source:
    """One request's prompt tokens by where their KV came from, as its engine reported them."""

    engine: str
    prompt: int
    gpu: int
    dram: int
    s3: int
    recompute: int
    lmcache_hit: int = 0  # LMCache's lookup (may exceed what was loaded: vLLM's prefix first)
    split: str = "log"  # how DRAM and S3 were told apart: "log", "trace", "no load", "no dram"

    @property
    def tier(self) -> str:
        """The tier that served most of the prompt (ties: the faster one)."""
        got = {t: getattr(self, t) for t in TIERS}
        return max(TIERS, key=lambda t: (got[t], -TIERS.index(t)))

    def to_dict(self) -> dict:
        return {**asdict(self), "tier": self.tier}


def _clean(line: str) -> str:
    """The line without its terminal colours."""
    return _ANSI.sub("", line)


def engine_lines(text: str) -> dict[str, dict]:
    """Request id -> what its engine's log says of it (first lookup line, last retrieve line;
    the lab engine's own line), from one engine's log."""
    out: dict[str, dict] = {}
    for raw in text.splitlines():
        line = _clean(raw)
        if m := REQ.search(line):
            rid = m.group(1)
            rec = out.setdefault(rid, {})
            # a preempted request is looked up again: its first lookup is the one it ran with
            rec.setdefault(
                "lookup",
                {
                    "total": int(m.group(2)),
                    "gpu": int(m.group(3)),
                    "hit": int(m.group(4)),
                    "load": int(m.group(5)),
                },  # fmt: skip
            )
        elif m := RETRIEVED.search(line):
            out.setdefault(m.group(1), {})["retrieved"] = int(m.group(2))
        elif m := LAB.search(line):
            fields = dict(kv.split("=", 1) for kv in m.group(2).split() if "=" in kv)
            if "prompt_tokens" in fields:
                out.setdefault(m.group(1), {})["lab"] = {k: _num(v) for k, v in fields.items()}
    return out


def _num(v: str):
    """An int or float where the text is one, else the text."""
    try:
        return int(v)
    except ValueError:
        try:
            return float(v)
        except ValueError:
            return v


def trace_remote(lines: Iterable[str], since: float = 0.0) -> dict[str, dict]:
    """Request id -> the remote backend's ``asked`` and ``got`` chunks (trace.jsonl records of
    ``contains`` and ``fetch`` carrying the request's lookup id), from ``since`` on."""
    out: dict[str, dict] = {}
    for line in lines:
        try:
            r = json.loads(line)
        except ValueError:
            continue
        rid = r.get("id")
        if not rid or r.get("t0", 0) < since:
            continue
        rec = out.setdefault(rid, {"asked": 0, "hit": 0, "got": 0})
        if r.get("ph") == "contains":
            rec["asked"] += int(r.get("n") or 0)
            rec["hit"] += int(r.get("hit") or 0)
        elif r.get("ph") == "fetch":
            rec["got"] += int(r.get("got") or 0)
        elif r.get("ph") == "lookup_prefetch":
            rec["chunks"] = int(r.get("n") or 0)
    return out


def _overlap(a0: int, a1: int, b0: int, b1: int) -> int:
    """Tokens [a0, a1) and [b0, b1) have in common."""
    return max(0, min(a1, b1) - max(a0, b0))


def source(
    engine: str,
    rec: dict,
    remote: dict | None,
    chunk_size: int,
    dram_on: bool,
    prompt: int | None = None,
) -> Source | None:
    """One request's tiers from its engine's records; None when its engine wrote none.

    + rec: ``engine_lines``' record of the request
    + remote: ``trace_remote``'s record of it (None: the trace has none)
    + chunk_size: LMCache's chunk size (the trace counts chunks)
    + dram_on: the variant's ``local_cpu`` (off: every loaded token came from S3)
    + prompt: the response's prompt tokens, where the log has no total
    """
    if "lab" in rec:
        f = rec["lab"]
        n, g = int(f["prompt_tokens"]), int(f["local_hit_tokens"])
        loaded, dram = int(f["loaded_tokens"]), int(f["dram_tokens"])
        return Source(engine, n, g, dram, loaded - dram, n - g - loaded,
                      int(f.get("hit_tokens", loaded)), "log")  # fmt: skip
    look = rec.get("lookup")
    if look is None:
        return None
    n = look["total"] or (prompt or 0)
    g = look["gpu"]
    loaded = rec.get("retrieved", 0 if look["load"] == 0 else None)
    if loaded is None:
        # looked up, to load, never retrieved: LMCache gave up (a timeout): recomputed
        loaded = 0
    end = g + loaded
    if loaded == 0:
        dram = s3 = 0
        split = "no load"
    elif not dram_on:
        dram, s3, split = 0, loaded, "no dram"
    elif remote is None:
        # no remote backend record of the request: the DRAM tier answered every chunk
        # (LMCache asks the remote backend only for the chunks after the DRAM tier's hits)
        dram, s3, split = loaded, 0, "trace"
    else:
        # the lookup's chunks (its keys); without that record, as if the DRAM tier had none
        chunks = remote.get("chunks", remote["asked"])
        dram_end = max(0, chunks - remote["asked"]) * chunk_size
        s3_end = dram_end + remote["got"] * chunk_size
        dram = _overlap(g, end, 0, dram_end)
        s3 = _overlap(g, end, dram_end, s3_end)
        # a partial last chunk: what was loaded beyond the counted chunks is the last tier's
        rest = loaded - dram - s3
        if rest > 0:
            if remote["got"]:
                s3 += rest
            else:
                dram += rest
        split = "trace"
    return Source(engine, n, g, dram, s3, max(0, n - g - loaded), look["hit"], split)


def match(response_id: str | None, ids: Iterable[str], tag: str | None = None) -> str | None:
    """The engine's id of the request whose response carried ``response_id``: vLLM appends
    suffixes of its own (``cmpl-<id>-0-<8 hex>``); the lab engine logs the id itself. ``tag``:
    the request's own ``X-Request-Id``, which vLLM builds its id from (any router between
    that drops the header leaves the response id)."""
    ids = list(ids)
    if response_id:
        for rid in ids:
            if rid == response_id or rid.startswith(response_id + "-"):
                return rid
    if tag:
        for rid in ids:
            if tag in rid:
                return rid
    return None


def account(
    records: list[dict],
    logs: dict[str, str],
    trace: Iterable[str],
    chunk_size: int,
    dram_on: bool,
    since: float = 0.0,
) -> list[dict]:
    """Each record with its ``source`` (a Source's dict) or ``source: None`` (unaccounted).

    + records: routerbench's requests (``id``: the response's id, ``prompt_tokens``)
    + logs: engine name -> the text its log gained during the cell
    + trace: trace.jsonl lines; + since: the cell's start (older trace records are not its)
    """
    by_engine = {name: engine_lines(text) for name, text in logs.items()}
    remote = trace_remote(trace, since)
    out = []
    for r in records:
        src = None
        for name, lines in by_engine.items():
            rid = match(r.get("id"), lines, r.get("tag"))
            if rid is None:
                continue
            s = source(name, lines[rid], remote.get(rid), chunk_size, dram_on,
                       r.get("prompt_tokens"))  # fmt: skip
            if s is not None:
                src = s.to_dict()
                break
        out.append({**r, "source": src})
    return out


def summary(rows: list[dict]) -> dict:
    """Requests and prompt tokens per tier; ``unaccounted``: answered requests no engine
    line names (the target is 0), ``failed``: requests that got no answer."""
    ok = [r for r in rows if r.get("status") == 200]
    known = [r for r in ok if r.get("source")]
    tiers = {t: sum(1 for r in known if r["source"]["tier"] == t) for t in TIERS}
    tokens = {t: sum(r["source"][t] for r in known) for t in TIERS}
    engines: dict[str, int] = {}
    for r in known:
        engines[r["source"]["engine"]] = engines.get(r["source"]["engine"], 0) + 1
    return {
        "requests": len(rows),
        "failed": len(rows) - len(ok),
        "unaccounted": len(ok) - len(known),
        "tier_requests": tiers,
        "tier_tokens": tokens,
        "engines": engines,
    }
