#!/usr/bin/env python3
"""LMCache's multi-process (MP) mode on the GPU machine (issue 51): vLLM 0.34 + ``lmcache server``
with an S3 L2 on the machine's own Ceph RGW, real weights, greedy answers compared tier by tier.

    mp.py STATE RESULTS SECONDS MODEL L2 [TOKENS]

+ STATE: this run's working directory (logs, pids, the steps done: resumable across calls)
+ RESULTS: where ``mp.jsonl`` (one line per step), the servers' /status and /metrics and the
  engines' filtered logs go (gpu.sh packs it after every call)
+ SECONDS: the time left in this call; a step that would not fit exits 3 (gpu.sh: CONTINUE)
+ MODEL: a model directory (SmolLM2-135M-Instruct: real weights) or ``dummy:<dir>`` (the
  Qwen3-32B shape, ``--load-format dummy``: TTFT figures, answers still deterministic)
+ L2: ``kvceph`` (kvceph's S3 core as LMCache's ``native_plugin`` L2) or ``s3`` (LMCache's stock
  ``s3`` adapter); the servers' ``--l2-adapter`` JSON, written to RESULTS, holds no secret (both
  read the engine user's AWS profile)
+ TOKENS: the document's length in tokens (default 3000; SmolLM2 serves 8192)

Steps, in order, each compared with the cold answer (token ids, greedy, 32 tokens):
``env`` (versions; the compiled modules load), ``up`` (server A, engine A: the external
connector's log line), ``cold``, ``l1`` (GPU prefix cache reset: the server's L1), ``l2``
(L1 cleared too: from the bucket), ``cross`` (server B + engine B on port 8001: another
"host" of the cache group, from the bucket), ``crash`` (engine A killed with SIGKILL and
started again: its start time, and whether the server's hold on the dead engine's GPU memory
blocks it), ``srvrestart`` (server A restarted under engine A: does it notice, is the next
answer right), ``fallback`` (the bucket emptied, both L1s cleared: recompute, same answer).
"""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import time
import urllib.error
import urllib.request
import uuid
from pathlib import Path

HERE = Path(__file__).resolve().parent
SITE = os.environ.get("SITE", "/tmp/site")
PY = os.environ.get("PY", "python3")
S3 = os.environ.get("S3_ADDR", "127.0.0.1:7480")
DNS = os.environ.get("DNS_NAME", "s3.lab")
BUCKET = "lmcache"
ANSWER_TOKENS = 32
# the tier each step's KV must come from (the server's lookup_hit_<tier>_tokens counter must grow)
LOADS_FROM = {"l1": "l1", "l2": "l2", "cross": "l2"}
PARAGRAPH = (
    "The harbour town kept its lighthouse lit through every winter storm. Fishermen counted "
    "the beams from the water and steered home by them; the keeper wrote each night's weather "
    "in a ledger that now fills three shelves of the town library. "
)
# the engines' processes: (port, server's ZMQ port, server's HTTP port)
HOSTS = {"a": (8000, 5555, 8090), "b": (8001, 5556, 8091)}
# `lmcache server` through the shipped package (no console script in $SITE/bin on that machine)
LMCACHE_CLI = (
    "import sys; from lmcache.cli.main import main; sys.argv[0] = 'lmcache'; sys.exit(main())"
)
PROBE = """import importlib, importlib.metadata as m, torch
print('torch', torch.__version__, torch.cuda.is_available())
for p in ('vllm', 'lmcache', 'flashinfer-python', 'transformers', 'tokenizers',
          'opentelemetry-api', 'kvceph-connector'):
    try: print(p, m.version(p))
    except Exception: print(p, 'absent')
for mod in ('lmcache.lmcache_native', 'lmcache.cuda_ops', 'kvceph_connector.lmcache_mp',
            'lmcache.integration.vllm.lmcache_mp_connector'):
    try: importlib.import_module(mod); print(mod, 'loads')
    except Exception as e: print(mod, 'FAILS', type(e).__name__, str(e)[:300])
"""


