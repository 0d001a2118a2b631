"""The vLLM unit's wait for LMCache's server (MP mode): 200 ends it, anything else waits."""

from __future__ import annotations

import threading
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer

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
