"""Small, independent clients for the lab's engines and hosts (the tests' own eyes).

Deliberately not built on deploys.verification: the tests check the product, not themselves.
"""

from __future__ import annotations

import json
import os
import re
import time
import urllib.error
import urllib.request
import uuid

from httpcall import stream


def api_key() -> str | None:
    """The lab's engine API key, from the lab's secrets file (None when the lab has none)."""
    instance = int(os.environ.get("KVCEPH_LAB_INSTANCE") or 0)
    lab = os.environ.get("KVCEPH_LAB_DIR", f"/var/lib/kvceph-lab{instance or ''}")
    path = os.environ.get("KVCEPH_SECRETS_FILE") or f"{lab}/secrets.env"
    if not os.path.isfile(path):
        return None
    for line in open(path).read().splitlines():
        if line.startswith("KVCEPH_VLLM_API_KEY="):
            return line.split("=", 1)[1].strip().strip("'\"") or None
    return None


def auth_headers(key: str | None = None) -> dict[str, str]:
    key = key or api_key()
    return {"Authorization": f"Bearer {key}"} if key else {}


def completion(
    ip: str,
    prompt: str,
    max_tokens: int = 4,
    timeout: float = 120,
    key: str | None = None,
    port: int = 8000,
) -> dict:
    body = json.dumps(
        {"model": "Qwen/Qwen3-32B", "prompt": prompt, "max_tokens": max_tokens, "temperature": 0}
    ).encode()
    req = urllib.request.Request(
        f"http://{ip}:{port}/v1/completions",
        body,
        {"Content-Type": "application/json", **auth_headers(key)},
    )
    with urllib.request.urlopen(req, timeout=timeout) as r:
        return json.loads(r.read())


def status(ip: str, method: str, path: str, body: dict | None = None, headers=None) -> int:
    """The HTTP status of one request to an engine (no raising on 4xx/5xx)."""
    data = None if body is None else json.dumps(body).encode()
    req = urllib.request.Request(
        f"http://{ip}:8000{path}",
        data,
        {"Content-Type": "application/json", **(headers or {})},
        method=method,
    )
    try:
        with urllib.request.urlopen(req, timeout=30) as r:
            r.read()
            return r.status
    except urllib.error.HTTPError as exc:
        return exc.code


def metric(ip: str, name: str, port: int = 8000, **labels: str) -> float:
    """Sum of a Prometheus series on the engine, over samples matching the labels."""
    req = urllib.request.Request(f"http://{ip}:{port}/metrics", headers=auth_headers())
    with urllib.request.urlopen(req, timeout=10) as r:
        text = r.read().decode()
    total = 0.0
    for line in text.splitlines():
        m = re.match(r"^([^\s{]+)(\{[^}]*\})?\s+(\S+)$", line)
        if not m or m.group(1) != name:
            continue
        found = dict(re.findall(r'(\w+)="([^"]*)"', m.group(2) or ""))
        if all(found.get(k) == v for k, v in labels.items()):
            total += float(m.group(3))
    return total


def external_hits(ip: str, port: int = 8000) -> float:
    return metric(ip, "vllm:prompt_tokens_by_source_total", port, source="external_kv_transfer")


def wait_health(ip: str, timeout: float = 60, port: int = 8000) -> None:
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        try:
            req = urllib.request.Request(f"http://{ip}:{port}/health", headers=auth_headers())
            with urllib.request.urlopen(req, timeout=2) as r:
                if r.status == 200:
                    return
        except OSError:
            pass
        time.sleep(0.3)
    raise AssertionError(f"{ip}: /health not 200 within {timeout}s")


def long_prompt(words: int = 2048) -> str:
    """A prompt no other test sent: a fresh word first, so no chunk of it exists yet."""
    return " ".join([f"n{uuid.uuid4().hex}"] + [f"w{i % 97}" for i in range(words - 1)])


class StreamLoad:
    """A steady stream of streamed completions to every engine, from one thread per engine,
    recorded request by request (what a client saw), until ``stop()``.

    Each record: ``status`` (HTTP status, None when no answer came), ``retry_after``,
    ``tokens`` received, ``done`` ([DONE] came), ``error`` (a connection error, before or
    during the answer), ``t0``/``t1`` (its start and end, ``time.monotonic()``) and the
    engine's name; ``current[name]`` is the request in flight (filled as it streams).
    """

    def __init__(self, engines: dict[str, tuple[str, int]], max_tokens: int = 150):
        import threading

        self.engines, self.max_tokens = engines, max_tokens
        self.records: list[dict] = []
        self.current: dict[str, dict] = {}
        self._stop = threading.Event()
        self._threads = [
            threading.Thread(target=self._run, args=(name,), daemon=True) for name in engines
        ]

    def __enter__(self):
        for t in self._threads:
            t.start()
        return self

    def __exit__(self, *exc):
        self.stop()

    def stop(self) -> None:
        self._stop.set()
        for t in self._threads:
            t.join(60)

    def _run(self, name: str) -> None:
        ip, port = self.engines[name]
        body = json.dumps(
            {"model": "Qwen/Qwen3-32B", "prompt": f"load {name} steady", "stream": True,
             "max_tokens": self.max_tokens, "temperature": 0}
        ).encode()  # fmt: skip
        while not self._stop.is_set():
            rec = self.current[name] = {"engine": name, "t0": time.monotonic()}
            stream(f"http://{ip}:{port}/v1/completions", body, rec, headers=auth_headers())
            rec["t1"] = time.monotonic()
            self.records.append(rec)
            if rec["status"] != 200:
                time.sleep(0.2)  # a client backing off; the engine is draining or down

    def accepted(self) -> list[dict]:
        """Requests the engine accepted (200 and the stream began)."""
        return [r for r in self.records if r["status"] == 200]

    def cut(self) -> list[dict]:
        """Accepted requests that did not end with all their tokens and [DONE]."""
        return [r for r in self.accepted() if not (r["done"] and r["tokens"] == self.max_tokens)]

    def refused(self) -> list[dict]:
        """Requests answered with an HTTP error status (no token can have come)."""
        return [r for r in self.records if r["status"] not in (None, 200)]