def env() -> dict:
    """The processes' environment: the shipped wheels, the engine user's AWS profile, no
    telemetry (the machine is offline; a fleet's hosts must not phone home either)."""
    e = dict(os.environ)
    nccl = f"{SITE}/nvidia/nccl/lib"
    e |= {
        # nvidia-cutlass-dsl puts `cutlass` on sys.path from a .pth file, which Python reads in
        # site directories only, not in PYTHONPATH's (loan 12: `No module named 'cutlass'` again)
        "PYTHONPATH": f"{SITE}:{SITE}/nvidia_cutlass_dsl/dsl_packages"
        + (f":{e['PYTHONPATH']}" if e.get("PYTHONPATH") else ""),
        "HOME": "/var/lib/vllm",
        "AWS_PROFILE": "lmcache",
        "AWS_SHARED_CREDENTIALS_FILE": "/var/lib/vllm/.aws/credentials",
        "AWS_CONFIG_FILE": "/var/lib/vllm/.aws/config",
        "LMCACHE_TRACK_USAGE": "false",
        "DO_NOT_TRACK": "1",
        "LMCACHE_DISABLE_BANNER": "1",
        "PYTHONUNBUFFERED": "1",
        "VLLM_SERVER_DEV_MODE": "1",  # /reset_prefix_cache
        "XDG_CACHE_HOME": "/tmp/h200-cache",
        "TRITON_CACHE_DIR": "/tmp/h200-cache/triton",
        "FLASHINFER_WORKSPACE_BASE": "/tmp/h200-cache",
    }
    if os.path.isdir(nccl):
        e["LD_LIBRARY_PATH"] = nccl + (
            f":{e['LD_LIBRARY_PATH']}" if e.get("LD_LIBRARY_PATH") else ""
        )
    return e


