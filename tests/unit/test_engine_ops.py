"""The rolling-restart guard, readiness at execution time, and the fact commands run for real
against local stand-ins (this venv, a tiny HTTP server)."""

from __future__ import annotations

import datetime
import hashlib
import json
import os
import re
import socket
import subprocess
import sys
import threading
from http.server import BaseHTTPRequestHandler, HTTPServer
from pathlib import Path
from types import SimpleNamespace

import gevent
import pytest
from pyinfra.api import OperationError, StringCommand
from pyinfra.connectors.util import CommandOutput, OutputLine
from pyinfra.context import ctx_host, ctx_state
from pyinfra_testing.util import FakeState, create_host, get_command_string

from deploys.engine import engine_address
from deploys.facts import engine as facts
from deploys.operations import service
from deploys.tier import remote_tier


def _host(name):
    return SimpleNamespace(name=name, print_prefix=f"[{name}] ")


def test_roll_restarts_in_batches_of_at_most_the_size():
    roll = service._Roll(2)
    running, most, batches = set(), [0], {}

    def engine(label, seconds):
        batches[label] = roll.admit(label, poll=0.01)
        running.add(label)
        most[0] = max(most[0], len(running))
        gevent.sleep(seconds)
        running.discard(label)
        roll.release(label, True)

    gevent.joinall([gevent.spawn(engine, f"e{i}", 0.05 * (i + 1)) for i in range(5)])
    assert most[0] == 2
    # A batch opens only when the previous one is back, even where a place freed early.
    assert batches == {"e0": 1, "e1": 1, "e2": 2, "e3": 2, "e4": 3}


def test_one_failure_stops_the_roll_and_waiters_give_up():
    roll = service._Roll(1)
    assert roll.admit("gpu1 vllm.service") == 1
    waiter = gevent.spawn(roll.admit, "gpu2 vllm.service", 0.01)
    gevent.sleep(0.05)
    roll.release("gpu1 vllm.service", False)
    assert waiter.get(timeout=1) is None
    assert roll.admit("gaudi1 vllm.service") is None
    assert roll.failed == ["gpu1 vllm.service"]


def _roll_host(name, answers, ran):
    def run_shell_command(command, **kwargs):
        ran.append((name, get_command_string(command).split(" -c ")[0]))
        return answers.pop(0), CommandOutput([])

    return SimpleNamespace(
        name=name, print_prefix=f"[{name}] ", run_shell_command=run_shell_command
    )


def test_restart_in_roll_stops_later_engines_without_restarting_them(caplog):
    state = SimpleNamespace(print_output=False, print_input=False)
    ran: list = []
    args = ("vllm.service", 8000, "/v/bin/python", 60, 1, None, "::")  # the gate off: no drain
    gpu1 = _roll_host("gpu1", [True, True], ran)
    gpu2 = _roll_host("gpu2", [True, False], ran)  # restarts, never healthy
    gaudi1 = _roll_host("gaudi1", [True, True], ran)
    assert service._restart_in_roll(state, gpu1, {}, *args) is True
    assert service._restart_in_roll(state, gpu2, {}, *args) is False
    with caplog.at_level("INFO"):
        assert service._restart_in_roll(state, gaudi1, {}, *args) is False
    assert [h for h, _ in ran] == ["gpu1", "gpu1", "gpu2", "gpu2"]
    assert ran[0][1] == (
        "timeout 60 systemctl reset-failed vllm.service 2>/dev/null; timeout 300 systemctl restart "
        "vllm.service ; rc=$?; rm -f /run/kvceph/drain-8000 ; exit $rc"
    )
    assert "rolling restart stopped at gpu2 vllm.service" in caplog.text
    # Another pyinfra run (a new State) starts clean.
    fresh = SimpleNamespace(print_output=False, print_input=False)
    assert service._restart_in_roll(fresh, gaudi1, {}, *args) is True


