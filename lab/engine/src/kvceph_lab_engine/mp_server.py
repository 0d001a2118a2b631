"""``kvceph-lab-lmcache server ...``: LMCache 0.5.6's ``lmcache server`` for the lab (not LMCache).

The lab deploy starts it from the same ``lmcache-server.service`` kvceph renders, with the
same flags (the lab profile's ``server_executable``). What it keeps of the real server
(lmcache/v1/multiprocess/http_server.py, lmcache/cli/commands/server.py):
- its flags, parsed as argparse parses them: an unknown one exits 2; ``--l1-size-gb`` and
  ``--eviction-policy`` are required (LMCache's ValueError otherwise), the reap timeout is 0
  or >= 30 s and the registration grace >= the reap timeout;
- the HTTP surface on ``--http-host``/``--http-port``: ``GET /healthcheck``, ``GET /status``
  (the shape recorded from the real server: tests/fixtures/mp/), ``GET /metrics``
  (``lmcache_mp_*``), ``POST /cache/clear`` (``{"tier": "l1", "force": false}``);
- one L1 of ``--l1-size-gb`` for every engine of the host, LRU, evicting 20 % once 80 % full
  (``--eviction-trigger-watermark`` / ``--eviction-ratio``); a lookup prefetches the L2 hits
  into L1, a retrieve reads L1 only, a store writes L1 and then every L2;
- L2 = the ``--l2-adapter`` JSON's ``native_plugin``, loaded as LMCache's
  NativeConnectorL2Adapter loads it (``module_path`` + ``class_name`` + ``adapter_params``), so
  kvceph's KvcephMPConnector names and moves the objects itself.
Engines talk to it on ``--host``/``--port`` (TCP, one JSON line per request, where LMCache
speaks ZMQ); their KV bytes travel in the request where the real pair maps GPU memory over
CUDA IPC. An engine registers its KV cache first: a retrieve or store from an engine the
server does not know (it restarted and the engine has not noticed: LMCache #4642) fails.
A store answers once L2 has it (the real one stores to L2 asynchronously).
"""

from __future__ import annotations

import argparse
import base64
import importlib
import json
import logging
import select
import signal
import socketserver
import sys
import threading
import time
from collections import OrderedDict
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer

log = logging.getLogger("lmcache.v1.multiprocess")
BANNER = "kvceph lab LMCache MP server — not LMCache"
L1_TAG = "_default"
L2_TIMEOUT_S = 30.0  # a batch the plugin never completes counts as failed after this


def parser() -> argparse.ArgumentParser:
    """The flags of LMCache 0.5.6's ``lmcache server`` that a kvceph host uses, with LMCache's
    defaults (v1/multiprocess/config.py, v1/distributed/config.py)."""
    p = argparse.ArgumentParser(prog="kvceph-lab-lmcache", description=BANNER)
    sub = p.add_subparsers(dest="command", required=True)
    s = sub.add_parser("server", help="run the MP server like `lmcache server`")
    s.add_argument("--host", default="localhost")
    s.add_argument("--port", type=int, default=5555)
    s.add_argument("--transport", choices=["zmq", "grpc"], default="zmq")
    s.add_argument("--http-host", default="127.0.0.1")
    s.add_argument("--http-port", type=int, default=8080)
    s.add_argument("--chunk-size", type=int, default=256)
    s.add_argument(
        "--hash-algorithm", choices=["builtin", "sha256_cbor", "blake3"], default="blake3"
    )
    s.add_argument("--max-workers", type=int, default=1)
    s.add_argument("--max-gpu-workers", type=int, default=None)
    s.add_argument("--max-cpu-workers", type=int, default=None)
    s.add_argument("--instance-id", default=None)
    s.add_argument("--worker-reap-timeout-seconds", type=float, default=120.0)
    s.add_argument("--worker-registration-grace-seconds", type=float, default=3600.0)
    s.add_argument("--session-ttl-seconds", type=float, default=600.0)
    s.add_argument("--l1-size-gb", type=float, default=None)
    s.add_argument("--eviction-policy", choices=["LRU", "ARC", "IsolatedLRU", "noop"], default=None)
    s.add_argument("--eviction-trigger-watermark", type=float, default=0.8)
    s.add_argument("--eviction-ratio", type=float, default=0.2)
    s.add_argument("--l1-write-ttl-seconds", type=float, default=600.0)
    s.add_argument("--l1-read-ttl-seconds", type=float, default=300.0)
    s.add_argument("--l2-adapter", action="append", default=[])
    s.add_argument("--l2-store-policy", choices=["default", "skip_l1"], default="default")
    s.add_argument("--disable-observability", action="store_true")
    s.add_argument("--disable-metrics", action="store_true")
    return p


