"""The router's benchmark (docs/router.md, issue 41): D documents x R repeats from C clients,
through the router (cache_aware) and directly round-robin over the engines. A benchmark, not a
test: never part of ``make test``.

    KVCEPH_LAB_INSTANCE=5 .venv/bin/python bench/router.py --docs 12 --repeats 4 --clients 4

On a converged lab (``make lab-up deploy``, the router on ceph1). Every request is streamed;
its TTFT is the client's time to the first token. Each repeat is classified from the engine's
own log line for it (``lmcache: request=<id> ... local_hit_tokens dram_tokens loaded_tokens
computed_tokens``, joined on the response's id): GPU (vLLM's prefix cache), DRAM (LMCache's
CPU tier), S3 (loaded from the bucket) or recompute, by the source of most of its tokens.

The lab engine's model of the tiers (lab/engine/README.md): prefill sleeps 0.2 ms per computed
token; S3 loads at 2 MB/s per host of 128 bytes per token (64 per TP worker); DRAM 10x that;
the GPU prefix cache costs nothing. A 2,048-word document: ~0.41 s recompute, ~0.13 s from S3,
~0.013 s from DRAM. Results: bench/results/router-<UTC>.json and the table on stdout.
"""

from __future__ import annotations

import argparse
import json
import os
import queue
import random
import re
import statistics
import subprocess
import sys
import threading
import time
import urllib.request
import uuid
from datetime import UTC, datetime
from pathlib import Path

REPO = Path(__file__).resolve().parents[1]
INSTANCE = int(os.environ.get("KVCEPH_LAB_INSTANCE") or 0)
NET = f"10.213.{7 + INSTANCE}"
LAB = os.environ.get("KVCEPH_LAB_DIR", f"/var/lib/kvceph-lab{INSTANCE or ''}")
ENGINES = {"gpu1": f"{NET}.21", "gpu2": f"{NET}.22", "gaudi1": f"{NET}.31"}
ROUTER = f"http://{NET}.11:8100"
MODEL = "Qwen/Qwen3-32B"
LINE = re.compile(r"lmcache: request=(\S+) (.*)")


def api_key() -> str:
    for line in open(f"{LAB}/secrets.env").read().splitlines():
        if line.startswith("KVCEPH_VLLM_API_KEY="):
            return line.split("=", 1)[1].strip().strip("'\"")
    sys.exit(f"{LAB}/secrets.env: no KVCEPH_VLLM_API_KEY")


def one(url: str, prompt: str, key: str) -> dict:
    """One streamed completion: its id, TTFT and status."""
    body = {"model": MODEL, "prompt": prompt, "max_tokens": 4, "stream": True}
    req = urllib.request.Request(
        f"{url}/v1/completions",
        json.dumps(body).encode(),
        {"Content-Type": "application/json", "Authorization": f"Bearer {key}"},
    )
    t0 = time.monotonic()
    out = {"id": None, "ttft": None, "status": None}
    try:
        with urllib.request.urlopen(req, timeout=120) as r:
            out["status"] = r.status
            for raw in r:
                line = raw.decode().strip()
                if not line.startswith("data: {"):
                    continue
                if out["ttft"] is None:
                    out["ttft"] = time.monotonic() - t0
                out["id"] = out["id"] or json.loads(line[6:]).get("id")
    except OSError as exc:
        out["status"] = getattr(exc, "code", str(exc))
    return out


def workload(docs: int, repeats: int, words: int, seed: int) -> list[tuple[int, int, str]]:
    """(doc, visit, prompt): every document once (cold), then its repeats shuffled."""
    rnd = random.Random(seed)
    texts = [
        " ".join([f"d{uuid.uuid4().hex}"] + [f"w{rnd.randrange(97)}" for _ in range(words - 1)])
        for _ in range(docs)
    ]
    first = [(d, 0, texts[d]) for d in range(docs)]
    later = [(d, v, texts[d]) for d in range(docs) for v in range(1, repeats)]
    rnd.shuffle(later)
    return first + later