def test_restart_in_roll_drains_first_and_says_what_it_cut(caplog):
    state = SimpleNamespace(print_output=False, print_input=False)
    ran: list = []
    answer = '{"state": "timeout", "seconds": 120.0, "gate": 2, "vllm": 1}'

    def run_shell_command(command, **kwargs):
        ran.append(get_command_string(command).split(" -c ")[0])
        return True, CommandOutput([OutputLine("stdout", answer)] if len(ran) == 1 else [])

    gpu1 = SimpleNamespace(name="gpu1", print_prefix="[gpu1] ", run_shell_command=run_shell_command)
    with caplog.at_level("INFO"):
        assert service._restart_in_roll(
            state, gpu1, {}, "vllm.service", 8000, "/v/bin/python", 60, 1, 120, "0.0.0.0"
        )
    assert ran[0] == "timeout 180 /v/bin/python"  # the drain, then restart, then health
    assert ran[1].startswith("timeout 60 systemctl reset-failed vllm.service")
    assert (
        "kvceph: drain gpu1 vllm.service: drain timed out after 120 s (kvceph_drain_timeout): "
        "the restart cuts 2 request(s)" in caplog.text
    )
    assert re.search(r"restart batch 1: gpu1 vllm.service healthy \(drain [\d.]+ s", caplog.text)


def _run_ready(probe, executing):
    state = FakeState()
    state.is_executing = executing
    key = (
        "address=127.0.0.1, model=m, port=8000, python=/v/bin/python, secrets=/dev/null, timeout=60"
    )
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


class _Engine6(HTTPServer):
    address_family = socket.AF_INET6


@pytest.mark.parametrize("bind", ["::", "::1"])
def test_health_wait_and_readiness_reach_an_engine_on_ipv6_loopback(bind):
    # The deploy's checks reach `--host ::` and `--host ::1` on [::1], never on 127.0.0.1
    # (a v6-only socket, as with net.ipv6.bindv6only = 1, does not answer there).
    try:
        server = _Engine6(("::1", 0), _Engine)
    except OSError as exc:
        pytest.skip(f"no IPv6 loopback here: {exc}")
    threading.Thread(target=server.serve_forever, args=(0.05,), daemon=True).start()
    port = server.server_address[1]
    try:
        url = engine_address.local_url(bind, port)
        assert url == f"http://[::1]:{port}"
        done = subprocess.run(
            [sys.executable, "-c", service._HEALTH_SCRIPT, str(port), "10", url],
            capture_output=True,
            text=True,
            timeout=30,
        )
        assert done.returncode == 0, done.stderr
        fact = facts.EngineReadiness()
        cmd = fact.command(sys.executable, port, "m", 5, address=engine_address.local(bind))
        assert fact.process(_sh(cmd)) == {"health": 200, "choices": True, "error": None}
    finally:
        server.shutdown()
        server.server_close()


def test_readiness_probe_when_nothing_listens(engine):
    fact = facts.EngineReadiness()
    port = engine.server_address[1]
    engine.shutdown()
    engine.server_close()
    got = fact.process(_sh(fact.command(sys.executable, port, "m", 2)))
    assert got["health"] is None and "Connection refused" in got["error"]


def test_health_wait_script_times_out_with_a_message():
    done = subprocess.run(
        [sys.executable, "-c", service._HEALTH_SCRIPT, "1", "1", "http://127.0.0.1:1"],
        capture_output=True,
        text=True,
        timeout=30,
    )
    assert done.returncode == 1
    assert "http://127.0.0.1:1/health not 200 within 1s" in done.stderr


def test_health_wait_script_succeeds(engine):
    done = subprocess.run(
        [
            sys.executable,
            "-c",
            service._HEALTH_SCRIPT,
            str(engine.server_address[1]),
            "10",
            engine_address.local_url("0.0.0.0", engine.server_address[1]),
        ],  # fmt: skip
        capture_output=True,
        text=True,
        timeout=30,
    )
    assert done.returncode == 0, done.stderr


# --- Restart on drift: a hand edit then a hand restart keeps the desired digest --------------

FIXTURES = Path(__file__).resolve().parent.parent / "operations" / "service.rolling_restart"


def _drift_case(name):
    data = json.loads((FIXTURES / f"{name}.json").read_text())
    ((key, fact),) = data["facts"]["engine.ServiceDrift"].items()
    return data["kwargs"], key, fact


def _reasons(name):
    kwargs, _, fact = _drift_case(name)
    return service.restart_reasons(fact, kwargs["digest"], kwargs["environment"], kwargs["files"])