class ConfigError(ValueError):
    """LMCache's own startup refusal (the message is LMCache's)."""


def check(args) -> None:
    """LMCache's parse_args_to_config / worker-liveness checks; raises ConfigError."""
    if args.l1_size_gb is None or args.eviction_policy is None:
        raise ConfigError("Legacy L1 configuration requires --l1-size-gb and --eviction-policy")
    if args.l1_size_gb <= 0:
        raise ConfigError(f"--l1-size-gb must be positive, got {args.l1_size_gb}")
    reap = args.worker_reap_timeout_seconds
    if reap != 0 and reap < 30:
        raise ConfigError(f"worker_reap_timeout_seconds must be 0 or >= 30, got {reap}")
    if args.worker_registration_grace_seconds < reap:
        raise ConfigError(
            "worker_registration_grace_seconds must be >= worker_reap_timeout_seconds"
        )
    if args.eviction_policy != "LRU":
        raise ConfigError(
            f"the lab server emulates eviction policy LRU only, not {args.eviction_policy}"
        )


class L1:
    """The server's L1: key -> bytes, least recently used evicted once the watermark is passed.

    + capacity: bytes. + watermark, ratio: --eviction-trigger-watermark / --eviction-ratio.
    """

    def __init__(self, capacity: int, watermark: float = 0.8, ratio: float = 0.2):
        self.capacity = capacity
        self.watermark = watermark
        self.ratio = ratio
        self.used = 0
        self.data: OrderedDict[str, bytes] = OrderedDict()
        self.evicted = 0
        self.lock = threading.Lock()

    def get(self, key: str) -> bytes | None:
        """The bytes under ``key`` (now most recently used), or None."""
        with self.lock:
            data = self.data.get(key)
            if data is not None:
                self.data.move_to_end(key)
            return data

    def has(self, key: str) -> bool:
        """Whether ``key`` is held (a lookup touches it, as LMCache's read lock does)."""
        return self.get(key) is not None

    def put(self, key: str, data: bytes) -> None:
        """Hold ``data`` under ``key``; evict LRU objects while above the watermark."""
        with self.lock:
            old = self.data.pop(key, None)
            self.used -= len(old) if old is not None else 0
            if len(data) > self.capacity:
                return  # never fits: LMCache's allocation fails, the chunk is not cached
            self.data[key] = data
            self.used += len(data)
            if self.used > self.watermark * self.capacity:
                target = max(0.0, (self.watermark - self.ratio) * self.capacity)
                while self.used > target and self.data:
                    _, gone = self.data.popitem(last=False)
                    self.used -= len(gone)
                    self.evicted += 1

    def clear(self) -> int:
        """Drop everything; the number of objects dropped."""
        with self.lock:
            n = len(self.data)
            self.data.clear()
            self.used = 0
            return n


