#!/usr/bin/env python3
"""The router benchmark on two real engines (issue 54): vllm-router in front of the pair.

    routerbench.py router RENDERED STATE POLICY SITE     (re)start the route with POLICY
    routerbench.py stop STATE                             stop the router (by its pid file)
    routerbench.py cell RENDERED STATE OUT LABEL POLICY WORKLOAD LEVEL RUN
    routerbench.py overhead RENDERED STATE OUT LABEL PAIRS

RENDERED: the variant's directory (``h200router.py``'s two hosts + ``router.json``, render.py).
The router runs ``deploys/remote/router_launch.py`` with the route's config as the router stage
writes it, the policy replaced (``cache_aware``, ``round_robin``; ``cache_aware@T`` sets
``cache_threshold`` T). A cell sends one workload (``qa``: documents and questions; ``sessions``:
multi-turn chats) at one prefix-sharing level (25, 60, 90: the percentage of every follow-up
request's prompt that an earlier request of its document or session sent) on a seeded arrival
schedule: RUN seeds it, so both policies get the same documents at the same times. Every
document's and session's prompts start with a word of their own, new to the cell, so no cell
hits another's KV. After the cell: each
request's KV source from the engines' logs and the trace (rbaccount.py), the engines' counters
around it; then the bucket emptied and the GPU prefix caches reset. ``overhead``: low load, one
request at a time, the same prompt sizes straight to an engine and through the router.
``RB_SCALE`` scales every size (the CPU dry run: 0.125). One JSON line per request and one per
cell (``kind``) into OUT/routerbench.jsonl; ``rbtable.py`` summarises it.
"""

from __future__ import annotations

import hashlib
import json
import os
import random
import signal
import subprocess
import sys
import threading
import time
import urllib.request
from dataclasses import dataclass
from pathlib import Path

HERE = Path(__file__).resolve().parent
CODE = HERE.parent.parent
sys.path.insert(0, str(HERE))
sys.path.insert(0, str(CODE))

import rbaccount  # noqa: E402

from deploys.verification import document  # noqa: E402

WORDS = document._WORDS  # one token each in model.py's tokenizer (and the lab engine's)
LEVELS = {"25": 0.25, "60": 0.60, "90": 0.90}
OUTPUT_TOKENS = 32
# documents and questions: D documents, V visits each, prompts of P words, Poisson arrivals
QA = {"docs": 5, "visits": 4, "prompt": 3072, "rate": 1.6}
# sessions: S chats, each turn's new text (the last answer and a new question) sized so the
# turn's earlier prompt is LEVEL of it; (turns, first prompt) per level; turns every GAP s
SESSIONS = {"sessions": 5, "start_rate": 1.0, "gap": 1.5,
            "shape": {"25": (3, 384), "60": (4, 768), "90": (6, 2048)}}  # fmt: skip
REQUEST_TIMEOUT = 120


@dataclass
class Req:
    """One request of a workload: its group (document or session), visit or turn, when it is
    sent (seconds after the cell's start) and its prompt (``shared``: words an earlier request
    of the group sent as the same prefix)."""

    group: int
    step: int
    at: float
    prompt: str
    words: int
    shared: int


def group_word(cell: str, group: int) -> str:
    """The first word of a document's or session's prompts: new to every engine, the bucket and
    the router's tree, and no prefix of another group's (vllm-router's tree matches characters:
    one word the cell's documents all began with sent every request of a cell to one engine in
    the CPU dry run)."""
    return hashlib.sha256(f"{cell}-{group}".encode()).hexdigest()[:12]


def _words(rnd: random.Random, n: int) -> list[str]:
    """``n`` words of the tokenizer's one-token vocabulary, drawn by ``rnd``."""
    return [rnd.choice(WORDS) for _ in range(max(1, n))]


def qa(level: str, seed: int, cell: str, scale: float = 1.0) -> list[Req]:
    """Documents and questions: each prompt is a document (LEVEL of it) and a question of its
    own; the visits in a seeded order at seeded Poisson times."""
    s = LEVELS[level]
    p = max(16, int(QA["prompt"] * scale))
    shared = max(1, round(p * s))
    rnd = random.Random(f"qa-{level}-{seed}")
    docs = [[group_word(cell, d), *_words(rnd, shared - 1)] for d in range(QA["docs"])]
    order = [(d, v) for d in range(QA["docs"]) for v in range(QA["visits"])]
    rnd.shuffle(order)
    seen: set[int] = set()
    out, t = [], 0.0
    for d, _ in order:
        q = _words(rnd, p - shared)
        step = sum(1 for r in out if r.group == d)
        out.append(Req(d, step, round(t, 3), " ".join(docs[d] + q), p,
                       shared if d in seen else 0))  # fmt: skip
        seen.add(d)
        t += rnd.expovariate(QA["rate"])
    return out