def test_reasons_name_the_drift_and_never_a_secret_value():
    assert _reasons("converged_noop") == []
    env = _reasons("env_drift")
    assert env == [
        "running env HF_TOKEN differs from desired (value not shown)",
        "running env PYTHONHASHSEED differs from desired (value not shown)",
    ]
    assert not any("hf-fixture-token" in r or "other" in r for r in env)
    assert _reasons("file_drift") == ["/etc/kvceph/lmcache.yaml differs from desired"]
    assert _reasons("file_newer") == ["/etc/kvceph/lmcache.yaml changed after the process started"]


def test_reasons_when_stopped_or_unset():
    kwargs, _, fact = _drift_case("converged_noop")
    stopped = {**fact, "active": "inactive", "main_pid": 0}
    assert service.restart_reasons(stopped, kwargs["digest"], kwargs["environment"]) == ["inactive"]
    unset = {**fact, "env": {k: v for k, v in fact["env"].items() if k != "HOME"}}
    assert service.restart_reasons(unset, kwargs["digest"], kwargs["environment"]) == [
        "running env HOME unset, desired /var/lib/vllm"
    ]
    assert service.restart_reasons(fact, "b" * 64) == ["running digest differs"]


def test_rolling_restart_logs_why(caplog):
    kwargs, key, fact = _drift_case("env_drift")
    state = FakeState()
    host = create_host(state, facts={"engine.ServiceDrift": {key: fact}})
    with caplog.at_level("INFO"), ctx_state.use(state), ctx_host.use(host):
        commands = list(service.rolling_restart._inner(**kwargs))
    assert [c.function.__name__ for c in commands] == ["_restart_in_roll"]
    python = "/opt/kvceph/venv/bin/python"
    assert commands[0].args == ("vllm.service", 8000, python, 900, 1, None, "0.0.0.0")
    assert "restarts: running env HF_TOKEN differs" in caplog.text
    seed = "running env PYTHONHASHSEED differs from desired (value not shown); running digest aaa"
    assert seed in caplog.text
    assert "hf-fixture-token" not in caplog.text
    # The plan says whether the restart drains (the gate is off here: drain_timeout None).
    assert "vllm.service: no drain (kvceph_vllm_guard is False" in caplog.text
    caplog.clear()
    with caplog.at_level("INFO"), ctx_state.use(state), ctx_host.use(host):
        commands = list(service.rolling_restart._inner(**kwargs, drain_timeout=120))
    assert commands[0].args[-2:] == (120, "0.0.0.0")
    assert "vllm.service: drains first (new requests 503, up to 120 s, kvceph_drain_timeout)" in (
        caplog.text
    )


def test_a_stopped_engine_restarts_without_a_drain(caplog):
    kwargs, key, fact = _drift_case("converged_noop")
    stopped = {**fact, "active": "inactive", "main_pid": 0}
    host = create_host(FakeState(), facts={"engine.ServiceDrift": {key: stopped}})
    with caplog.at_level("INFO"), ctx_state.use(host.state), ctx_host.use(host):
        list(service.rolling_restart._inner(**kwargs, drain_timeout=120))
    assert "vllm.service: not running: no drain" in caplog.text


_FAKE_SYSTEMCTL = """#!/bin/sh
case "$*" in
  *"-p MainPID --value"*) echo "$FAKE_PID" ;;
  *ExecMainStartTimestamp*) echo "$FAKE_START" ;;
  *ActiveState*) printf 'ActiveState=active\\nUnitFileState=enabled\\nMainPID=%s\\n' "$FAKE_PID"
                 echo NeedDaemonReload=no ;;
esac
"""


