"""The gate's ``/kvceph/mp-server/metrics`` (deploys/remote/engine_guard.py): the host's LMCache MP
server's /metrics, read from one fixed loopback URL, under /metrics' rule (open networks, else
the key), bounded (timeout, size), 502 when the server does not answer, never another URL."""

from __future__ import annotations

import http.server
import socket
import sys
import threading
from pathlib import Path

import pytest
from httpcall import call as http_call
from test_drain import _call as drain_call
from test_drain import _lease
from test_engine_guard import BEARER, ENV, KEY, Guard, gated_engine  # noqa: F401 (a fixture)

engine_guard = sys.modules[Guard.__module__]  # imported by test_engine_guard from deploys/remote

FIXTURE = (
    Path(__file__).resolve().parents[1] / "fixtures/mp_server/metrics-h100-served.txt"
).read_bytes()
PATH = engine_guard.MP_METRICS_PATH


def _call(guard, path, method="GET", **kw):
    """(reached the app, status, headers, body) for one request through the gate (test_drain's,
    GET unless told)."""
    return drain_call(guard, path, method=method, **kw)


@pytest.fixture
def server():
    """A stand-in for the server's HTTP port on 127.0.0.1: /metrics answers the recorded text,
    /big more than the gate takes; every path it was asked for is kept."""
    asked: list[str] = []

    class Handler(http.server.BaseHTTPRequestHandler):
        def do_GET(self):
            asked.append(self.path)
            body = (
                FIXTURE
                if self.path == "/metrics"
                else b"x" * (engine_guard.MP_METRICS_MAX_BYTES + 1)
            )
            self.send_response(200)
            self.send_header("Content-Length", str(len(body)))
            self.end_headers()
            self.wfile.write(body)

        def log_message(self, *args):
            pass

    httpd = http.server.ThreadingHTTPServer(("127.0.0.1", 0), Handler)
    threading.Thread(target=httpd.serve_forever, args=(0.05,), daemon=True).start()
    yield f"http://127.0.0.1:{httpd.server_address[1]}", asked
    httpd.shutdown()
    httpd.server_close()


def gate(url: str, **env) -> Guard:
    return Guard(None, environ={**ENV, "KVCEPH_MP_METRICS_URL": url, **env})


def test_open_networks_read_the_servers_metrics_others_need_the_key(server):
    base, asked = server
    g = gate(f"{base}/metrics")
    reached, status, headers, body = _call(g, PATH, client="10.1.2.3")
    assert (reached, status, body) == (False, 200, FIXTURE)
    assert headers[b"content-type"].startswith(b"text/plain; version=0.0.4")
    assert _call(g, PATH + "/", client="127.0.0.1")[1] == 200
    assert _call(g, PATH, client="192.0.2.7")[:2] == (False, 401)
    assert _call(g, PATH, client="192.0.2.7", headers=BEARER)[1:4:2] == (200, FIXTURE)
    assert asked == ["/metrics"] * 3  # the fixed URL only, whatever the request's path or query


def test_the_path_is_the_gates_only_where_the_url_is_set_and_loopback(server):
    base, asked = server
    for url in (None, "", "http://10.0.0.5:8090/metrics", "https://127.0.0.1:8090/metrics",
                "http://u:p@127.0.0.1:8090/metrics", "file:///etc/passwd"):  # fmt: skip
        env = {} if url is None else {"KVCEPH_MP_METRICS_URL": url}
        g = Guard(None, environ={**ENV, **env})
        # not served: from the open networks it is an ordinary (closed) route of vLLM's
        assert _call(g, PATH, client="10.1.2.3")[:2] == (False, 401), url
        assert _call(g, PATH, client="10.1.2.3", headers=BEARER)[0] is True, url
    assert engine_guard.mp_metrics_url("http://[::1]:8090/metrics")
    assert asked == []


def test_a_server_that_does_not_answer_or_answers_too_much_is_502(server, monkeypatch):
    base, _ = server
    assert _call(gate(f"{base}/big"), PATH, client="127.0.0.1")[1] == 502
    free = base.rsplit(":", 1)[0] + ":9"  # discard port: nothing listens
    status, body = _call(gate(f"{free}/metrics"), PATH, client="127.0.0.1")[1:4:2]
    assert status == 502 and body.startswith(b"LMCache MP server http://127.0.0.1:9/metrics: ")
    # a proxy in the engine's environment is not used for the loopback URL
    monkeypatch.setenv("http_proxy", "http://192.0.2.1:3128")
    assert _call(gate(f"{base}/metrics"), PATH, client="127.0.0.1")[1] == 200


def test_get_only_and_served_while_draining(server, tmp_path):
    base, _ = server
    g = gate(f"{base}/metrics", KVCEPH_DRAIN_DIR=str(tmp_path))
    assert _call(g, PATH, client="127.0.0.1", method="POST")[1] == 405
    _lease(tmp_path)
    assert _call(g, PATH, client="127.0.0.1")[1] == 200
    assert _call(g, "/v1/completions", headers=BEARER)[1] == 503
    assert g.open_requests == 0


def test_a_slow_server_is_cut_at_the_timeout():
    listener = socket.socket()
    listener.bind(("127.0.0.1", 0))
    listener.listen(1)  # accepts, never answers
    url = f"http://127.0.0.1:{listener.getsockname()[1]}/metrics"
    try:
        status, body = engine_guard.fetch_mp_metrics(url, timeout=0.3)
    finally:
        listener.close()
    assert status == 502 and body.startswith(f"LMCache MP server {url}: ".encode())


def test_the_lab_engine_behind_the_gate_serves_the_servers_metrics(server, gated_engine):  # noqa: F811
    """The gate as an engine loads it (``--middleware``, the rendered module), end to end."""
    base, asked = server
    url, _ = gated_engine("127.0.0.0/8", KVCEPH_MP_METRICS_URL=f"{base}/metrics")
    status, _, body = http_call(url + PATH, None, None, timeout=10)
    assert (status, body) == (200, FIXTURE)
    assert http_call(url + "/v1/models", None, None, timeout=10)[0] == 401  # the rest stays shut
    assert http_call(url + "/v1/models", None, KEY, timeout=10)[0] == 200
    assert asked == ["/metrics"]