def sessions(level: str, seed: int, cell: str, scale: float = 1.0) -> list[Req]:
    """Multi-turn chats: turn t's prompt is turn t-1's and its new text (the last answer and
    the next question), sized so the earlier prompt is LEVEL of the new one."""
    s = LEVELS[level]
    turns, first = SESSIONS["shape"][level]
    first = max(16, int(first * scale))
    rnd = random.Random(f"sessions-{level}-{seed}")
    out, start = [], 0.0
    for g in range(SESSIONS["sessions"]):
        words = [group_word(cell, g), *_words(rnd, first - 1)]
        for t in range(turns):
            shared = 0
            if t:
                shared = len(words)
                words = words + _words(rnd, round(shared * (1 - s) / s))
            out.append(Req(g, t, round(start + t * SESSIONS["gap"], 3), " ".join(words),
                           len(words), shared))  # fmt: skip
        start += rnd.expovariate(SESSIONS["start_rate"])
    return sorted(out, key=lambda r: (r.at, r.group))


WORKLOADS = {"qa": qa, "sessions": sessions}


def sharing(reqs: list[Req]) -> dict:
    """The workload's sharing: per follow-up request (mean), and of every prompt word."""
    follow = [r.shared / r.words for r in reqs if r.step]
    return {
        "followups": round(sum(follow) / len(follow), 3) if follow else 0.0,
        "all_words": round(sum(r.shared for r in reqs) / sum(r.words for r in reqs), 3),
        "requests": len(reqs),
        "prompt_words": sum(r.words for r in reqs),
    }


def cell_word(label: str, run: int) -> str:
    """The cell's own word (its groups' first words derive from it; its requests' tags)."""
    return "rb" + hashlib.sha256(f"{label}-{run}-{time.time()}".encode()).hexdigest()[:10]


# -- requests --


def send(url: str, model: str, prompt: str, tag: str, max_tokens: int = OUTPUT_TOKENS) -> dict:
    """One streamed completion: TTFT (the first text), the last token's time, tokens."""
    body = {"model": model, "prompt": prompt, "max_tokens": max_tokens, "min_tokens": max_tokens,
            "ignore_eos": True, "temperature": 0, "stream": True,
            "stream_options": {"include_usage": True}}  # fmt: skip
    req = urllib.request.Request(
        f"{url}/v1/completions",
        json.dumps(body).encode(),
        {"Content-Type": "application/json", "X-Request-Id": tag},
    )
    out = {"tag": tag, "id": None, "status": None, "ttft": None, "total": None,
           "out_tokens": None, "prompt_tokens": None}  # fmt: skip
    t0 = time.monotonic()
    last = None
    try:
        with urllib.request.urlopen(req, timeout=REQUEST_TIMEOUT) as resp:  # noqa: S310
            out["status"] = resp.status
            for raw in resp:
                line = raw.decode(errors="replace").strip()
                if not line.startswith("data: {"):
                    continue
                event = json.loads(line[6:])
                out["id"] = out["id"] or event.get("id")
                if any((c or {}).get("text") for c in event.get("choices") or ()):
                    last = time.monotonic() - t0
                    if out["ttft"] is None:
                        out["ttft"] = last
                usage = event.get("usage")
                if usage:
                    out["out_tokens"] = usage.get("completion_tokens")
                    out["prompt_tokens"] = usage.get("prompt_tokens")
    except (OSError, ValueError) as exc:
        out["status"] = getattr(exc, "code", None) or f"{type(exc).__name__}: {exc}"[:200]
    out["total"] = time.monotonic() - t0
    n = out["out_tokens"]
    if n and n > 1 and last is not None and out["ttft"] is not None and last > out["ttft"]:
        out["out_tps"] = round((n - 1) / (last - out["ttft"]), 2)
    else:
        out["out_tps"] = None
    return out


