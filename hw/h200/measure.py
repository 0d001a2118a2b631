#!/usr/bin/env python3
"""Where the cache pays: cold and warm TTFT per document length and S3 setup, on the H200.

    measure.py RENDERED STATE OUT cold LABEL TOKENS     empty the bucket, send a new document
    measure.py RENDERED STATE OUT warm LABEL FROM       resend FROM's document from the bucket
    measure.py RENDERED STATE OUT clear LABEL           delete the bucket's objects

The requests, metrics and object accounting are the verifier's (``Runner.ask``,
``Runner.wait_objects``, bookkeeping); what differs from its cycle is that the warm request
follows ``POST /reset_prefix_cache`` (vLLM's dev endpoint, VLLM_SERVER_DEV_MODE=1) instead of a
restart, so one engine serves every length, and a warm can be repeated after the S3 setup changed
(haproxy's radosgw count). With ``local_cpu: false`` LMCache keeps no copy of its own: the warm
request's KV comes from the bucket, as after a restart (the proof's restarted warms check that).
One line per request in OUT/cells.jsonl, with the connector the variant loads and, when the
engine is traced (``KVCEPH_H200_TRACE``, ``trace/sitecustomize.py``), the request's time inside
the engine (``breakdown.py``).
"""

from __future__ import annotations

import json
import os
import sys
import time
import urllib.request
from dataclasses import replace
from datetime import datetime
from pathlib import Path

HERE = Path(__file__).resolve().parent
sys.path.insert(0, str(HERE))

from breakdown import breakdown  # noqa: E402
from prove import log, setup  # noqa: E402

from deploys.verification import bookkeeping  # noqa: E402
from deploys.verification.runner import Runner  # noqa: E402

# The connection count a row named plain "kvceph" ran (kvceph's default, 16), fixed so a row's
# name means the same in every results/ table (64 connections are "kvceph-c64").
NAMED_CONNECTIONS = 16


def reset_prefix_cache(base_url: str, timeout: float = 60) -> float:
    """Empty vLLM's GPU prefix cache; retried while blocks are still held (async stores)."""
    t0 = time.time()
    if os.environ.get("H200_DRY_RUN"):  # the lab engine keeps no GPU prefix cache
        return 0.0
    while True:
        req = urllib.request.Request(f"{base_url}/reset_prefix_cache", data=b"", method="POST")
        with urllib.request.urlopen(req, timeout=30) as resp:  # noqa: S310
            body = resp.read().decode()
        # vLLM 0.25.1 answers 200 with an empty body; later versions {"success": ...}
        if not body.strip() or json.loads(body).get("success"):
            return time.time() - t0
        if time.time() - t0 > timeout:
            raise RuntimeError(f"/reset_prefix_cache kept answering {body}")
        time.sleep(1)


def lmcache_lines(log_path: str, since: float, words=("Retrieved", "hit tokens")) -> list[str]:
    """LMCache's own report of the last request (its lines carry date and time)."""
    out = []
    for line in Path(log_path).read_text(errors="replace").splitlines():
        if not any(w in line for w in words) or "LMCache" not in line:
            continue
        try:
            stamp = line.split("] LMCache")[0].rsplit("[", 1)[1].split(",")[0]
            if datetime.fromisoformat(stamp).timestamp() < since - 1:
                continue
        except (IndexError, ValueError):
            continue
        out.append(line[line.find("LMCache") :][:300])
    return out[-4:]


def connector(cfg: dict) -> str:
    """Which S3 connector the variant's lmcache.yaml loads: kvceph's plugin ("kvceph-shm" when
    its GET bodies land in files, kvceph.receive_dir; "-cN" when it runs N connections instead
    of NAMED_CONNECTIONS) or LMCache's."""
    if not cfg["lmcache"].get("remote_storage_plugins"):
        return "lmcache"
    extra = cfg["lmcache"].get("extra_config") or {}
    name = "kvceph-shm" if extra.get("kvceph.receive_dir") else "kvceph"
    n = int(extra.get("kvceph.connections", NAMED_CONNECTIONS))
    return name if n == NAMED_CONNECTIONS else f"{name}-c{n}"


def variant_fields(cfg: dict, t) -> dict:
    """What every row says of its variant: name, connector, KV dtype, chunk size."""
    return {
        "variant": cfg["variant"],
        "connector": connector(cfg),
        "kv_dtype": cfg["engine"]["kv_dtype"],
        "chunk_size": t.chunk_size,
    }


