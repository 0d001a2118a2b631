"""Drain before a restart (deploys/engine/drain.py, remote/engine_drain.py, the gate's drain): the
gate refuses new requests with 503 + Retry-After while a live drain file exists, /health says
draining with its count of open requests (streams included), and the drain script waits for
that count and vLLM's running + waiting to reach 0; with the lab engine behind the real gate,
with and without an API key."""

from __future__ import annotations

import asyncio
import json
import os
import socket
import subprocess
import sys
import threading
import time
from pathlib import Path

import pytest
from httpcall import call, stream

from deploys import paths, render
from deploys.engine import drain

sys.path.insert(0, str(paths.GUARD_SOURCE.parent))
import engine_drain  # noqa: E402
from engine_guard import Guard  # noqa: E402

KEY = "sk-drain-test-000111222"
PORT = 8123


def _scope(path, kind="http", client="192.0.2.7", headers=(), method=None):
    return {
        "type": kind,
        "method": method or ("GET" if path in ("/health", "/metrics") else "POST"),
        "path": path,
        "root_path": "",
        "headers": [(k.encode(), v.encode()) for k, v in headers],
        "client": (client, 40000),
        "server": ("127.0.0.1", PORT),
    }


def _call(guard, path, **kw):
    """(reached the app, status or close code, headers, body)."""
    reached, sent = [], []

    async def send(message):
        sent.append(message)

    async def app(scope, receive, send):
        reached.append(scope["path"])

    guard.app = app
    asyncio.run(guard(_scope(path, **kw), None, send))
    start = next((m for m in sent if m["type"] in ("http.response.start", "websocket.close")), {})
    body = b"".join(m.get("body", b"") for m in sent if m["type"] == "http.response.body")
    return (
        bool(reached),
        start.get("status") or start.get("code"),
        dict(start.get("headers", [])),
        body,
    )


def _lease(directory: Path, seconds: float = 60, port: int = PORT) -> Path:
    path = directory / f"drain-{port}"
    path.write_text(f"{time.time() + seconds:.3f}\n")
    return path


@pytest.mark.parametrize("key", [KEY, None], ids=["api-key", "no-key"])
def test_a_live_drain_file_refuses_new_requests_and_health_says_draining(tmp_path, key):
    env = {"KVCEPH_DRAIN_DIR": str(tmp_path), "KVCEPH_OPEN_NETWORKS": "127.0.0.0/8"}
    if key:
        env["VLLM_API_KEY"] = key
    guard = Guard(None, environ=env)
    bearer = [("Authorization", f"Bearer {key}")] if key else []
    assert _call(guard, "/v1/completions", headers=bearer)[0] is True
    _lease(tmp_path)
    reached, status, headers, body = _call(guard, "/v1/completions", headers=bearer)
    assert (reached, status, headers[b"retry-after"]) == (False, 503, b"5")
    assert json.loads(body)["error"]["code"] == 503
    reached, status, _, body = _call(guard, "/health", client="127.0.0.1")
    assert (reached, status, json.loads(body)) == (
        False, 503, {"status": "draining", "open_requests": 0},
    )  # fmt: skip
    assert _call(guard, "/ping", headers=bearer)[1] == 503  # SageMaker's health check
    assert _call(guard, "/metrics", client="127.0.0.1")[0] is True  # kvceph reads vLLM's counts
    assert _call(guard, "/v1/realtime", kind="websocket", headers=bearer)[1] == 1013
    if key:  # a client without the key still learns nothing but 401
        assert _call(guard, "/v1/completions")[1] == 401


def test_a_file_older_than_the_process_or_an_expired_lease_is_ignored(tmp_path):
    env = {"KVCEPH_DRAIN_DIR": str(tmp_path)}
    path = _lease(tmp_path)
    guard = Guard(None, environ=env)  # started after the file: the drain was for its predecessor
    assert _call(guard, "/v1/completions")[0] is True
    guard = Guard(None, environ=env)
    _lease(tmp_path, seconds=-1)  # a deploy killed mid-drain: its lease ran out
    assert _call(guard, "/v1/completions")[0] is True
    _lease(tmp_path, seconds=60)
    assert _call(guard, "/v1/completions")[1] == 503
    _lease(tmp_path, seconds=60, port=PORT + 1)  # another engine's drain
    path.unlink()
    assert _call(guard, "/v1/completions")[0] is True


