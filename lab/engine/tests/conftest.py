"""Shared helpers: run the engine as a subprocess, free ports, HTTP calls (stdlib only)."""

from __future__ import annotations

import json
import os
import socket
import subprocess
import sys
import time
import urllib.request
from pathlib import Path

import pytest

KV_OK = json.dumps(
    {
        "kv_connector": "LMCacheConnectorV1",
        "kv_role": "kv_both",
        "kv_load_failure_policy": "recompute",
    }
)


# the Python whose kvceph_lab_engine is tested (e.g. a venv installed from the wheelhouse)
ENGINE_PYTHON = os.environ.get("KVCEPH_ENGINE_PYTHON", sys.executable)


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def http(method: str, url: str, body=None, timeout=30, headers=None):
    data = None if body is None else json.dumps(body).encode()
    req = urllib.request.Request(url, data=data, method=method, headers=headers or {})
    if data is not None:
        req.add_header("Content-Type", "application/json")
    try:
        with urllib.request.urlopen(req, timeout=timeout) as r:
            return r.status, r.read().decode()
    except urllib.error.HTTPError as e:
        return e.code, e.read().decode()


def metric(text: str, name: str, **labels) -> float:
    for line in text.splitlines():
        if line.startswith(name + "{") and all(f'{k}="{v}"' in line for k, v in labels.items()):
            return float(line.rsplit(" ", 1)[1])
    raise KeyError(name)


class Engine:
    """A running `python -m kvceph_lab_engine serve ...` (optionally behind a prefix argv)."""

    def __init__(self, args, env, prefix=(), log_path: Path | None = None):
        self.port = free_port()
        cmd = [*prefix, ENGINE_PYTHON, "-m", "kvceph_lab_engine", "serve", *args,
               "--host", "127.0.0.1", "--port", str(self.port)]  # fmt: skip
        self.log_path = log_path
        self.log = open(log_path, "w") if log_path else subprocess.DEVNULL  # noqa: SIM115
        self.proc = subprocess.Popen(cmd, env=env, stdout=self.log, stderr=subprocess.STDOUT)
        self.url = f"http://127.0.0.1:{self.port}"
        deadline = time.monotonic() + 20
        while time.monotonic() < deadline:
            if self.proc.poll() is not None:
                raise RuntimeError(f"engine exited {self.proc.returncode}: {self.logs()}")
            try:
                if http("GET", self.url + "/health", timeout=1)[0] == 200:
                    return
            except OSError:
                time.sleep(0.1)
        raise RuntimeError("engine did not become healthy")

    def logs(self) -> str:
        return self.log_path.read_text() if self.log_path else ""

    def complete(self, prompt: str, **kw):
        body = {"model": kw.pop("model", None) or self.model, "prompt": prompt, "max_tokens": 2}
        body.update(kw)
        status, text = http("POST", self.url + "/v1/completions", body)
        assert status == 200, text
        return json.loads(text)

    def metrics(self) -> str:
        return http("GET", self.url + "/metrics")[1]

    def stop(self):
        self.proc.terminate()
        try:
            self.proc.wait(10)
        except subprocess.TimeoutExpired:
            self.proc.kill()
            self.proc.wait()
        if self.log_path:
            self.log.close()


@pytest.fixture
def engine_env(tmp_path):
    env = {k: v for k, v in os.environ.items() if not k.startswith(("LMCACHE_", "AWS_"))}
    env["PYTHONHASHSEED"] = "67"
    env["HOME"] = str(tmp_path)
    return env


@pytest.fixture
def start_engine(tmp_path):
    engines = []

    def _start(args, env, model="Qwen/Qwen3-32B", prefix=()):
        e = Engine([model, *args], env, prefix, tmp_path / f"engine{len(engines)}.log")
        e.model = model
        engines.append(e)
        return e

    yield _start
    for e in engines:
        e.stop()