class NativeL2:
    """An L2 ``native_plugin`` connector behind LMCache's completion demux: one thread reads
    ``event_fd()`` and hands each ``drain_completions()`` entry to its waiting batch.

    + spec: the --l2-adapter JSON object (type native_plugin).
    """

    def __init__(self, spec: dict):
        module = importlib.import_module(spec["module_path"])
        klass = getattr(module, spec["class_name"])
        self.type_name = spec["class_name"]
        self.connector = klass(**(spec.get("adapter_params") or {}))
        self._waiting: dict[int, list] = {}
        self._cond = threading.Condition()
        self._stop = False
        threading.Thread(target=self._demux, name="l2-demux", daemon=True).start()

    def _demux(self) -> None:
        fd = self.connector.event_fd()
        while not self._stop:
            ready, _, _ = select.select([fd], [], [], 0.2)
            if not ready:
                continue
            for fid, ok, error, per_key in self.connector.drain_completions():
                with self._cond:
                    self._waiting[fid] = [ok, error, per_key]
                    self._cond.notify_all()

    def _wait(self, fid: int, n: int) -> list[bool]:
        deadline = time.monotonic() + L2_TIMEOUT_S
        with self._cond:
            while fid not in self._waiting:
                left = deadline - time.monotonic()
                if left <= 0:
                    log.error("L2 batch %d not completed within %.0f s", fid, L2_TIMEOUT_S)
                    return [False] * n
                self._cond.wait(left)
            ok, error, per_key = self._waiting.pop(fid)
        if error:
            log.warning("L2 %s: %s", self.type_name, error)
        return list(per_key) if per_key is not None else [ok] * n

    def exists(self, keys: list[str]) -> list[bool]:
        """Which keys L2 has."""
        return self._wait(self.connector.submit_batch_exists(keys), len(keys)) if keys else []

    def get(self, keys: list[str], sizes: list[int]) -> list[bytes | None]:
        """Each key's bytes (exactly its size) or None."""
        if not keys:
            return []
        views = [bytearray(n) for n in sizes]
        fid = self.connector.submit_batch_get(keys, [memoryview(v) for v in views])
        got = self._wait(fid, len(keys))
        return [bytes(v) if ok else None for v, ok in zip(views, got, strict=True)]

    def put(self, keys: list[str], datas: list[bytes]) -> list[bool]:
        """Store each key; per-key success."""
        if not keys:
            return []
        fid = self.connector.submit_batch_set(keys, [memoryview(d) for d in datas])
        return self._wait(fid, len(keys))

    def close(self) -> None:
        """Stop the demux and close the connector."""
        self._stop = True
        self.connector.close()


def load_l2(specs: list[str]) -> list[NativeL2]:
    """The --l2-adapter JSONs as adapters; raises ConfigError (LMCache's wording) on a bad one."""
    out = []
    for text in specs:
        try:
            spec = json.loads(text)
        except json.JSONDecodeError as exc:
            raise ConfigError(f"Invalid JSON for --l2-adapter: {exc}") from exc
        kind = spec.get("type") if isinstance(spec, dict) else None
        if kind != "native_plugin":
            raise ConfigError(
                f"L2 adapter type {kind!r}: the lab server emulates 'native_plugin' only"
            )
        for field in ("module_path", "class_name"):
            if not spec.get(field):
                raise ConfigError(f"native_plugin L2 adapter requires '{field}'")
        out.append(NativeL2(spec))
    return out


# Counters: the OTel names of lmcache/v1/mp_observability/subscribers/metrics/*.py as the
# Prometheus exporter writes them ('.' -> '_', counters + '_total').
COUNTERS = {
    "lmcache_mp_lookup_requested_tokens_total": "Tokens asked for by lookups",
    "lmcache_mp_lookup_hit_tokens_total": "Tokens a lookup found (prefix)",
    "lmcache_mp_lookup_hit_l1_tokens_total": "Of lookup_hit, tokens L1 could serve",
    "lmcache_mp_lookup_hit_l2_tokens_total": "Of lookup_hit, tokens L2 added beyond L1's prefix",
    "lmcache_mp_l2_prefetch_lookup_objects_chunks_total": "Objects L2 prefetch looked up",
    "lmcache_mp_l2_prefetch_load_completed_total": "Objects L2 prefetch loaded into L1",
    "lmcache_mp_l2_store_submitted_objects_total": "Objects submitted to L2 stores",
    "lmcache_mp_l2_store_completed_objects_total": "Objects L2 stored",
    "lmcache_mp_num_finished_retrieves_total": "Retrieve requests finished",
    "lmcache_mp_num_finished_stores_total": "Store requests finished",
    "lmcache_mp_l1_evicted_total": "Objects evicted from L1",
}