def test_a_file_written_right_after_start_drains_whatever_its_mtime_says(tmp_path):
    # File times come from the kernel's coarse clock, milliseconds behind time.time(): a drain
    # written within milliseconds of the gate's start may carry an mtime before it.
    env = {"KVCEPH_DRAIN_DIR": str(tmp_path)}
    guard = Guard(None, environ=env)
    path = _lease(tmp_path, seconds=60)
    before = time.time() - 1
    os.utime(path, (before, before))
    assert _call(guard, "/v1/completions")[1] == 503
    # and the file found at start stays ignored even with an mtime ahead of the clock
    ahead = time.time() + 60
    os.utime(path, (ahead, ahead))
    assert _call(Guard(None, environ=env), "/v1/completions")[0] is True


def test_the_gate_counts_open_requests_until_the_app_returns_streams_included():
    guard = Guard(None, environ={})
    seen = {}

    async def main():
        release = asyncio.Event()

        async def app(scope, receive, send):
            await release.wait()  # a stream: the app returns after its last chunk

        guard.app = app
        task = asyncio.ensure_future(guard(_scope("/v1/completions"), None, None))
        health = asyncio.ensure_future(guard(_scope("/metrics"), None, None))
        await asyncio.sleep(0.01)
        seen["open"] = guard.open_requests  # /metrics is not counted
        release.set()
        await asyncio.gather(task, health)
        seen["after"] = guard.open_requests

    asyncio.run(main())
    assert seen == {"open": 1, "after": 0}


VLLM_METRICS = """\
# HELP vllm:num_requests_running Number of requests in model execution batches.
# TYPE vllm:num_requests_running gauge
vllm:num_requests_running{engine="0",model_name="Qwen/Qwen3-32B"} 3.0
vllm:num_requests_running{engine="1",model_name="Qwen/Qwen3-32B"} 1.0
# HELP vllm:num_requests_waiting Number of requests waiting to be processed.
# TYPE vllm:num_requests_waiting gauge
vllm:num_requests_waiting{engine="0",model_name="Qwen/Qwen3-32B"} 2.0
vllm:num_requests_waiting_by_reason{engine="0",reason="capacity"} 9.0
vllm:num_preemptions_total{engine="0",model_name="Qwen/Qwen3-32B"} 7.0
"""


def test_vllm_counts_sum_running_and_waiting_over_its_engines():
    assert engine_drain.vllm_open(VLLM_METRICS) == 6
    assert engine_drain.gate_open(503, '{"status": "draining", "open_requests": 2}') == 2
    assert engine_drain.gate_open(503, "") is None  # vLLM's own 503: its engine died
    assert engine_drain.gate_open(200, "") is None


def test_summary_lines_say_what_the_restart_cuts():
    assert drain.summary(drain.parse(['{"state": "drained", "seconds": 2.04}']), 120) == (
        "drained in 2.0 s"
    )
    cut = drain.parse(["noise", '{"state": "timeout", "seconds": 120.2, "gate": 2, "vllm": 3}'])
    assert cut.cut == 3
    assert drain.summary(cut, 120) == (
        "drain timed out after 120 s (kvceph_drain_timeout): the restart cuts 3 request(s) "
        "(gate 2 open, vLLM 3 running+waiting)"
    )
    assert "does not drain" in drain.summary(drain.parse(['{"state": "no-gate", "vllm": 1}']), 9)
    assert drain.parse([]).state == "failed"
    assert drain.plan_note(False, 120).startswith("no drain (kvceph_vllm_guard is False")
    assert drain.plan_note(True, 120) == (
        "drains first (new requests 503, up to 120 s, kvceph_drain_timeout)"
    )


def test_commands_carry_no_secret_and_remove_the_file_whatever_the_restart_did():
    text = str(drain.command("/opt/kvceph/venv/bin/python", 8001, 120).get_raw_value())
    assert text.endswith(" 8001 120 480 /run/kvceph http://127.0.0.1:8001")
    assert "VLLM_API_KEY" not in text.split("-c", 1)[0]
    six = str(drain.command("/opt/kvceph/venv/bin/python", 8001, 120, "::").get_raw_value())
    assert six.endswith(" /run/kvceph 'http://[::1]:8001'")
    restart = str(drain.restart_command("vllm-engine-b.service", 8001).get_raw_value())
    # reset-failed: a unit that hit its start limit (crash loop) accepts the restart.
    assert restart == (
        "timeout 60 systemctl reset-failed vllm-engine-b.service 2>/dev/null; timeout 300 "
        "systemctl restart vllm-engine-b.service ; rc=$?; rm -f /run/kvceph/drain-8001 ; exit $rc"
    )