def run(mode: str, work, clients: int, key: str) -> list[dict]:
    """Send ``work`` from ``clients`` threads: to the router, or round-robin over the engines."""
    todo: queue.Queue = queue.Queue()
    urls = [f"http://{ip}:8000" for ip in ENGINES.values()]
    counter, lock, records = [0], threading.Lock(), []

    def client():
        while True:
            try:
                doc, visit, prompt = todo.get_nowait()
            except queue.Empty:
                return
            with lock:
                url = ROUTER if mode == "router" else urls[counter[0] % len(urls)]
                counter[0] += 1
            rec = one(url, prompt, key)
            records.append({"doc": doc, "visit": visit, **rec})

    first = [w for w in work if w[1] == 0]
    rest = [w for w in work if w[1] > 0]
    # The cold pass completes before the repeats: each document is stored once, as a
    # corpus is ingested before it is asked about.
    for batch in (first, rest):
        for item in batch:
            todo.put(item)
        threads = [threading.Thread(target=client) for _ in range(clients)]
        for t in threads:
            t.start()
        for t in threads:
            t.join()
    return records


def engine_lines(since: float) -> dict[str, dict]:
    """request id -> the engine's figures, from every engine's journal since ``since``."""
    out = {}
    for host, ip in ENGINES.items():
        cmd = f"journalctl -u vllm --since @{int(since) - 1} -o cat | grep 'lmcache: request='"
        text = subprocess.run(
            [
                "ssh", "-i", f"{LAB}/id_ed25519", "-o", f"UserKnownHostsFile={LAB}/known_hosts",
                "-o", "BatchMode=yes", f"root@{ip}", cmd,
            ],
            capture_output=True, text=True, timeout=60,
        ).stdout  # fmt: skip
        for line in text.splitlines():
            m = LINE.search(line)
            if m:
                fields = dict(kv.split("=", 1) for kv in m.group(2).split())
                out[m.group(1)] = {"host": host, **fields}
    return out


def tier(f: dict) -> str:
    n = int(f["prompt_tokens"])
    gpu, dram = int(f["local_hit_tokens"]), int(f["dram_tokens"])
    s3 = int(f["loaded_tokens"]) - dram
    best = max((gpu, "gpu"), (dram, "dram"), (s3, "s3"))
    return best[1] if best[0] >= n // 2 else "recompute"


def summary(records: list[dict], lines: dict) -> dict:
    repeats = [r for r in records if r["visit"] > 0]
    ok = [r for r in repeats if r["status"] == 200 and r["id"] in lines]
    tiers = [tier(lines[r["id"]]) for r in ok]
    ttft = sorted(r["ttft"] for r in ok)
    p99 = ttft[min(len(ttft) - 1, int(0.99 * len(ttft)))] if ttft else None
    return {
        "repeats": len(repeats),
        "classified": len(ok),
        "fraction": {
            t: round(tiers.count(t) / max(1, len(tiers)), 3)
            for t in ("gpu", "dram", "s3", "recompute")
        },  # fmt: skip
        "ttft_mean_s": round(statistics.mean(ttft), 4) if ttft else None,
        "ttft_p99_s": round(p99, 4) if p99 else None,
        "failed": [r for r in records if r["status"] != 200][:5],
    }


def main() -> None:
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("--docs", type=int, default=12)
    p.add_argument("--repeats", type=int, default=4)
    p.add_argument("--clients", type=int, default=4)
    p.add_argument("--words", type=int, default=2048)
    p.add_argument("--seed", type=int, default=41)
    a = p.parse_args()
    key = api_key()
    result = {"args": vars(a), "time": datetime.now(UTC).isoformat(), "modes": {}}
    for mode in ("router", "direct"):
        since = time.time()
        records = run(mode, workload(a.docs, a.repeats, a.words, a.seed), a.clients, key)
        time.sleep(1)
        result["modes"][mode] = summary(records, engine_lines(since))
    out = REPO / "bench" / "results" / f"router-{datetime.now(UTC):%Y%m%dT%H%M%SZ}.json"
    out.parent.mkdir(exist_ok=True)
    out.write_text(json.dumps(result, indent=1) + "\n")
    print(f"{a.docs} documents x {a.repeats} visits, {a.clients} clients, {a.words} words")
    print("mode     repeats  gpu    dram   s3     recompute  TTFT mean  TTFT p99")
    for mode, s in result["modes"].items():
        f = s["fraction"]
        print(
            f"{mode:8} {s['classified']:>3}/{s['repeats']:<4} {f['gpu']:<6} {f['dram']:<6} "
            f"{f['s3']:<6} {f['recompute']:<10} {s['ttft_mean_s']:<10} {s['ttft_p99_s']}"
        )
    print(out)


if __name__ == "__main__":
    main()