def _b64(data: bytes) -> str:
    return base64.b64encode(data).decode()


class MPServer:
    """The server's state: L1, the L2 adapters, registered engines, counters.

    + args: the parsed ``server`` flags (check() passed).
    """

    def __init__(self, args, l2: list[NativeL2]):
        self.args = args
        self.l1 = L1(
            int(args.l1_size_gb * (1 << 30)), args.eviction_trigger_watermark, args.eviction_ratio
        )
        self.l2 = l2
        self.registered: dict[str, float] = {}  # engine instance id -> last heartbeat
        self.counts = dict.fromkeys(COUNTERS, 0)
        self.lock = threading.Lock()
        self.incarnation = time.time_ns()  # a restarted server is another incarnation

    def _count(self, name: str, n: int = 1) -> None:
        with self.lock:
            self.counts[name] += n

    # -- the engines' requests ------------------------------------------------------------
    def handle(self, req: dict) -> dict:
        """One engine request -> its answer (``ok`` false with ``error`` where it failed)."""
        op = req.get("op")
        inst = str(req.get("instance_id", ""))
        if op == "ping":
            if inst in self.registered:
                self.registered[inst] = time.monotonic()
            return {"ok": True}
        if op == "register":
            self.registered[inst] = time.monotonic()
            log.info("Registered KV cache of instance %s (%s workers)", inst, req.get("workers"))
            return {"ok": True, "chunk_size": self.args.chunk_size}
        if op == "unregister":
            self.registered.pop(inst, None)
            return {"ok": True}
        if op == "lookup":
            return self._lookup(req["chunks"], req["sizes"], req["tokens"])
        if op in ("retrieve", "store") and inst not in self.registered:
            # The server restarted without the engine noticing (LMCache #4642): no GPU
            # context for it, so no copy is possible.
            return {"ok": False, "error": f"instance {inst} has no registered KV cache"}
        if op == "retrieve":
            datas = [self.l1.get(k) for k in req["keys"]]
            self._count("lmcache_mp_num_finished_retrieves_total")
            return {"ok": True, "datas": [None if d is None else _b64(d) for d in datas]}
        if op == "store":
            return self._store(req["keys"], [base64.b64decode(d) for d in req["datas"]])
        return {"ok": False, "error": f"unknown request {op!r}"}

    def _lookup(self, chunks: list[list[str]], sizes: list[int], tokens: list[int]) -> dict:
        """Chunks in prefix order (each: one key per worker): L1's prefix, then L2's objects of
        the rest prefetched into L1. Answers the chunks hit."""
        self._count("lmcache_mp_lookup_requested_tokens_total", sum(tokens))
        l1_hits = 0
        for keys in chunks:
            if not all(self.l1.has(k) for k in keys):
                break
            l1_hits += 1
        l2_hits = 0
        rest = chunks[l1_hits:]
        if rest and self.l2:
            flat = [(i, k) for i, keys in enumerate(rest) for k in keys]
            self._count("lmcache_mp_l2_prefetch_lookup_objects_chunks_total", len(flat))
            there = self.l2[0].exists([k for _, k in flat])
            for i in range(len(rest)):
                if not all(t for (j, _), t in zip(flat, there, strict=True) if j == i):
                    break
                l2_hits += 1
            want = [(i, k) for i, k in flat if i < l2_hits]
            datas = self.l2[0].get([k for _, k in want], [sizes[l1_hits + i] for i, _ in want])
            loaded = l2_hits
            for (i, k), d in zip(want, datas, strict=True):
                if d is None:
                    loaded = min(loaded, i)
                else:
                    self.l1.put(k, d)
            got = sum(d is not None for d in datas)
            self._count("lmcache_mp_l2_prefetch_load_completed_total", got)
            l2_hits = loaded
        hit = l1_hits + l2_hits
        self._count("lmcache_mp_lookup_hit_tokens_total", sum(tokens[:hit]))
        self._count("lmcache_mp_lookup_hit_l1_tokens_total", sum(tokens[:l1_hits]))
        self._count("lmcache_mp_lookup_hit_l2_tokens_total", sum(tokens[l1_hits:hit]))
        return {"ok": True, "hits": hit, "l1_hits": l1_hits}

    def _store(self, keys: list[str], datas: list[bytes]) -> dict:
        before = self.l1.evicted
        for k, d in zip(keys, datas, strict=True):
            self.l1.put(k, d)
        self._count("lmcache_mp_l1_evicted_total", self.l1.evicted - before)
        stored = [True] * len(keys)
        for l2 in self.l2:
            self._count("lmcache_mp_l2_store_submitted_objects_total", len(keys))
            ok = l2.put(keys, datas)
            self._count("lmcache_mp_l2_store_completed_objects_total", sum(ok))
            stored = [a and b for a, b in zip(stored, ok, strict=True)]
        self._count("lmcache_mp_num_finished_stores_total")
        return {"ok": True, "stored": stored}

    # -- HTTP -----------------------------------------------------------------------------
    def reap(self) -> None:
        """Forget engines silent for longer than --worker-reap-timeout-seconds (0: never)."""
        timeout = self.args.worker_reap_timeout_seconds
        if not timeout:
            return
        now = time.monotonic()
        for inst, seen in list(self.registered.items()):
            if now - seen > timeout:
                log.warning("Reaping instance %s: no heartbeat for %.0f s", inst, now - seen)
                self.registered.pop(inst, None)

    def status(self) -> dict:
        """``GET /status``, in the recorded real shape (tests/fixtures/mp/status-kvceph.json)."""
        a, l1 = self.args, self.l1
        with l1.lock:
            count, used = len(l1.data), l1.used
        l1_status = {
            "is_healthy": True, "total_object_count": count, "write_locked_count": 0,
            "read_locked_count": 0, "temporary_count": 0, "staging_object_count": 0,
            "staging_bytes": 0, "memory_used_bytes": used, "memory_total_bytes": l1.capacity,
            "memory_configured_bytes": l1.capacity,
            "capacity_bytes_by_backend": {"dram": l1.capacity},
            "memory_usage_ratio": used / l1.capacity if l1.capacity else 0.0,
            "write_ttl_seconds": int(a.l1_write_ttl_seconds),
            "read_ttl_seconds": int(a.l1_read_ttl_seconds),
        }  # fmt: skip
        n = len(self.l2)
        store = {
            "is_healthy": True, "thread_alive": True, "pending_keys_count": 0,
            "in_flight_task_count": 0, "num_l2_adapters": n, "num_active_adapters": n,
            "num_draining_adapters": 0,
        }  # fmt: skip
        eviction = {
            "is_healthy": True, "thread_alive": True, "eviction_policy": a.eviction_policy,
            "trigger_watermark": a.eviction_trigger_watermark, "eviction_ratio": a.eviction_ratio,
        }  # fmt: skip
        prefetch = {
            "is_healthy": True, "thread_alive": True, "max_in_flight": 8,
            "submission_queue_size": 0, "pending_queue_size": 0, "in_flight_request_count": 0,
            "lookup_phase_count": 0, "load_phase_count": 0, "completed_results_count": 0,
            "num_l2_adapters": n, "num_active_adapters": n, "num_draining_adapters": 0,
        }  # fmt: skip
        return {
            "is_healthy": True,
            "engine_type": "MPCacheServer",
            "chunk_size": a.chunk_size,
            "hash_algorithm": a.hash_algorithm,
            "active_sessions": 0,
            "storage_manager": {
                "is_healthy": True,
                "l1_managers": {L1_TAG: l1_status},
                "store_controllers": {L1_TAG: store},
                "l1_eviction_controllers": {L1_TAG: eviction},
                "prefetch_controller": prefetch,
                "l2_eviction_controller": {
                    "is_healthy": True,
                    "thread_alive": True,
                    "adapters": [],
                },
                "l2_adapters": [{"is_healthy": True, "type": x.type_name} for x in self.l2],
                "num_l2_adapters": n,
                "l1_usage": [used, l1.capacity],
                "l1_capacity_bytes_by_backend": {"dram": l1.capacity},
                "l1_manager": l1_status,
                "store_controller": store,
                "l1_eviction_controller": eviction,
            },
            "active_prefetch_jobs": 0,
            "active_p2p_lookup_jobs": 0,
            "p2p_enabled": False,
            "p2p_state": "unregistered",
            "p2p_peer_count": 0,
            "p2p_peers": [],
            "worker_liveness": {
                "enabled": bool(a.worker_reap_timeout_seconds),
                "reap_timeout_seconds": float(a.worker_reap_timeout_seconds),
                "registration_grace_seconds": float(a.worker_registration_grace_seconds),
                "tracked_instances": len(self.registered),
            },
            "kv_events": {
                "enabled": False,
                "incarnation": self.incarnation,
                "log_depth": 0,
                "log_capacity": 0,
                "next_seq": 1,
                "lost_markers": 0,
                "unbound_stores": 0,
                "subscribers": 0,
            },  # fmt: skip
            "registered_gpu_ids": [],
            "cache_context_meta": {},
        }

    def metrics(self) -> str:
        """``GET /metrics``: the recorded gauges (tests/fixtures/mp/metrics-s3.txt) and the
        counters of COUNTERS."""
        l1 = self.l1
        with l1.lock:
            used = l1.used
        lab = f'backend="dram",l1_tag="{L1_TAG}"'
        state = "tagged by ``state`` (active or draining)."
        gauges = [
            ("lmcache_mp_l1_memory_usage_bytes", "Bytes currently held in L1 cache", lab, used),
            ("lmcache_mp_l1_usage_ratio", "L1 used/total ratio (0.0–1.0)", lab, used / l1.capacity),
            (
                "lmcache_mp_l2_store_adapters",
                f"Count of L2 adapters attached to the store controller, {state}",
                f'l1_tag="{L1_TAG}",state="active"',
                len(self.l2),
            ),
            (
                "lmcache_mp_l2_prefetch_adapters",
                f"Count of L2 adapters attached to the prefetch controller, {state}",
                'state="active"',
                len(self.l2),
            ),
            ("lmcache_mp_active_prefetch_jobs", "Number of active prefetch jobs", "", 0),
        ]
        out = []
        for name, text, labels, value in gauges:
            series = f"{name}{{{labels}}}" if labels else name
            out += [f"# HELP {name} {text}", f"# TYPE {name} gauge", f"{series} {float(value)}"]
        with self.lock:
            counts = dict(self.counts)
        for name, text in COUNTERS.items():
            value = float(counts[name])
            out += [f"# HELP {name} {text}", f"# TYPE {name} counter", f"{name} {value}"]
        return "\n".join(out) + "\n"


