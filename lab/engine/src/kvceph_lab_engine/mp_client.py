"""The engine's side of LMCache 0.5.6 MP mode: vLLM's LMCacheMPConnector, as the engine's store.

What it keeps of ``lmcache/integration/vllm/vllm_multi_process_adapter.py`` (LMCache's class,
which vLLM 0.34 loads in preference to its built-in copy):
- at start it registers the engine's KV cache with the server; a heartbeat pings it every
  ``lmcache.mp.heartbeat_interval`` s (10), each ping waiting as long;
- a failed ping: ``LMCache server is unhealthy — entering degraded mode``: lookups answer 0
  (the prompt is recomputed), stores are skipped, and requests still succeed;
- the first good ping after that: ``LMCache server is healthy again, triggering recovery
  callback`` (the KV cache is registered again), then ``... resuming normal operation``;
- a request sent while the server is gone waits until the heartbeat has noticed (or
  ``lmcache.mp.mq_timeout``, 300 s) and then counts as a miss, as a ZMQ request does;
- a server restart between two pings goes unnoticed (#4642): the server does not know the
  engine, so retrieves fail (``kv_load_failure_policy``) and stores are lost until the engine
  restarts or a ping fails.
The chunks' keys are LMCache MP keys (mp_keys.py); the server hashes in the real pair.
"""

from __future__ import annotations

import base64
import json
import logging
import socket
import threading
import time
import uuid

log = logging.getLogger("lmcache.integration.vllm.vllm_multi_process_adapter")

EXTERNAL_LINE = (
    "Using external LMCacheMPConnector from lmcache.integration.vllm.lmcache_mp_connector"
)
DEFAULT_PORT = 5555
DEFAULT_HEARTBEAT_S = 10.0
DEFAULT_MQ_TIMEOUT_S = 300.0


def address(extra: dict) -> tuple[str, int]:
    """(host, port) from kv_connector_extra_config's ``lmcache.mp.host`` / ``.port``."""
    host = str(extra.get("lmcache.mp.host", "tcp://localhost")).removeprefix("tcp://")
    return host, int(extra.get("lmcache.mp.port", DEFAULT_PORT))


class Unreachable(OSError):
    """The server did not answer."""


class MPClient:
    """The engine's connection to the host's MP server (the engine's ``store``).

    + extra: kv_connector_extra_config. + workers: TP x PP. + bytes_per_token: per worker.
    """

    mp = True

    def __init__(self, extra: dict, workers: int, bytes_per_token: int, start: bool = True):
        self.host, self.port = address(extra)
        self.heartbeat_s = float(extra.get("lmcache.mp.heartbeat_interval", DEFAULT_HEARTBEAT_S))
        self.mq_timeout_s = float(extra.get("lmcache.mp.mq_timeout", DEFAULT_MQ_TIMEOUT_S))
        self.workers = workers
        self.bytes_per_token = bytes_per_token
        self.instance_id = uuid.uuid4().hex
        self.chunk_size: int | None = None  # the server's --chunk-size, from registering
        self.l1_hits = 0  # chunks the last lookup found in L1 (the rest came from L2)
        self.healthy = threading.Event()
        self._stop = threading.Event()
        if start:
            self._register()
            threading.Thread(target=self._heartbeat, name="lmcache-heartbeat", daemon=True).start()

    # -- wire -----------------------------------------------------------------------------
    def _call(self, op: str, timeout: float, **fields) -> dict:
        try:
            with socket.create_connection((self.host, self.port), timeout=timeout) as s:
                body = {"op": op, "instance_id": self.instance_id, **fields}
                s.sendall(json.dumps(body).encode() + b"\n")
                line = s.makefile("rb").readline()
        except OSError as exc:
            raise Unreachable(str(exc)) from exc
        if not line:
            raise Unreachable("connection closed")
        return json.loads(line)

    def _request(self, op: str, **fields) -> dict | None:
        """One request; None (after the heartbeat has noticed, or mq_timeout) if the server is
        gone, or when it answered with an error."""
        if not self.healthy.is_set():
            return None
        try:
            answer = self._call(op, self.mq_timeout_s, **fields)
        except Unreachable:
            # A ZMQ request to a dead server waits; the adapter gives up once unhealthy.
            deadline = time.monotonic() + self.mq_timeout_s
            while self.healthy.is_set() and time.monotonic() < deadline and not self._stop.is_set():
                time.sleep(0.1)
            return None
        if not answer.get("ok"):
            log.error("LMCache MP %s failed: %s", op, answer.get("error"))
            return None
        return answer

    def _register(self) -> bool:
        ok = self._register_quiet()
        if ok:
            self.healthy.set()
        else:
            log.warning("LMCache server is unhealthy — entering degraded mode")
        return ok

    def _heartbeat(self) -> None:
        while not self._stop.wait(self.heartbeat_s):
            self.beat()

    def beat(self) -> None:
        """One heartbeat cycle: ping; recover (register again) after being unhealthy."""
        was = self.healthy.is_set()
        try:
            ok = bool(self._call("ping", self.heartbeat_s).get("ok"))
        except Unreachable:
            ok = False
        if ok and not was:
            log.warning("LMCache server is healthy again, triggering recovery callback")
            ok = self._register_quiet()
        if ok:
            self.healthy.set()
            if not was:
                log.info("Finished re-registering KV caches after server recovery")
                log.warning("LMCache server is healthy again — resuming normal operation")
        else:
            self.healthy.clear()
            if was:
                log.warning("LMCache server is unhealthy — entering degraded mode")

    def _register_quiet(self) -> bool:
        try:
            answer = self._call("register", self.heartbeat_s, workers=self.workers)
        except Unreachable:
            return False
        self.chunk_size = answer.get("chunk_size", self.chunk_size)
        return bool(answer.get("ok"))

    def close(self) -> None:
        """Stop the heartbeat; unregister (best effort)."""
        self._stop.set()
        try:
            self._call("unregister", 1.0)
        except Unreachable:
            pass

    # -- the engine's store API (engine.KVEngine) -----------------------------------------
    def prefix_hits(self, keys_per_chunk: list[list[str]], sizes: list[int]) -> int:
        """Leading chunks the server has (L1, or L2 prefetched into L1); 0 while degraded.

        + keys_per_chunk: one key per worker, chunks in prefix order. + sizes: bytes per key.
        """
        answer = self._request(
            "lookup",
            chunks=keys_per_chunk,
            sizes=sizes,
            tokens=[n // self.bytes_per_token for n in sizes],
        )
        self.l1_hits = int(answer["l1_hits"]) if answer else 0
        return int(answer["hits"]) if answer else 0

    def get_many(self, keys: list[str], sizes: list[int]) -> list[bytes | None]:
        """Each key's bytes from the server's L1 (None: not there, or the request failed)."""
        answer = self._request("retrieve", keys=keys)
        if answer is None:
            return [None] * len(keys)
        datas = [None if d is None else base64.b64decode(d) for d in answer["datas"]]
        pairs = zip(datas, sizes, strict=True)
        return [d if d is not None and len(d) == n else None for d, n in pairs]

    def put_many(self, items: list[tuple[str, bytes]]) -> list[bool]:
        """Store each (key, bytes) through the server; skipped (False) while degraded."""
        answer = self._request(
            "store",
            keys=[k for k, _ in items],
            datas=[base64.b64encode(bytes(d)).decode() for _, d in items],
        )
        return [bool(x) for x in answer["stored"]] if answer else [False] * len(items)
