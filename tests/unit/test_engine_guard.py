"""kvceph's engine gate (deploys/remote/engine_guard.py): with an API key, every route needs it,
except /health and /metrics from the open networks; answered like vLLM (401 Unauthorized)."""

from __future__ import annotations

import asyncio
import os
import socket
import subprocess
import sys
import time
from pathlib import Path

import pytest
from httpcall import call as http_call

from deploys import paths, render

sys.path.insert(0, str(paths.GUARD_SOURCE.parent))
from engine_guard import Guard  # noqa: E402

KEY = "sk-gate-test-000111222"
ENV = {"VLLM_API_KEY": KEY, "KVCEPH_OPEN_NETWORKS": "127.0.0.0/8,::1/128,10.1.0.0/16"}


def call(guard_env, method, path, client="192.0.2.7", headers=(), kind="http"):
    """(reached the app, status sent, body sent) for one request through the gate."""
    reached, sent = [], []

    async def app(scope, receive, send):
        reached.append(scope["path"])

    async def send(message):
        sent.append(message)

    scope = {
        "type": kind,
        "method": method,
        "path": path,
        "root_path": "",
        "headers": [(k.encode(), v.encode()) for k, v in headers],
        "client": (client, 40000),
    }
    asyncio.run(Guard(app, environ=guard_env)(scope, None, send))
    status = next((m.get("status") or m.get("code") for m in sent), None)
    body = b"".join(m.get("body", b"") for m in sent if m["type"] == "http.response.body")
    return bool(reached), status, body


BEARER = [("Authorization", f"Bearer {KEY}")]


@pytest.mark.parametrize(
    "path",
    ["/v1/completions", "/invocations", "/tokenize", "/detokenize", "/classify", "/pooling",
     "/score", "/rerank", "/collective_rpc", "/version", "/metrics", "/health", "/"],
)  # fmt: skip
def test_every_route_needs_the_key_from_outside(path):
    assert call(ENV, "POST", path) == (False, 401, b'{"error": "Unauthorized"}')
    assert call(ENV, "POST", path, headers=BEARER)[0] is True


@pytest.mark.parametrize("path", ["/health", "/metrics", "/metrics/"])
@pytest.mark.parametrize("client", ["127.0.0.1", "::1", "10.1.2.3"])
def test_health_and_metrics_open_to_the_open_networks_only(path, client):
    assert call(ENV, "GET", path, client=client)[0] is True
    assert call(ENV, "POST", "/invocations", client=client)[1] == 401


@pytest.mark.parametrize("client", ["::ffff:127.0.0.1", "::ffff:10.1.2.3"])
def test_ipv4_clients_of_a_dual_stack_socket_are_matched_as_ipv4(client):
    # `--host ::`: the deploy's readiness check on 127.0.0.1 and an IPv4 Prometheus network
    # arrive as IPv4-mapped addresses; the open networks are given as IPv4 CIDRs.
    assert call(ENV, "GET", "/health", client=client)[0] is True
    assert call(ENV, "GET", "/metrics", client=client)[0] is True
    for method, path in (("POST", "/invocations"), ("GET", "/v1/models"), ("POST", "/tokenize")):
        assert call(ENV, method, path, client=client)[:2] == (False, 401), path


@pytest.mark.parametrize("client", ["::ffff:192.0.2.7", "::ffff:10.2.0.1", "::ffff:0:127.0.0.1"])
def test_mapped_addresses_outside_the_open_networks_still_need_the_key(client):
    # the last one is IPv4-*translated* (RFC 2765), not mapped: no IPv4 client of a socket
    assert call(ENV, "GET", "/metrics", client=client)[:2] == (False, 401)
    assert call(ENV, "GET", "/metrics", client=client, headers=BEARER)[0] is True


def test_wrong_or_malformed_credentials_are_refused():
    for value in (f"Basic {KEY}", f"Bearer {KEY}x", f"Bearer  {KEY}", KEY, ""):
        assert call(ENV, "GET", "/v1/models", headers=[("Authorization", value)])[1] == 401
    assert call(ENV, "GET", "/v1/models", headers=[("authorization", f"bEaReR {KEY}")])[0]