def inside(t0: float, ttft: float | None) -> dict | None:
    """The engine's own phases of the request sent at t0 (trace/sitecustomize.py), if traced."""
    path = os.environ.get("KVCEPH_H200_TRACE")
    if not path or ttft is None:
        return None
    time.sleep(0.3)  # the engine's last trace lines of the request
    return breakdown(path, t0, ttft)


def record(out: str, row: dict) -> None:
    with open(Path(out) / "cells.jsonl", "a") as f:
        f.write(json.dumps(row) + "\n")
    log(json.dumps(row))


def cold(rendered, state, out, label, tokens):
    cfg, t, options, bucket, engine = setup(rendered, state)
    o = replace(options, document_tokens=tokens, objects_timeout=600)
    old = list(bucket.list(""))
    if old:
        bucket.delete(old)
    runner = Runner(o, bucket, None, log=log)
    _, names = runner.object_names(t)
    t0 = time.time()
    got, metric, hit = runner.ask(t)
    inner = inside(t0, got.ttft)
    pt = got.prompt_tokens
    expected = bookkeeping.expected_objects(pt, t.chunk_size, t.tensor_parallel_size, False)
    created = runner.wait_objects(names)
    row = {
        "label": label,
        "kind": "cold",
        **variant_fields(cfg, t),
        "nonce": runner.nonce,
        "document_tokens": tokens,
        "prompt_tokens": pt,
        "ttft_s": got.ttft,
        "hit_tokens": hit,
        "objects": len(created),
        "expected_objects": expected,
        "kv_bytes": sum(x.size for x in created.values()),
        "stored_after_s": round(time.time() - t0, 1),
        "deleted_before": len(old),
        "inside": inner,
        "lmcache": lmcache_lines(engine.info()["log"], t0, ("Stored", "hit tokens")),
        "at": time.time(),
    }
    (Path(state) / f"cell-{label}.json").write_text(json.dumps(row))
    record(out, row)


def warm(rendered, state, out, label, source):
    cfg, t, options, bucket, engine = setup(rendered, state)
    c = json.loads((Path(state) / f"cell-{source}.json").read_text())
    o = replace(options, document_tokens=c["document_tokens"])
    runner = Runner(o, bucket, None, log=log, nonce=c["nonce"])
    reset_s = reset_prefix_cache(t.base_url)
    t0 = time.time()
    got, metric, hit = runner.ask(t)
    inner = inside(t0, got.ttft)
    expected_hit = bookkeeping.expected_hit_tokens(c["prompt_tokens"], t.chunk_size, False)
    kv, cold_ttft = c["kv_bytes"], c["ttft_s"]
    row = {
        "label": label,
        "kind": "warm",
        **variant_fields(cfg, t),
        "min_hit_tokens": cfg["lmcache"].get("extra_config", {}).get("kvceph.min_hit_tokens"),
        "cold_label": source,
        "document_tokens": c["document_tokens"],
        "prompt_tokens": got.prompt_tokens,
        "ttft_s": got.ttft,
        "cold_ttft_s": cold_ttft,
        "hit_tokens": hit,
        "expected_hit_tokens": expected_hit,
        "metric": metric,
        "kv_bytes": kv,
        "achieved_GBps": round(kv / got.ttft / 1e9, 3) if got.ttft and hit else 0.0,
        "break_even_GBps": round(kv / cold_ttft / 1e9, 3) if cold_ttft else None,
        "warm_over_cold": round(got.ttft / cold_ttft, 3) if got.ttft and cold_ttft else None,
        "reset_s": round(reset_s, 2),
        "inside": inner,
        "lmcache": lmcache_lines(engine.info()["log"], t0),
        "at": time.time(),
    }
    record(out, row)


def clear(rendered, state, out, label):
    """Delete the bucket's objects (the cell's), so the memstore OSDs free their memory."""
    cfg, t, options, bucket, engine = setup(rendered, state)
    keys = list(bucket.list(""))
    if keys:
        bucket.delete(keys)
    log(f"{label}: deleted {len(keys)} objects")


if __name__ == "__main__":
    a = sys.argv[1:]
    if a[3] == "cold":
        cold(a[0], a[1], a[2], a[4], int(a[5]))
    elif a[3] == "clear":
        clear(a[0], a[1], a[2], a[4])
    else:
        warm(a[0], a[1], a[2], a[4], a[5])
