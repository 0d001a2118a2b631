"""Put admission on the lab (issue 37 item 4): objects written and cold TTFT with and without.

A benchmark, not a test (bench/README.md): never part of `make test`. For each mode
(``kvceph_skip_short_puts`` off, then on) the running lab is deployed with kvceph's connector and
a fixed crossover (``kvceph_min_hit_tokens``), the DRAM tier as configured (on by default), then:
- cold requests of each length in ``--lengths`` (fresh prompts, one at a time, to gpu1,
  streamed): TTFT (first streamed token, client side) and the objects the request added to the
  bucket (counted once the bucket stopped changing: the lab engine puts after the answer);
- the hazard (docs/design.md): a short prompt on gpu1, a longer one extending it on gpu1, then
  the longer one on gpu2: the tokens gpu2 loaded from S3 (vLLM's external_kv_transfer counter).
The lab is deployed with its committed settings again at the end.

    KVCEPH_LAB_INSTANCE=2 .venv/bin/python bench/admission.py --repeat 3

Output: bench/results/admission-<UTC>.json (every sample) and the table on stdout.
"""

from __future__ import annotations

import argparse
import json
import os
import re
import statistics
import subprocess
import sys
import time
import urllib.request
import uuid
from pathlib import Path

REPO = Path(__file__).resolve().parents[1]
INSTANCE = int(os.environ.get("KVCEPH_LAB_INSTANCE") or 0)
NET = f"10.213.{7 + INSTANCE}"
LAB = Path(os.environ.get("KVCEPH_LAB_DIR", f"/var/lib/kvceph-lab{INSTANCE or ''}"))
SECRETS = Path(os.environ.get("KVCEPH_SECRETS_FILE", LAB / "secrets.env"))
ENGINES = {"gpu1": f"{NET}.21", "gpu2": f"{NET}.22"}
S3_ADMIN = f"http://{NET}.11:80"  # the Pacific lab's haproxy, plain HTTP (tests' S3_ADMIN_URL)
BUCKET = "lmcache"


def secrets() -> dict[str, str]:
    return dict(line.split("=", 1) for line in SECRETS.read_text().splitlines() if "=" in line)


def deploy(*data: str) -> float:
    """pyinfra against the lab with ``--data`` overrides; seconds it took."""
    argv = [str(REPO / ".venv/bin/pyinfra"), "-y", "inventories/lab.py", "deploy.py"]
    for item in data:
        argv += ["--data", item]
    t0 = time.monotonic()
    proc = subprocess.run(argv, cwd=REPO, capture_output=True, text=True, timeout=900)
    if proc.returncode != 0:
        sys.exit(f"deploy {data} failed: {(proc.stdout + proc.stderr)[-3000:]}")
    return time.monotonic() - t0


def s3():
    import boto3
    from botocore.config import Config

    keys = secrets()
    return boto3.client(
        "s3",
        endpoint_url=S3_ADMIN,
        region_name="default",
        aws_access_key_id=keys["KVCEPH_S3_ADMIN_ACCESS_KEY"],
        aws_secret_access_key=keys["KVCEPH_S3_ADMIN_SECRET_KEY"],
        config=Config(s3={"addressing_style": "path"}),
    )


def objects(client) -> int:
    pages = client.get_paginator("list_objects_v2").paginate(Bucket=BUCKET)
    return sum(page.get("KeyCount", 0) for page in pages)


def settled(client, quiet_s: float = 1.0) -> int:
    """The bucket's object count once it stopped changing for ``quiet_s`` (a streamed answer
    ends before the lab engine's puts do)."""
    count, since = objects(client), time.monotonic()
    while time.monotonic() - since < quiet_s:
        time.sleep(0.2)
        now = objects(client)
        if now != count:
            count, since = now, time.monotonic()
    return count


def headers() -> dict[str, str]:
    key = secrets().get("KVCEPH_VLLM_API_KEY", "").strip().strip("'\"")
    return {
        "Content-Type": "application/json",
        **({"Authorization": f"Bearer {key}"} if key else {}),
    }


def prompt(words: int, head: str | None = None) -> str:
    """``words`` tokens (one per word); a fresh first word unless ``head`` (a prefix) is given."""
    first = head.split() if head else [f"n{uuid.uuid4().hex}"]
    return " ".join(first + [f"w{i % 97}" for i in range(words - len(first))])