def drive(url: str, model: str, reqs: list[Req], cell: str, kind: str) -> list[dict]:
    """Send ``reqs`` on their schedule: documents open loop; a session's turn waits for its
    last turn's answer too (``late``: how long after its time it went)."""
    t0 = time.monotonic()
    rows: list[dict] = [{} for _ in reqs]
    done = {i: threading.Event() for i in range(len(reqs))}
    prev: dict[int, int] = {}
    for i, r in enumerate(reqs):
        if kind == "sessions" and r.step:
            prev[i] = next(j for j in range(i - 1, -1, -1) if reqs[j].group == r.group)

    def one(i: int) -> None:
        r = reqs[i]
        try:
            wait = t0 + r.at - time.monotonic()
            if wait > 0:
                time.sleep(wait)
            if i in prev:
                done[prev[i]].wait()
            sent = time.monotonic() - t0
            tag = f"{cell}x{i:04d}"
            got = send(url, model, r.prompt, tag)
            rows[i] = {"group": r.group, "step": r.step, "at": r.at, "sent": round(sent, 3),
                       "late": round(max(0.0, sent - r.at), 3), "words": r.words,
                       "shared": r.shared, **got}  # fmt: skip
        finally:
            done[i].set()

    threads = [threading.Thread(target=one, args=(i,), daemon=True) for i in range(len(reqs))]
    for th in threads:
        th.start()
    for th in threads:
        th.join(REQUEST_TIMEOUT * 2)
    return rows


# -- the engines and the router --


def hosts(rendered: str, state: str) -> list[tuple[str, dict, object, object, object]]:
    """(host, runner.json, target, bucket, engine) of each host of the pair."""
    from prove import setup  # boto3: the GPU machine's and the dry run's, not the unit tests'

    g = json.loads((Path(rendered) / "group.json").read_text())
    out = []
    for h in g["hosts"]:
        cfg, target, _, bucket, engine = setup(str(Path(rendered) / h), state)
        out.append((h, cfg, target, bucket, engine))
    return out


def scrape(base_url: str) -> list:
    """An engine's /metrics, parsed; [] when it does not answer."""
    from deploys.monitoring import metrics

    try:
        with urllib.request.urlopen(f"{base_url}/metrics", timeout=30) as r:  # noqa: S310
            return metrics.parse(r.read().decode())
    except OSError:
        return []


COUNTERS = ("vllm:prefix_cache_hits", "vllm:prefix_cache_queries", "vllm:prompt_tokens",
            "lmcache:num_hit_tokens", "lmcache:num_remote_read_bytes")  # fmt: skip


def counters(before: list, after: list) -> dict:
    """How much each of ``COUNTERS`` grew between two scrapes (None: not exported)."""
    from deploys.monitoring import metrics

    out = {}
    for name in COUNTERS:
        a, b = metrics.total(before, name), metrics.total(after, name)
        out[name] = None if a is None or b is None else round(b - a, 1)
    return out


def route(rendered: str) -> dict:
    """The variant's first (only) route: its host, model and config (router.json)."""
    return json.loads((Path(rendered) / "router.json").read_text())[0]


def router_url(rendered: str) -> str:
    """Where the route listens on this machine."""
    return f"http://127.0.0.1:{route(rendered)['config']['port']}"


def _alive(pid: int) -> bool:
    """Whether ``pid`` still runs."""
    try:
        os.kill(pid, 0)
        return True
    except OSError:
        return False


def stop(state: str) -> None:
    """Stop the router this script started (its process group, by the pid file)."""
    pidfile = Path(state) / "router.pid"
    if not pidfile.exists():
        return
    pid = int(pidfile.read_text().split()[0])
    if _alive(pid):
        try:
            os.killpg(pid, signal.SIGTERM)
        except OSError:
            pass
        for _ in range(100):
            if not _alive(pid):
                break
            time.sleep(0.1)
        else:
            os.killpg(pid, signal.SIGKILL)
    pidfile.unlink()


