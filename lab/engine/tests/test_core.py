"""The engine core as a process of its own (core.py): killed, the server exits 0 as vLLM's."""

from __future__ import annotations

import importlib.util
import os
import subprocess
import sys
import time
from pathlib import Path

import pytest

# This directory's conftest by path: in `make test` one pytest session also collects
# tests/integration, whose conftest owns the module name `conftest`.
_HERE = Path(__file__).with_name("conftest.py")
_spec = importlib.util.spec_from_file_location("engine_conftest", _HERE)
_conftest = importlib.util.module_from_spec(_spec)
_spec.loader.exec_module(_conftest)
KV_OK, free_port, http = _conftest.KV_OK, _conftest.free_port, _conftest.http

SRC = Path(__file__).resolve().parents[1] / "src"
# The tested Python (a venv from the wheelhouse), else make unit's LMCache venv with this
# checkout's package: the engine imports LMCache's config loader at start.
PYTHON = (
    os.environ.get("KVCEPH_ENGINE_PYTHON")
    or os.environ.get("KVCEPH_LMCACHE_PYTHON")
    or sys.executable
)
ARGS = [
    "--max-model-len",
    "4096",
    "--gpu-memory-utilization",
    "0.55",
    "--kv-transfer-config",
    KV_OK,
]


@pytest.fixture
def engine(engine_env, tmp_path):
    port, log = free_port(), tmp_path / "engine.log"
    env = {**engine_env, "PYTHONPATH": str(SRC)}
    cmd = [PYTHON, "-m", "kvceph_lab_engine", "serve", "m", *ARGS, "--host", "127.0.0.1",
           "--port", str(port)]  # fmt: skip
    with open(log, "w") as out:
        proc = subprocess.Popen(cmd, env=env, stdout=out, stderr=subprocess.STDOUT)
    deadline = time.monotonic() + 20
    while time.monotonic() < deadline and proc.poll() is None:
        try:
            if http("GET", f"http://127.0.0.1:{port}/health", timeout=1)[0] == 200:
                break
        except OSError:
            time.sleep(0.1)
    else:
        proc.kill()
        pytest.fail(f"engine did not start: {log.read_text()}")
    proc.log, proc.port = log, port
    yield proc
    if proc.poll() is None:
        proc.kill()
        proc.wait()


def children(pid: int) -> list[str]:
    return open(f"/proc/{pid}/task/{pid}/children").read().split()


def test_killing_the_engine_core_ends_the_server_with_status_0_like_vllm(engine):
    core = children(engine.pid)
    assert len(core) == 1, core
    subprocess.run(["kill", "-9", core[0]], check=True)
    # vLLM exits 0 here (vllm-project/vllm#48966): only Restart=always restarts it.
    assert engine.wait(10) == 0
    text = engine.log.read_text()
    assert "Engine core proc EngineCore_DP0 died unexpectedly, shutting down client." in text


def test_a_stopped_server_takes_its_core_along(engine):
    core = children(engine.pid)[0]
    engine.terminate()
    assert engine.wait(10) == 0
    deadline = time.monotonic() + 5
    while time.monotonic() < deadline and Path(f"/proc/{core}").exists():
        time.sleep(0.1)
    assert not Path(f"/proc/{core}").exists()
    assert "died unexpectedly" not in engine.log.read_text()


def test_cache_salt_is_checked_and_keys_vllms_prefix_cache_as_vllm_does(engine):
    """vLLM's check_cache_salt_support: a salt must be a non-empty string (400 otherwise); a
    salted repeat misses vLLM's prefix cache, the same salt again hits it."""
    url = f"http://127.0.0.1:{engine.port}"
    body = {"model": "m", "prompt": "word " * 300, "max_tokens": 1}

    def hits():
        text = http("GET", f"{url}/metrics")[1]
        return _conftest.metric(text, "vllm:prefix_cache_hits_total")

    status, answer = http("POST", f"{url}/v1/completions", {**body, "cache_salt": ""})
    assert status == 400 and "'cache_salt' must be a non-empty string" in str(answer)
    assert http("POST", f"{url}/v1/completions", body)[0] == 200
    first = hits()
    assert http("POST", f"{url}/v1/completions", {**body, "cache_salt": "run-1"})[0] == 200
    assert hits() == first  # a new salt: nothing from the prefix cache
    assert http("POST", f"{url}/v1/completions", {**body, "cache_salt": "run-1"})[0] == 200
    assert hits() > first  # the same salt again: vLLM's prefix cache answers
