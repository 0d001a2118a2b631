"""The rolling-restart guard, readiness at execution time, and the fact commands run for real
against local stand-ins (this venv, a tiny HTTP server)."""

from __future__ import annotations

import json
import subprocess
import sys
import threading
from http.server import BaseHTTPRequestHandler, HTTPServer
from types import SimpleNamespace

import pytest
from pyinfra.api import OperationError, StringCommand
from pyinfra.context import ctx_host, ctx_state
from pyinfra_testing.util import FakeState, create_host, get_command_string

from deploys.facts import engine as facts
from deploys.operations import service


def _host(name):
    return SimpleNamespace(name=name, print_prefix=f"[{name}] ")


def test_roll_guard_stops_the_roll_after_an_unhealthy_host():
    state = object()
    a, b, c = _host("gpu1"), _host("gpu2"), _host("gaudi1")
    assert service._roll_guard(state, a, "vllm.service") is True
    assert service._roll_done(state, a) is True
    assert service._roll_guard(state, b, "vllm.service") is True
    # gpu2's health wait failed: _roll_done never ran, so gaudi1 must not restart.
    assert service._roll_guard(state, c, "vllm.service") is False
    # Another pyinfra run starts clean.
    assert service._roll_guard(object(), c, "vllm.service") is True


def _run_ready(probe, executing):
    state = FakeState()
    state.is_executing = executing
    key = "model=m, port=8000, python=/v/bin/python, timeout=60"
    host = create_host(state, facts={"engine.EngineReadiness": {key: probe}})
    with ctx_state.use(state), ctx_host.use(host):
        return list(service.ready._inner(python="/v/bin/python", port=8000, model="m"))


def test_ready_fails_the_host_when_executing():
    probe = {"health": 503, "choices": False, "error": "HTTPError: HTTP Error 503"}
    assert _run_ready(probe, executing=False) == []
    with pytest.raises(OperationError, match="not ready: /health=503"):
        _run_ready(probe, executing=True)
    assert _run_ready({"health": 200, "choices": True, "error": None}, executing=True) == []


def _sh(command) -> list[str]:
    text = get_command_string(StringCommand(command))
    done = subprocess.run(["sh", "-c", text], capture_output=True, text=True, timeout=60)
    return done.stdout.splitlines()


def test_engine_versions_command_reads_a_real_venv(tmp_path):
    fact = facts.EngineVersions()
    venv = str(__import__("pathlib").Path(sys.executable).parent.parent)
    got = fact.process(_sh(fact.command(venv)))
    assert got["python"] == ".".join(map(str, sys.version_info[:3]))
    assert "pyinfra" in got["packages"]
    assert fact.process(_sh(fact.command(str(tmp_path)))) == {"python": None, "packages": {}}


def test_accelerators_and_memtotal_commands_run():
    acc = facts.Accelerators()
    got = acc.process(_sh(acc.command))
    assert set(got) == {"nvidia", "gaudi"}
    mem = facts.MemTotal()
    assert mem.process(_sh(mem.command)) > 0


class _Engine(BaseHTTPRequestHandler):
    choices = True

    def log_message(self, *args):
        pass

    def _send(self, code, body):
        data = json.dumps(body).encode()
        self.send_response(code)
        self.send_header("Content-Type", "application/json")
        self.send_header("Content-Length", str(len(data)))
        self.end_headers()
        self.wfile.write(data)

    def do_GET(self):
        self._send(200 if self.path == "/health" else 404, {})

    def do_POST(self):
        length = int(self.headers["Content-Length"])
        request = json.loads(self.rfile.read(length))
        assert request["max_tokens"] == 8 and request["model"] == "m"
        self._send(200, {"choices": [{"text": "hi"}]} if self.choices else {"object": "x"})


@pytest.fixture
def engine():
    server = HTTPServer(("127.0.0.1", 0), _Engine)
    thread = threading.Thread(target=server.serve_forever, args=(0.05,), daemon=True)
    thread.start()
    yield server
    server.shutdown()
    server.server_close()


def test_readiness_probe_against_an_http_engine(engine, monkeypatch):
    fact = facts.EngineReadiness()
    port = engine.server_address[1]
    cmd = fact.command(sys.executable, port, "m", 5)
    assert fact.process(_sh(cmd)) == {"health": 200, "choices": True, "error": None}
    monkeypatch.setattr(_Engine, "choices", False)
    got = fact.process(_sh(cmd))
    assert got["health"] == 200 and got["choices"] is False
    assert "no choices" in got["error"]


def test_readiness_probe_when_nothing_listens(engine):
    fact = facts.EngineReadiness()
    port = engine.server_address[1]
    engine.shutdown()
    engine.server_close()
    got = fact.process(_sh(fact.command(sys.executable, port, "m", 2)))
    assert got["health"] is None and "Connection refused" in got["error"]


def test_health_wait_script_times_out_with_a_message():
    done = subprocess.run(
        [sys.executable, "-c", service._HEALTH_SCRIPT, "1", "1"],
        capture_output=True,
        text=True,
        timeout=30,
    )
    assert done.returncode == 1
    assert "/health on port 1 not 200 within 1s" in done.stderr


def test_health_wait_script_succeeds(engine):
    done = subprocess.run(
        [sys.executable, "-c", service._HEALTH_SCRIPT, str(engine.server_address[1]), "10"],
        capture_output=True,
        text=True,
        timeout=30,
    )
    assert done.returncode == 0, done.stderr
