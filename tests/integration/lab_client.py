"""Small, independent clients for the lab's engines and hosts (the tests' own eyes).

Deliberately not built on deploys.verification: the tests check the product, not themselves.
"""

from __future__ import annotations

import json
import re
import time
import urllib.request
import uuid


def completion(ip: str, prompt: str, max_tokens: int = 4, timeout: float = 120) -> dict:
    body = json.dumps(
        {"model": "Qwen/Qwen3-32B", "prompt": prompt, "max_tokens": max_tokens, "temperature": 0}
    ).encode()
    req = urllib.request.Request(
        f"http://{ip}:8000/v1/completions", body, {"Content-Type": "application/json"}
    )
    with urllib.request.urlopen(req, timeout=timeout) as r:
        return json.loads(r.read())


def metric(ip: str, name: str, **labels: str) -> float:
    """Sum of a Prometheus series on the engine, over samples matching the labels."""
    with urllib.request.urlopen(f"http://{ip}:8000/metrics", timeout=10) as r:
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


def external_hits(ip: str) -> float:
    return metric(ip, "vllm:prompt_tokens_by_source_total", source="external_kv_transfer")


def wait_health(ip: str, timeout: float = 60) -> None:
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        try:
            with urllib.request.urlopen(f"http://{ip}:8000/health", timeout=2) as r:
                if r.status == 200:
                    return
        except OSError:
            pass
        time.sleep(0.3)
    raise AssertionError(f"{ip}: /health not 200 within {timeout}s")


def long_prompt(words: int = 2048) -> str:
    """A prompt no other test sent: a fresh word first, so no chunk of it exists yet."""
    return " ".join([f"n{uuid.uuid4().hex}"] + [f"w{i % 97}" for i in range(words - 1)])