def router(rendered: str, state: str, policy: str, site: str) -> str:
    """The route (re)started with ``policy``, both engines in its pool: every cell begins with
    an empty tree, as with the engines' emptied caches (a tree that kept earlier cells' text
    would route by documents no engine holds any more)."""
    st = Path(state)
    pidfile, cur = st / "router.pid", st / "router.policy"
    stop(state)
    r = route(rendered)
    config = dict(r["config"])
    name, _, threshold = policy.partition("@")
    config["policy"] = name
    if threshold:
        config["cache_threshold"] = float(threshold)
    path = st / "router-config.json"
    path.write_text(json.dumps(config, indent=1, sort_keys=True) + "\n")
    n = len(list(st.glob("router.*.log"))) + 1
    logf = open(st / f"router.{n}.log", "w")  # noqa: SIM115 - the router's for its life
    env = {**os.environ, "PYTHONPATH": site}
    env.pop("CREDENTIALS_DIRECTORY", None)  # the pair's engines have no API key
    proc = subprocess.Popen(
        [sys.executable, str(CODE / "deploys/remote/router_launch.py"), str(path)],
        stdout=logf, stderr=subprocess.STDOUT, env=env, start_new_session=True,
    )  # fmt: skip
    pidfile.write_text(f"{proc.pid}\n")
    cur.write_text(policy)
    url = f"http://127.0.0.1:{config['port']}"
    deadline = time.time() + 90
    while time.time() < deadline:
        if proc.poll() is not None:
            raise SystemExit(f"router exited ({proc.returncode}): {st}/router.{n}.log")
        try:
            with urllib.request.urlopen(f"{url}/workers", timeout=3) as resp:  # noqa: S310
                body = resp.read().decode()
            if all(w.replace("http://", "") in body for w in config["worker_urls"]):
                # the first health checks pass before a request is routed to a worker
                time.sleep(2 * config["health_check_interval_secs"])
                return f"started {policy} (pid {proc.pid}) on {url}"
        except OSError:
            pass
        time.sleep(0.5)
    raise SystemExit(f"router not ready after 90 s: {st}/router.{n}.log")


# -- a cell --


def _log_end(engine) -> tuple[str, int]:
    """The engine's current log and its size: where a cell's lines begin."""
    path = engine.info()["log"]
    return path, os.path.getsize(path)


def _log_since(path: str, offset: int) -> str:
    """What the log gained after ``offset``."""
    with open(path, "rb") as f:
        f.seek(offset)
        return f.read().decode(errors="replace")


def _trace(since: float) -> list[str]:
    """The engines' trace lines (trace/sitecustomize.py); rbaccount keeps those after ``since``."""
    path = os.environ.get("KVCEPH_H200_TRACE")
    if not path or not os.path.exists(path):
        return []
    return Path(path).read_text(errors="replace").splitlines()


def record(out: str, row: dict) -> None:
    """Append one JSON line to OUT/routerbench.jsonl."""
    with open(Path(out) / "routerbench.jsonl", "a") as f:
        f.write(json.dumps(row) + "\n")


def measured(pair, url: str, model: str, reqs, cell: str, kind: str, since: float) -> tuple:
    """Drive ``reqs`` at ``url``, then each request's source: (rows, counters, summary)."""
    ends = {h: _log_end(e) for h, _, _, _, e in pair}
    before = {h: scrape(t.base_url) for h, _, t, _, _ in pair}
    rows = drive(url, model, reqs, cell, kind)
    time.sleep(1.5)  # the engines' last lines of the cell (LMCache logs after the first token)
    after = {h: scrape(t.base_url) for h, _, t, _, _ in pair}
    logs = {h: _log_since(*ends[h]) for h in ends}
    cfg = pair[0][1]
    rows = rbaccount.account(rows, logs, _trace(since), int(cfg["lmcache"]["chunk_size"]),
                             bool(cfg["lmcache"].get("local_cpu")), since)  # fmt: skip
    return rows, {h: counters(before[h], after[h]) for h in before}, rbaccount.summary(rows)


def reset(pair) -> int:
    """Empty the bucket (every cell's objects: the memstore OSDs hold them in RAM) and both
    engines' GPU prefix caches, so the next cell starts as this one did."""
    from measure import reset_prefix_cache

    bucket = pair[0][3]
    time.sleep(1.0)  # LMCache's last asynchronous puts of the cell
    keys = list(bucket.list(""))
    if keys:
        bucket.delete(keys)
    for _, _, t, _, _ in pair:
        reset_prefix_cache(t.base_url)
    return len(keys)