def _http_handler(server: MPServer):
    class Handler(BaseHTTPRequestHandler):
        def _send(self, code: int, body: bytes, kind: str = "application/json") -> None:
            self.send_response(code)
            self.send_header("content-type", kind)
            self.send_header("content-length", str(len(body)))
            self.end_headers()
            self.wfile.write(body)

        def _json(self, code: int, obj) -> None:
            self._send(code, json.dumps(obj, separators=(",", ":")).encode())

        def do_GET(self):  # noqa: N802 - http.server's name
            if self.path == "/healthcheck":
                self._json(200, {"status": "healthy"})
            elif self.path == "/status":
                self._json(200, server.status())
            elif self.path == "/metrics":
                self._send(200, server.metrics().encode(), "text/plain; version=0.0.4")
            else:
                self._json(404, {"detail": "Not Found"})

        def do_POST(self):  # noqa: N802
            if self.path != "/cache/clear":
                self._json(404, {"detail": "Not Found"})
                return
            length = int(self.headers.get("content-length") or 0)
            try:
                body = json.loads(self.rfile.read(length) or b"{}")
            except json.JSONDecodeError:
                self._json(422, {"detail": "body is not JSON"})
                return
            tier = body.get("tier", "l1")
            if tier != "l1":
                self._json(400, {"detail": f"tier {tier!r} not supported; only 'l1'"})
                return
            n = server.l1.clear()
            log.info("Cache cleared via HTTP API (%d objects)", n)
            self._json(200, {"status": "ok", "cleared": {"tier": "l1"}})

        def log_message(self, fmt, *a):  # uvicorn logs access lines; keep the journal short
            pass

    return Handler