class Run:
    def __init__(self, state: str, results: str, seconds: int, model: str, l2: str, tokens: int):
        self.s, self.r = Path(state), Path(results)
        self.s.mkdir(parents=True, exist_ok=True)
        self.r.mkdir(parents=True, exist_ok=True)
        self.deadline = time.time() + seconds
        self.dummy = model.startswith("dummy:")
        self.model = model.removeprefix("dummy:")
        self.l2, self.tokens = l2, tokens
        self.tag = f"{'dummy' if self.dummy else 'real'}-{l2}-{tokens}"
        # the Qwen3-32B shape: 64 GB of weights and 256 KiB of KV a token; SmolLM2: 270 MB, 8192
        self.big = "Qwen3-32B" in self.model
        self.l1_gb = 40 if self.big else 8

    # ---- bookkeeping
    def left(self) -> float:
        return self.deadline - time.time()

    def need(self, seconds: float, what: str) -> None:
        if self.left() < seconds:
            print(f"[mp] CONTINUE: {what} needs {seconds:.0f}s, {self.left():.0f}s left")
            sys.exit(3)

    def done(self, step: str) -> bool:
        return (self.s / f"done.{step}").exists()

    def record(self, step: str, **row) -> None:
        row = {"tag": self.tag, "step": step, "t": round(time.time(), 1)} | row
        with open(self.r / "mp.jsonl", "a") as f:
            f.write(json.dumps(row) + "\n")
        (self.s / f"done.{step}").touch()
        print(f"[mp] {step}: {json.dumps(row)[:600]}")

    def state(self, key: str, value=None):
        p = self.s / f"{key}.json"
        if value is not None:
            p.write_text(json.dumps(value))
            return value
        return json.loads(p.read_text()) if p.exists() else None

    # ---- processes (own sessions: they outlive this call, as gpu.sh's engines do)
    def spawn(self, name: str, argv: list[str]) -> int:
        n = len(list(self.s.glob(f"{name}.*.log"))) + 1
        log = open(self.s / f"{name}.{n}.log", "w")
        p = subprocess.Popen(
            argv, stdout=log, stderr=subprocess.STDOUT, env=env(), start_new_session=True
        )
        (self.s / f"{name}.pid").write_text(str(p.pid))
        (self.s / f"{name}.argv").write_text(json.dumps(argv))
        return p.pid

    def pid(self, name: str) -> int | None:
        p = self.s / f"{name}.pid"
        if not p.exists():
            return None
        pid = int(p.read_text())
        try:
            os.kill(pid, 0)
        except ProcessLookupError:
            return None
        return pid

    def kill(self, name: str, sig=signal.SIGTERM, wait: float = 60) -> None:
        pid = self.pid(name)
        if pid is None:
            return
        try:
            os.killpg(pid, sig)
        except ProcessLookupError:
            return
        t0 = time.time()
        while self.pid(name) is not None and time.time() - t0 < wait:
            time.sleep(0.5)
        if self.pid(name) is not None:
            os.killpg(pid, signal.SIGKILL)
            time.sleep(1)

    def log(self, name: str) -> Path:
        logs = sorted(self.s.glob(f"{name}.*.log"), key=lambda p: p.stat().st_mtime)
        return logs[-1]

    # ---- the server and the engine
    def l2_json(self, host: str) -> str:
        if self.l2 == "s3":
            d = {
                "type": "s3",
                "s3_endpoint": f"{BUCKET}.{DNS}:{S3.rsplit(':', 1)[1]}",
                "s3_region": "us-east-1",
                "disable_tls": True,
                "s3_prefer_http2": False,
            }
        else:
            d = {
                "type": "native_plugin",
                "shared": True,
                "module_path": "kvceph_connector.lmcache_mp",
                "class_name": os.environ.get("KVCEPH_MP_CLASS", "KvcephMPConnector"),
                "adapter_params": json.loads(
                    os.environ.get(
                        "KVCEPH_MP_PARAMS",
                        json.dumps(
                            {
                                "endpoint": f"{BUCKET}.{DNS}:{S3.rsplit(':', 1)[1]}",
                                "tls": False,
                                "region": "us-east-1",
                                "prefix": f"mp034-{self.tag}@",
                            }
                        ),
                    )
                ),
            }
        text = json.dumps(d)
        (self.r / f"l2-{self.tag}.json").write_text(text + "\n")
        return text

    def server_argv(self, host: str) -> list[str]:
        _, zmq, http = HOSTS[host]
        return [
            PY, "-c", LMCACHE_CLI,
            "server", "--host", "127.0.0.1", "--port", str(zmq),
            "--http-host", "127.0.0.1", "--http-port", str(http),
            "--instance-id", f"h200-{host}", "--chunk-size", "256", "--hash-algorithm", "blake3",
            "--l1-size-gb", str(self.l1_gb), "--eviction-policy", "LRU",
            "--worker-reap-timeout-seconds", "60", "--worker-registration-grace-seconds", "300",
            "--l2-adapter", self.l2_json(host),
        ]  # fmt: skip

    def engine_argv(self, host: str) -> list[str]:
        port, zmq, _ = HOSTS[host]
        kv = {
            "kv_connector": "LMCacheMPConnector",
            "kv_role": "kv_both",
            "kv_load_failure_policy": "recompute",
            "kv_connector_extra_config": {
                "lmcache.mp.host": "tcp://127.0.0.1",
                "lmcache.mp.port": zmq,
            },
        }
        argv = [
            "/opt/kvceph/venv/bin/vllm", "serve", self.model, "--served-model-name", "m",
            "--host", "127.0.0.1", "--port", str(port), "--enforce-eager",
            "--gpu-memory-utilization", "0.35" if self.big else "0.2",
            "--max-model-len", "40960" if self.big else "8192",
            "--kv-transfer-config", json.dumps(kv),
            # vLLM 0.34's VMM ("extensible") KV cache cannot be shared over LMCache 0.5.6's
            # legacy CUDA IPC (lmcache-mp-mode.md 1.2)
            "--no-enable-extensible-kv-cache",
        ]  # fmt: skip
        if self.dummy:
            argv += ["--load-format", "dummy"]
        return argv

    def get(self, url: str, timeout: float = 5):
        with urllib.request.urlopen(url, timeout=timeout) as r:  # noqa: S310
            return r.status, r.read()

    def post(self, url: str, body: dict | None = None, timeout: float = 60):
        data = json.dumps(body).encode() if body is not None else b""
        req = urllib.request.Request(url, data, {"Content-Type": "application/json"}, method="POST")
        with urllib.request.urlopen(req, timeout=timeout) as r:  # noqa: S310
            return r.status, r.read()

    def wait(self, url: str, name: str, seconds: float) -> float | None:
        t0 = time.time()
        while time.time() - t0 < seconds:
            if self.pid(name) is None:
                return None
            # vLLM's API process can outlive its dead engine core for minutes (loan 11)
            if name.startswith("engine") and "Engine core initialization failed" in self.log(
                name
            ).read_text(errors="replace"):
                self.kill(name, signal.SIGKILL, wait=10)
                return None
            try:
                if self.get(url, 3)[0] == 200:
                    return time.time() - t0
            except (urllib.error.URLError, OSError, ValueError):
                pass
            time.sleep(1)
        return None

    def up(self, host: str, limit: float = 420) -> dict:
        """Server, then engine (the unit's After= + ExecStartPre health wait)."""
        port, _, http = HOSTS[host]
        out = {}
        if self.pid(f"server-{host}") is None:
            self.spawn(f"server-{host}", self.server_argv(host))
            t = self.wait(f"http://127.0.0.1:{http}/healthcheck", f"server-{host}", 180)
            out["server_s"] = round(t, 1) if t is not None else None
            if t is None:
                out["server_log"] = self.tail(f"server-{host}", 40)
                return out
        if self.pid(f"engine-{host}") is None:
            self.spawn(f"engine-{host}", self.engine_argv(host))
            t = self.wait(
                f"http://127.0.0.1:{port}/health", f"engine-{host}", min(limit, self.left() - 20)
            )
            out["engine_s"] = round(t, 1) if t is not None else None
            if t is None:
                out["engine_log"] = self.tail(f"engine-{host}", 60)
                if self.pid(f"engine-{host}") is not None:
                    print("[mp] CONTINUE: engine still starting")
                    sys.exit(3)
                return out
        text = self.log(f"engine-{host}").read_text(errors="replace")
        out["external_connector"] = "Using external LMCacheMPConnector" in text
        out["builtin_fallback"] = "falling back to builtin" in text
        return out

    def tail(self, name: str, n: int) -> list[str]:
        try:
            lines = self.log(name).read_text(errors="replace").splitlines()
        except (IndexError, OSError):
            return []
        return [line[:300] for line in lines[-n:]]

    # ---- requests
    def document(self) -> str:
        nonce = self.state("nonce") or self.state("nonce", uuid.uuid4().hex[:12])
        return (
            f"Archive record {nonce}.\n"
            + PARAGRAPH * max(1, self.tokens // 45)
            + "\nIn short, the harbour town"
        )

    def ask(self, host: str) -> dict:
        """One streamed greedy completion: TTFT (first chunk with text), token ids."""
        port = HOSTS[host][0]
        body = {
            "model": "m",
            "prompt": self.document(),
            "max_tokens": ANSWER_TOKENS,
            "temperature": 0,
            "seed": 0,
            "logprobs": 1,
            "return_tokens_as_token_ids": True,
            "stream": True,
            "stream_options": {"include_usage": True},
            "ignore_eos": True,
        }
        req = urllib.request.Request(
            f"http://127.0.0.1:{port}/v1/completions",
            json.dumps(body).encode(),
            {"Content-Type": "application/json"},
        )
        t0 = time.time()
        ttft, tokens, text, usage = None, [], "", None
        with urllib.request.urlopen(req, timeout=600) as r:  # noqa: S310
            for raw in r:
                line = raw.decode().strip()
                if not line.startswith("data: ") or line == "data: [DONE]":
                    continue
                d = json.loads(line[6:])
                usage = d.get("usage") or usage
                for c in d.get("choices", []):
                    if ttft is None and (c.get("text") or (c.get("logprobs") or {}).get("tokens")):
                        ttft = time.time() - t0
                    text += c.get("text") or ""
                    tokens += (c.get("logprobs") or {}).get("tokens") or []
        return {
            "ttft_s": round(ttft or 0, 3),
            "total_s": round(time.time() - t0, 3),
            "tokens": tokens,
            "text": text[:200],
            "prompt_tokens": (usage or {}).get("prompt_tokens"),
        }

    def compare(self, step: str, host: str, answer: dict, **extra) -> None:
        cold = self.state("cold")
        same = cold is not None and answer["tokens"] == cold["tokens"]
        theirs = (cold or {}).get("tokens", [])
        pairs = zip(answer["tokens"], theirs, strict=False)
        first = next((i for i, (a, b) in enumerate(pairs) if a != b), None)
        if first is None and not same:
            first = min(len(answer["tokens"]), len(theirs))  # one answer is a prefix of the other
        # equal answers prove nothing unless the KV came from the tier the step names: loan 12's
        # steps all answered right while the server stored nothing (0 hit tokens: recompute)
        counters = self.counters(host)
        tier = LOADS_FROM.get(step)
        hits = (
            sum(
                v
                for k, v in counters.items()
                if k.startswith(f"lmcache_mp_lookup_hit_{tier}_tokens")
            )
            if tier
            else 0
        )
        before = self.state(f"hits-{host}-{tier}") or 0 if tier else 0
        if tier:
            self.state(f"hits-{host}-{tier}", hits)
        loaded = hits - before
        verdict = (
            "PASS"
            if same and (tier is None or loaded > 0)
            else (
                f"FAIL: equal, but 0 tokens from {tier} (recomputed)"
                if same
                else f"FAIL: differs at token {first}"
            )
        )
        self.record(
            step,
            host=host,
            verdict=verdict,
            loaded_tokens=loaded if tier else None,
            equal=same,
            first_difference=first,
            ttft_s=answer["ttft_s"],
            cold_ttft_s=(cold or {}).get("ttft_s"),
            prompt_tokens=answer["prompt_tokens"],
            answer=answer["text"][:80],
            server=counters,
            **extra,
        )

    def counters(self, host: str) -> dict:
        """The server's /metrics lines naming lmcache (saved whole per step beside the row)."""
        http = HOSTS[host][2]
        try:
            text = self.get(f"http://127.0.0.1:{http}/metrics")[1].decode()
        except (urllib.error.URLError, OSError):
            return {}
        out = {}
        for line in text.splitlines():
            if line.startswith("lmcache") and " " in line:
                name, value = line.rsplit(" ", 1)
                if any(w in name for w in ("l2_", "lookup", "retrieve", "store", "hit")):
                    try:
                        out[name[:120]] = float(value)
                    except ValueError:
                        pass
        return out

    def snapshot(self, host: str, what: str) -> None:
        http = HOSTS[host][2]
        for path in ("status", "metrics"):
            try:
                body = self.get(f"http://127.0.0.1:{http}/{path}")[1]
                (self.r / f"mp-{self.tag}-{host}-{what}.{path}").write_bytes(body)
            except (urllib.error.URLError, OSError) as e:
                print(f"[mp] no /{path} from server {host}: {e}")

    def reset(self, host: str, l1: bool) -> None:
        self.post(f"http://127.0.0.1:{HOSTS[host][0]}/reset_prefix_cache")
        if l1:
            self.post(
                f"http://127.0.0.1:{HOSTS[host][2]}/cache/clear", {"tier": "l1", "force": True}
            )

    def _s3(self):
        """boto3 (shipped: wheels034.txt) with the engine user's profile, as the servers use it."""
        import boto3

        os.environ |= {k: v for k, v in env().items() if k.startswith("AWS_")}
        return boto3.session.Session(profile_name="lmcache").client(
            "s3", endpoint_url=f"http://{S3}", region_name="us-east-1"
        )

    def objects(self) -> list[str]:
        pages = self._s3().get_paginator("list_objects_v2").paginate(Bucket=BUCKET)
        return [o["Key"] for page in pages for o in page.get("Contents", [])]

    def delete_objects(self, keys: list[str]) -> None:
        c = self._s3()
        for i in range(0, len(keys), 1000):
            c.delete_objects(
                Bucket=BUCKET, Delete={"Objects": [{"Key": k} for k in keys[i : i + 1000]]}
            )

    def gpu(self) -> list[str]:
        q = ["nvidia-smi", "--query-compute-apps=pid,used_memory", "--format=csv,noheader"]
        return subprocess.run(q, capture_output=True, text=True).stdout.strip().splitlines()

    # ---- the steps
    def run(self) -> int:
        if not self.done("env"):
            p = subprocess.run(
                [PY, "-c", PROBE], capture_output=True, text=True, env=env(), timeout=300
            )
            lines = (p.stdout + p.stderr[-2000:]).splitlines()
            (self.r / f"mp-env-{self.tag}.txt").write_text("\n".join(lines) + "\n")
            self.record("env", lines=[x for x in lines if "LMCache" not in x][:20])
        if not self.done("up"):
            self.need(300, "server + engine A")
            out = self.up("a")
            out["gpu"] = self.gpu()
            self.snapshot("a", "up")
            self.record("up", **out)
            if not out.get("engine_s") and self.pid("engine-a") is None:
                return 2
        if not self.done("cold"):
            self.need(120, "cold")
            if self.pid("engine-a") is None:
                print("[mp] engine A is not running")
                return 2
            cold = self.ask("a")
            self.state("cold", cold)
            time.sleep(8)  # the server's asynchronous stores to L2
            keys = self.objects()
            self.snapshot("a", "cold")
            self.record(
                "cold", host="a", ttft_s=cold["ttft_s"], prompt_tokens=cold["prompt_tokens"],
                answer=cold["text"][:80], tokens=len(cold["tokens"]), objects=len(keys),
                object_names=keys[:3], server=self.counters("a"),
            )  # fmt: skip
        if not self.done("l1"):
            self.need(60, "l1")
            self.reset("a", l1=False)
            self.compare("l1", "a", self.ask("a"))
        if not self.done("l2"):
            self.need(90, "l2")
            self.reset("a", l1=True)
            self.compare("l2", "a", self.ask("a"))
            self.snapshot("a", "l2")
        if not self.done("cross"):
            self.need(300, "server + engine B")
            out = self.up("b")
            if not out.get("external_connector", True) and self.pid("engine-b") is None:
                self.record("cross", host="b", equal=False, error=out)
            else:
                self.compare("cross", "b", self.ask("b"), start=out, gpu=self.gpu())
                self.snapshot("b", "cross")
        if not self.done("crash"):
            self.need(300, "engine A crash + restart")
            before = self.gpu()
            self.kill("engine-a", signal.SIGKILL, wait=10)
            time.sleep(3)
            t0 = time.time()
            out = self.up("a")
            out["restart_s"] = round(time.time() - t0, 1)
            if self.pid("engine-a") is None:
                self.record("crash", host="a", equal=False, gpu_before=before, **out)
            else:
                self.reset("a", l1=False)
                self.compare(
                    "crash", "a", self.ask("a"), gpu_before=before, gpu_after=self.gpu(), **out
                )
        if not self.done("srvrestart"):
            self.need(150, "server A restart")
            self.kill("server-a", signal.SIGTERM, wait=30)
            time.sleep(2)
            out = self.up("a")
            time.sleep(25)  # > 2 heartbeats (10 s): the engine re-registers (LMCache #4642)
            self.reset("a", l1=False)
            try:
                ans = self.ask("a")
                self.compare("srvrestart", "a", ans, **out, engine_tail=self.tail("engine-a", 15))
            except (urllib.error.URLError, OSError) as e:
                self.record("srvrestart", host="a", equal=False, error=str(e), **out)
        if not self.done("fallback"):
            self.need(90, "fallback")
            keys = self.objects()
            self.delete_objects(keys)
            for h in ("a", "b"):
                if self.pid(f"server-{h}") is not None:
                    self.reset(h, l1=True)
            host = "b" if self.pid("engine-b") else "a"
            self.compare("fallback", host, self.ask(host), deleted=len(keys))
        for h in ("a", "b"):
            self.kill(f"engine-{h}")
            self.kill(f"server-{h}")
        self.filtered()
        return 0

    def filtered(self) -> None:
        """Each log's lines worth reading (LMCache's, errors), for the results."""
        words = ("LMCache", "lmcache", "kvceph", "Error", "error", "Traceback", "KV cache",
                 "external", "connector", "Connector", "CUDA", "memory")  # fmt: skip
        for lg in sorted(self.s.glob("*.log")):
            lines = [
                x[:400]
                for x in lg.read_text(errors="replace").splitlines()
                if any(w in x for w in words) and "Discovered API" not in x
            ]
            (self.r / f"mp-{self.tag}-{lg.stem}.filtered.txt").write_text(
                "\n".join(lines[-300:]) + "\n"
            )


if __name__ == "__main__":
    a = sys.argv[1:]
    run = Run(a[0], a[1], int(a[2]), a[3], a[4], int(a[5]) if len(a) > 5 else 3000)
    try:
        sys.exit(run.run())
    finally:
        run.filtered()