# --- the lab engine behind the real gate (as `vllm serve --middleware` runs it) -------------


def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


@pytest.fixture
def engine(tmp_path):
    procs = []

    def start(key):
        port = _free_port()
        lib = tmp_path / "lib"
        lib.mkdir(exist_ok=True)
        (lib / f"{paths.GUARD_MODULE}.py").write_text(render.guard_module())
        env = {
            **{k: v for k, v in os.environ.items() if not k.startswith(("LMCACHE_", "AWS_"))},
            "KVCEPH_OPEN_NETWORKS": "127.0.0.0/8,::1/128",
            "KVCEPH_DRAIN_DIR": str(tmp_path / "run"),
            "PYTHONPATH": str(lib),
            **({"VLLM_API_KEY": key} if key else {}),
        }
        log = open(tmp_path / f"engine{port}.log", "w")  # noqa: SIM115
        proc = subprocess.Popen(
            [sys.executable, "-m", "kvceph_lab_engine", "serve", "Qwen/Qwen3-32B",
             "--max-model-len", "8192", "--host", "127.0.0.1", "--port", str(port),
             "--middleware", f"{paths.GUARD_MODULE}.Guard"],
            env=env, stdout=log, stderr=subprocess.STDOUT,
        )  # fmt: skip
        procs.append((proc, log))
        deadline = time.monotonic() + 20
        while time.monotonic() < deadline:
            assert proc.poll() is None, (tmp_path / f"engine{port}.log").read_text()
            try:
                if call(f"http://127.0.0.1:{port}/health")[0] == 200:
                    return port
            except OSError:
                time.sleep(0.1)
        raise AssertionError("engine did not start")

    yield start
    for proc, log in procs:
        proc.terminate()
        proc.wait(10)
        log.close()


def _stream(url, key, tokens, out):
    """A streamed completion: out gets status, tokens received and whether [DONE] came."""
    body = {"model": "Qwen/Qwen3-32B", "prompt": "hi there", "max_tokens": tokens, "stream": True}
    stream(url, body, out, key=key)


@pytest.mark.parametrize("key", [KEY, None], ids=["api-key", "no-key"])
def test_drain_waits_for_open_streams_refuses_new_ones_then_reports_a_cut(engine, tmp_path, key):
    port = engine(key)
    base = f"http://127.0.0.1:{port}"
    run = tmp_path / "run"
    streams = [{} for _ in range(2)]
    threads = [
        threading.Thread(target=_stream, args=(base + "/v1/completions", key, 1500, s))
        for s in streams
    ]
    for t in threads:
        t.start()
    while not all(s.get("tokens") for s in streams):
        assert all(s.get("status") in (None, 200) for s in streams), streams
        time.sleep(0.02)
    result = {}
    drainer = threading.Thread(
        target=lambda: result.update(engine_drain.main([str(port), "60", "120", str(run)]))
    )
    drainer.start()
    while not (run / f"drain-{port}").exists():
        time.sleep(0.02)
    time.sleep(0.1)
    status, headers, body = call(base + "/v1/completions", {"prompt": "x"}, key)
    assert (status, headers.get("Retry-After")) == (503, "5")
    status, _, body = call(base + "/health")
    assert status == 503 and json.loads(body) == {"status": "draining", "open_requests": 2}
    drainer.join(60)
    for t in threads:
        t.join(60)
    assert result["state"] == "drained" and result["seconds"] > 0
    want = {"status": 200, "retry_after": None, "tokens": 1500, "done": True, "error": None}
    assert all(s == want for s in streams), streams

    # A request longer than the drain timeout: the drain gives up and says what is cut.
    (run / f"drain-{port}").unlink()
    assert call(base + "/health")[0] == 200
    long = {}
    t = threading.Thread(
        target=_stream, args=(base + "/v1/completions", key, 6000, long), daemon=True
    )
    t.start()
    while not long.get("tokens"):
        assert long.get("status") in (None, 200), long
        time.sleep(0.02)
    cut = engine_drain.main([str(port), "1", "30", str(run)])
    assert (cut["state"], cut["gate"], cut["vllm"]) == ("timeout", 1, 1)
    assert "cuts 1 request(s)" in drain.summary(drain.parse([json.dumps(cut)]), 1)


def test_drain_of_an_engine_that_is_not_running_writes_nothing(tmp_path):
    result = engine_drain.main([str(_free_port()), "5", "30", str(tmp_path)])
    assert result["state"] == "down" and not list(tmp_path.iterdir())