def request(host: str, text: str) -> float:
    """TTFT in seconds of one streamed completion (read to its end)."""
    body = json.dumps(
        {"model": "Qwen/Qwen3-32B", "prompt": text, "max_tokens": 2, "stream": True}
    ).encode()
    req = urllib.request.Request(f"http://{ENGINES[host]}:8000/v1/completions", body, headers())
    t0 = time.monotonic()
    ttft = None
    with urllib.request.urlopen(req, timeout=120) as r:
        for line in r:
            if ttft is None and line.startswith(b"data: ") and not line.startswith(b"data: [DONE]"):
                ttft = time.monotonic() - t0
    return ttft or float("nan")


def external(host: str) -> float:
    """vLLM's prompt tokens loaded by the KV connector so far (its /metrics counter)."""
    req = urllib.request.Request(f"http://{ENGINES[host]}:8000/metrics", headers=headers())
    with urllib.request.urlopen(req, timeout=10) as r:
        text = r.read().decode()
    total = 0.0
    for line in text.splitlines():
        if line.startswith("vllm:prompt_tokens_by_source_total{") and re.search(
            r'source="external_kv_transfer"', line
        ):
            total += float(line.rsplit(" ", 1)[1])
    return total


def mode(skip: bool, crossover: int, lengths: list[int], repeat: int, client) -> dict:
    took = deploy(
        "kvceph_lmcache_connector=kvceph",
        f"kvceph_min_hit_tokens={crossover}",
        f"kvceph_skip_short_puts={skip}",
    )
    samples = []
    for _ in range(repeat):
        for n in lengths:
            before = settled(client)
            ttft = request("gpu1", prompt(n))
            samples.append({"tokens": n, "ttft_s": ttft, "objects": settled(client) - before})
    # The hazard: a short prefix, its extension on the same node, the extension elsewhere.
    short = prompt(lengths[0])
    longer = prompt(max(lengths), head=short)
    request("gpu1", short)
    request("gpu1", longer)
    settled(client)
    before = external("gpu2")
    request("gpu2", longer)
    hazard = {"short": lengths[0], "longer": max(lengths), "gpu2_loaded": external("gpu2") - before}
    return {"skip_short_puts": skip, "deploy_s": took, "samples": samples, "hazard": hazard}


def table(results: list[dict], crossover: int) -> str:
    rows = [
        f"crossover {crossover} tokens; per length: objects written per request and cold TTFT "
        "(medians of the repeats)",
        "| tokens | objects off | objects on | TTFT off (s) | TTFT on (s) |",
        "|---|---|---|---|---|",
    ]
    off, on = results
    for n in sorted({s["tokens"] for s in off["samples"]}):

        def med(r, field, n=n):
            return statistics.median(s[field] for s in r["samples"] if s["tokens"] == n)

        rows.append(
            f"| {n} | {med(off, 'objects'):.0f} | {med(on, 'objects'):.0f} "
            f"| {med(off, 'ttft_s'):.3f} | {med(on, 'ttft_s'):.3f} |"
        )
    total = [sum(s["objects"] for s in r["samples"]) for r in results]
    rows.append(f"objects written in all: off {total[0]}, on {total[1]}")
    for r in results:
        h = r["hazard"]
        rows.append(
            f"{'on ' if r['skip_short_puts'] else 'off'}: {h['short']} tokens then {h['longer']} "
            f"extending it on gpu1; the {h['longer']} on gpu2 loaded {h['gpu2_loaded']:.0f} tokens"
        )
    return "\n".join(rows)


def main(argv: list[str]) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--crossover", type=int, default=1024, help="kvceph_min_hit_tokens")
    ap.add_argument("--lengths", type=int, nargs="+", default=[300, 600, 900, 1100, 2048, 4096])
    ap.add_argument("--repeat", type=int, default=3)
    args = ap.parse_args(argv)
    client = s3()
    results = []
    try:
        for skip in (False, True):
            results.append(mode(skip, args.crossover, args.lengths, args.repeat, client))
    finally:
        deploy()  # the committed settings again
    out = (
        REPO
        / "bench"
        / "results"
        / f"admission-{time.strftime('%Y%m%dT%H%M%SZ', time.gmtime())}.json"
    )
    out.write_text(json.dumps({"crossover": args.crossover, "results": results}, indent=1) + "\n")
    print(table(results, args.crossover))
    print(f"samples: {out.relative_to(REPO)}")
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