def test_cors_preflight_passes_a_bare_options_does_not():
    preflight = [("Origin", "https://x"), ("Access-Control-Request-Method", "POST")]
    assert call(ENV, "OPTIONS", "/v1/completions", headers=preflight)[0] is True
    assert call(ENV, "OPTIONS", "/v1/completions")[1] == 401


def test_websocket_without_key_is_closed_with_policy_violation():
    assert call(ENV, "GET", "/v1/realtime", kind="websocket")[:2] == (False, 1008)


def test_without_a_key_the_gate_passes_everything_like_vllm():
    assert call({"KVCEPH_OPEN_NETWORKS": "127.0.0.0/8"}, "POST", "/invocations")[0] is True


# --- with the lab engine, as `vllm serve --middleware kvceph_engine_guard.Guard` runs it ------


def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def _status(url, body=None, key=None) -> int:
    return http_call(url, body, key, timeout=10)[0]


@pytest.fixture
def gated_engine(tmp_path):
    def start(open_networks: str, host: str = "127.0.0.1", **extra_env):
        port = _free_port()
        guard_dir = tmp_path / "lib"
        guard_dir.mkdir(exist_ok=True)
        (guard_dir / f"{paths.GUARD_MODULE}.py").write_text(render.guard_module())
        env = {
            **{k: v for k, v in os.environ.items() if not k.startswith(("LMCACHE_", "AWS_"))},
            "VLLM_API_KEY": KEY,
            "KVCEPH_OPEN_NETWORKS": open_networks,
            "PYTHONPATH": str(guard_dir),
            **extra_env,
        }
        log = open(tmp_path / f"engine{port}.log", "w")  # noqa: SIM115
        proc = subprocess.Popen(
            [sys.executable, "-m", "kvceph_lab_engine", "serve", "Qwen/Qwen3-32B",
             "--max-model-len", "4096", "--host", host, "--port", str(port),
             "--middleware", f"{paths.GUARD_MODULE}.Guard"],
            env=env, stdout=log, stderr=subprocess.STDOUT,
        )  # fmt: skip
        procs.append((proc, log))
        url = f"http://127.0.0.1:{port}"
        deadline = time.monotonic() + 20
        while time.monotonic() < deadline:
            assert proc.poll() is None, (tmp_path / f"engine{port}.log").read_text()
            try:
                _status(url + "/v1/models", key=KEY)
                return url, tmp_path / f"engine{port}.log"
            except OSError:
                time.sleep(0.1)
        raise AssertionError("engine did not start")

    procs: list = []
    yield start
    for proc, log in procs:
        proc.terminate()
        proc.wait(10)
        log.close()


PROMPT = {"model": "Qwen/Qwen3-32B", "prompt": "hi there", "max_tokens": 2}


def test_lab_engine_behind_the_gate_closes_vllms_gap(gated_engine):
    url, log = gated_engine("10.99.0.0/16")  # the test client (127.0.0.1) is not in it
    assert _status(url + "/v1/completions", PROMPT) == 401
    assert _status(url + "/invocations", PROMPT) == 401  # open in vLLM, closed by the gate
    assert _status(url + "/tokenize", PROMPT) == 401
    assert _status(url + "/metrics") == 401
    assert _status(url + "/health") == 401
    assert _status(url + "/v1/completions", PROMPT, key=KEY) == 200
    assert _status(url + "/metrics", key=KEY) == 200
    assert KEY not in Path(log).read_text()


def test_lab_engine_gate_opens_health_and_metrics_to_the_open_networks(gated_engine):
    url, _ = gated_engine("127.0.0.0/8")
    assert _status(url + "/health") == 200
    assert _status(url + "/metrics") == 200
    assert _status(url + "/invocations", PROMPT) == 401


def test_lab_engine_bound_dual_stack_opens_health_to_ipv4_loopback(gated_engine):
    # As `vllm serve --host ::`: one IPv6 socket that IPv4 clients reach as ::ffff:127.0.0.1.
    url, _ = gated_engine("127.0.0.0/8,::1/128", host="::")
    assert _status(url + "/health") == 200
    assert _status(url + "/metrics") == 200
    assert _status(url + "/invocations", PROMPT) == 401
    assert _status(url.replace("127.0.0.1", "[::1]") + "/health") == 200