def test_service_drift_command_reads_a_real_process(tmp_path, monkeypatch):
    """The whole shell command against a live process and real files (systemctl faked)."""
    bin_dir = tmp_path / "bin"
    bin_dir.mkdir()
    (bin_dir / "systemctl").write_text(_FAKE_SYSTEMCTL)
    (bin_dir / "systemctl").chmod(0o755)
    start = datetime.datetime(2026, 11, 30, 1, 20, 49, 123456, tzinfo=datetime.UTC)
    before, after, absent = tmp_path / "before.yaml", tmp_path / "after env", tmp_path / "none"
    before.write_text("chunk_size: 256\n")
    after.write_text("A=1\n")
    # Microseconds matter: a deploy writes the file just before it restarts the unit.
    os.utime(before, (start.timestamp() - 0.001,) * 2)
    os.utime(after, (start.timestamp() + 0.001,) * 2)
    env = {
        "PATH": f"{bin_dir}:{os.environ['PATH']}",
        "PYTHONHASHSEED": "68",
        "KVCEPH_DIGEST": "d" * 64,
        "HF_TOKEN": "tok-never-print",
        "SPACED": " a b ",
    }
    proc = subprocess.Popen(["sleep", "30"], env=env)
    try:
        monkeypatch.setenv("PATH", env["PATH"])
        monkeypatch.setenv("FAKE_PID", str(proc.pid))
        monkeypatch.setenv("FAKE_START", start.strftime("%a %Y-%m-%d %H:%M:%S.%f UTC"))
        fact = facts.ServiceDrift()
        files = (str(before), str(after), str(absent))
        cmd = fact.command(
            "vllm.service",
            env=("PYTHONHASHSEED", "SPACED", "MISSING"),
            secret_env=("HF_TOKEN",),
            files=files,
        )
        output = _sh(cmd)
    finally:
        proc.kill()
        proc.wait()
    got = fact.process(output)
    assert "tok-never-print" not in "\n".join(output)
    assert got["main_pid"] == proc.pid and got["digest"] == "d" * 64
    assert got["env"] == {"PYTHONHASHSEED": "68", "SPACED": " a b "}
    assert got["env_sha256"] == {"HF_TOKEN": hashlib.sha256(b"tok-never-print").hexdigest()}
    assert got["newer"] == [str(after)]
    assert set(got["sha256"]) == {str(before), str(after)}
    assert got["sha256"][str(before)] == hashlib.sha256(b"chunk_size: 256\n").hexdigest()


# --- LMCache's stock S3 connector turned S3 off: restart once the endpoint answers ----------


def _s3_off_case(name):
    data = json.loads((FIXTURES / f"{name}.json").read_text())
    return data["kwargs"], data["facts"]


def test_s3_off_restarts_with_the_time_once_the_endpoint_answers(caplog):
    kwargs, found = _s3_off_case("s3_disabled_endpoint_answers")
    at = next(iter(found["connector.S3Disabled"].values()))["at"]
    host = create_host(FakeState(), facts=found)
    with caplog.at_level("INFO"), ctx_state.use(host.state), ctx_host.use(host):
        commands = list(service.rolling_restart._inner(**kwargs, drain_timeout=120))
    assert [c.function.__name__ for c in commands] == ["_restart_in_roll"]
    # Drained like any restart of a running engine; the reason names LMCache's line and time.
    assert commands[0].args[5] == 120
    shown = remote_tier.shown_time(at)
    assert f"vllm.service restarts: S3 connection disabled at {shown} (" in caplog.text
    assert "and http://s3.kvlab:80 answers again; running digest aaaaaaaaaaaa" in caplog.text
    assert "vllm.service: drains first" in caplog.text


def test_s3_off_while_the_endpoint_is_down_keeps_the_engine_and_says_why(caplog):
    kwargs, found = _s3_off_case("s3_disabled_endpoint_down")
    host = create_host(FakeState(), facts=found)
    with caplog.at_level("INFO"), ctx_state.use(host.state), ctx_host.use(host):
        commands = list(service.rolling_restart._inner(**kwargs))
    assert commands == []
    assert "not restarted: http://s3.kvlab:80 does not answer from" in caplog.text
    assert "([Errno 111] Connection refused); fix: bring the S3 endpoint back" in caplog.text


def test_s3_not_off_or_not_checked_probes_nothing(caplog):
    # No RgwReachable in these facts: a probe would raise "Missing test fact".
    kwargs, found = _s3_off_case("s3_not_disabled")
    host = create_host(FakeState(), facts=found)
    with ctx_state.use(host.state), ctx_host.use(host):
        assert list(service.rolling_restart._inner(**kwargs)) == []
    # kvceph's connector: s3_endpoint None, the journal is not even read.
    kwargs, found = _s3_off_case("s3_disabled_endpoint_answers")
    kwargs = {k: v for k, v in kwargs.items() if k != "s3_endpoint"}
    only_drift = {"engine.ServiceDrift": found["engine.ServiceDrift"]}
    host = create_host(FakeState(), facts=only_drift)
    with ctx_state.use(host.state), ctx_host.use(host):
        assert list(service.rolling_restart._inner(**kwargs)) == []