def cell(rendered, state, out, label, policy, workload, level, run) -> None:
    scale = float(os.environ.get("RB_SCALE", "1"))
    pair = hosts(rendered, state)
    word = cell_word(label, int(run))
    reqs = WORKLOADS[workload](level, int(run), word, scale)
    since = time.time()
    t0 = time.monotonic()
    rows, ctr, summ = measured(pair, router_url(rendered), pair[0][2].model, reqs, word,
                               workload, since)  # fmt: skip
    wall = time.monotonic() - t0
    base = {"label": label, "policy": policy, "workload": workload, "level": int(level),
            "run": int(run), "scale": scale}  # fmt: skip
    for r in rows:
        record(out, {"kind": "request", **base, **{k: v for k, v in r.items() if k != "tag"}})
    deleted = reset(pair)
    row = {"kind": "cell", **base, "sharing": sharing(reqs), "wall_s": round(wall, 2),
           "summary": summ, "counters": ctr, "deleted_objects": deleted,
           "variant": pair[0][1]["variant"], "at": since}  # fmt: skip
    record(out, row)
    ok = [r["ttft"] for r in rows if r.get("ttft") is not None]
    ok.sort()
    p50 = ok[len(ok) // 2] if ok else None
    print(f"[rbench] {label}: {workload} {level}% {policy} run {run}: {len(rows)} requests, "
          f"TTFT p50 {p50 if p50 is None else round(p50, 3)} s, tiers {summ['tier_requests']}, "
          f"unaccounted {summ['unaccounted']}, failed {summ['failed']}, {wall:.1f} s")  # fmt: skip


def overhead(rendered, state, out, label, pairs) -> None:
    """Low load: one request at a time, alternately straight to an engine and through the
    router, each prompt new (recomputed on either path), two sizes."""
    scale = float(os.environ.get("RB_SCALE", "1"))
    pair = hosts(rendered, state)
    model = pair[0][2].model
    via = router_url(rendered)
    rnd = random.Random(f"overhead-{label}")
    rows = []
    since = time.time()
    ends = {h: _log_end(e) for h, _, _, _, e in pair}
    for size in (16, max(16, int(1024 * scale))):
        for i in range(int(pairs)):
            for path in ("direct", "router"):
                url = pair[i % 2][2].base_url if path == "direct" else via
                word = cell_word(f"{label}-{size}-{i}-{path}", 0)
                prompt = " ".join([word, *_words(rnd, size - 1)])
                got = send(url, model, prompt, f"{word}x0000", max_tokens=4)
                rows.append({"path": path, "size": size, "i": i, **got})
    time.sleep(1.5)
    logs = {h: _log_since(*ends[h]) for h in ends}
    cfg = pair[0][1]
    rows = rbaccount.account(rows, logs, _trace(since), int(cfg["lmcache"]["chunk_size"]),
                             bool(cfg["lmcache"].get("local_cpu")), since)  # fmt: skip
    for r in rows:
        record(out, {"kind": "overhead-request", "label": label, "scale": scale,
                     **{k: v for k, v in r.items() if k != "tag"}})  # fmt: skip
    deleted = reset(pair)
    summ = overhead_summary(rows)
    record(out, {"kind": "overhead", "label": label, "scale": scale, "pairs": int(pairs),
                 "summary": summ, "deleted_objects": deleted, "at": since})  # fmt: skip
    print(f"[rbench] {label}: overhead {json.dumps(summ)}")


def _median(xs: list[float]) -> float | None:
    """The median; None of nothing."""
    xs = sorted(xs)
    if not xs:
        return None
    m = len(xs) // 2
    return xs[m] if len(xs) % 2 else (xs[m - 1] + xs[m]) / 2


def overhead_summary(rows: list[dict]) -> dict:
    """Per prompt size: the median TTFT straight to an engine and through the router."""
    out = {}
    for size in sorted({r["size"] for r in rows}):
        got = {}
        for path in ("direct", "router"):
            xs = [r["ttft"] for r in rows if r["size"] == size and r["path"] == path
                  and r.get("ttft") is not None]  # fmt: skip
            got[path] = round(_median(xs), 4) if xs else None
        d, r = got["direct"], got["router"]
        got["added_s"] = round(r - d, 4) if d is not None and r is not None else None
        got["n"] = sum(1 for x in rows if x["size"] == size) // 2
        out[str(size)] = got
    return out


def main(a: list[str]) -> int:
    """The subcommands of the module's docstring."""
    if not a:
        print(__doc__)
        return 2
    cmd, rest = a[0], a[1:]
    if cmd == "router":
        print(router(*rest))
    elif cmd == "stop":
        stop(rest[0])
    elif cmd == "cell":
        cell(*rest)
    elif cmd == "overhead":
        overhead(*rest)
    else:
        print(__doc__)
        return 2
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