def _request_handler(server: MPServer):
    class Handler(socketserver.StreamRequestHandler):
        def handle(self):
            for line in self.rfile:
                try:
                    answer = server.handle(json.loads(line))
                except Exception as exc:  # a bad request never kills the server
                    answer = {"ok": False, "error": f"{type(exc).__name__}: {exc}"}
                self.wfile.write(json.dumps(answer).encode() + b"\n")
                self.wfile.flush()

    return Handler


class _TCP(socketserver.ThreadingTCPServer):
    daemon_threads = True
    allow_reuse_address = True


def main(argv: list[str] | None = None) -> int:
    """``kvceph-lab-lmcache server FLAGS``; exit 1 where LMCache refuses, 2 on unknown flags."""
    args = parser().parse_args(argv)
    logging.basicConfig(
        level=logging.INFO,
        format="[%(asctime)s] LMCache %(levelname)s: %(message)s (%(name)s)",
        stream=sys.stderr,
    )
    log.warning("%s", BANNER)
    try:
        check(args)
        l2 = load_l2(args.l2_adapter)
    except (ConfigError, ImportError, AttributeError, TypeError, ValueError) as exc:
        print(f"ValueError: {exc}", file=sys.stderr)
        return 1
    state = MPServer(args, l2)
    try:
        requests = _TCP((args.host, args.port), _request_handler(state))
        http = ThreadingHTTPServer((args.http_host, args.http_port), _http_handler(state))
    except OSError as exc:
        print(f"OSError: cannot listen: {exc}", file=sys.stderr)
        return 1
    http.daemon_threads = True
    serve = threading.Thread(target=requests.serve_forever, kwargs={"poll_interval": 0.2})
    serve.daemon = True
    serve.start()

    def _reaper():
        while True:
            time.sleep(1)
            state.reap()

    threading.Thread(target=_reaper, daemon=True).start()

    def _stop(signum, frame):
        log.info("signal %d: shutting down", signum)
        threading.Thread(target=http.shutdown, daemon=True).start()

    signal.signal(signal.SIGTERM, _stop)
    signal.signal(signal.SIGINT, _stop)
    log.info(
        "LMCache cache server is running on %s:%d, HTTP on %s:%d; L1 %g GB (%s), %d L2 adapter(s)",
        args.host, args.port, args.http_host, args.http_port, args.l1_size_gb,
        args.eviction_policy, len(l2),
    )  # fmt: skip
    try:
        http.serve_forever(poll_interval=0.2)
    finally:
        requests.shutdown()
        for one in l2:
            one.close()
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
