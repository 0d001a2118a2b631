"""The vLLM unit's wait for LMCache's server (MP mode): 200 ends it, anything else waits."""

from __future__ import annotations

import json
import threading
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path

from kvceph_connector import healthcheck


def _server(codes: list[int]):
    """A loopback server answering /healthcheck with codes[0], codes[1], ... (then the last)."""

    class Handler(BaseHTTPRequestHandler):
        def log_message(self, *args):
            pass

        def do_GET(self):
            code = codes.pop(0) if len(codes) > 1 else codes[0]
            self.send_response(code)
            self.send_header("Content-Length", "0")
            self.end_headers()

    server = ThreadingHTTPServer(("127.0.0.1", 0), Handler)
    threading.Thread(target=server.serve_forever, daemon=True).start()
    return server, f"http://127.0.0.1:{server.server_address[1]}/healthcheck"


def test_waits_through_503_until_200():
    server, url = _server([503, 503, 200])
    try:
        assert healthcheck.main([url, "10"]) == 0
    finally:
        server.shutdown()


def test_gives_up_after_the_seconds_given(capsys):
    server, url = _server([503])
    try:
        assert healthcheck.main([url, "0.5"]) == 1
    finally:
        server.shutdown()
    assert "did not answer 200 within 0.5 s" in capsys.readouterr().err


def test_nothing_listening_is_not_healthy_and_bad_usage_is_2():
    assert not healthcheck.healthy("http://127.0.0.1:9/healthcheck", timeout_s=0.5)
    assert healthcheck.main(["only-one"]) == 2


STATUS = json.loads((Path(__file__).parent / "fixtures/lmcache-0.5.6-status.json").read_text())


def _lmcache(statuses: list[dict]):
    """A loopback LMCache stand-in: /healthcheck 200, /status the next of ``statuses``."""

    class Handler(BaseHTTPRequestHandler):
        def log_message(self, *args):
            pass

        def do_GET(self):
            body = b""
            if self.path == "/status":
                body = json.dumps(statuses.pop(0) if len(statuses) > 1 else statuses[0]).encode()
            self.send_response(200)
            self.send_header("Content-Length", str(len(body)))
            self.end_headers()
            self.wfile.write(body)

    server = ThreadingHTTPServer(("127.0.0.1", 0), Handler)
    threading.Thread(target=server.serve_forever, daemon=True).start()
    return server, f"http://127.0.0.1:{server.server_address[1]}/healthcheck"


def test_waits_until_the_dead_engines_workers_are_reaped():
    reaped = {**STATUS, "registered_gpu_ids": [], "cache_context_meta": {}}
    server, url = _lmcache([STATUS, STATUS, reaped])
    try:
        assert healthcheck.registered(healthcheck.status_url(url)) == 2
        assert healthcheck.main([url, "10", "0"]) == 0
    finally:
        server.shutdown()


def test_the_other_engines_workers_do_not_hold_it_up():
    server, url = _lmcache([STATUS])
    try:
        assert healthcheck.main([url, "10", "2"]) == 0  # TP 2 x one other engine
    finally:
        server.shutdown()


def test_a_held_pool_gives_up_in_one_line_naming_the_fix(capsys):
    server, url = _lmcache([STATUS])
    try:
        assert healthcheck.main([url, "0.5", "0"]) == 1
    finally:
        server.shutdown()
    err = capsys.readouterr().err
    assert "still holds 2 GPU workers after 0.5 s" in err and "fix: systemctl restart" in err
    assert err.count("\n") == 1


def test_a_status_without_registrations_is_nothing_to_wait_for():
    server, url = _lmcache([{"is_healthy": True}])
    try:
        assert healthcheck.main([url, "10", "0"]) == 0
    finally:
        server.shutdown()
