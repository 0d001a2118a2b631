"""status.py's router rows (deploys/status/router.py) from the real router's answers as the
RouterAnswers fact reads them (tests/facts/status.RouterAnswers, recorded on the lab)."""

from __future__ import annotations

import json
from pathlib import Path

from deploys.status import router as status_router

FACTS = Path(__file__).resolve().parents[1] / "facts" / "status.RouterAnswers"


def row(case: str, missing=()) -> dict:
    """A status row built from a recorded answer as status_router.read builds it."""
    fact = json.loads((FACTS / f"{case}.json").read_text())["fact"]
    return {
        "host": "ceph1",
        "model": "Qwen/Qwen3-32B",
        "port": 8100,
        "readiness": fact["readiness"],
        "error": fact["error"],
        "workers": [
            {"url": w["url"], "healthy": w["healthy"], "engine": w["url"].split("//")[1]}
            for w in fact["workers"] or []
        ],
        "missing": list(missing),
    }


def test_a_healthy_route_is_one_line_and_no_problem():
    r = row("three-engines-healthy")
    assert status_router.lines([r]) == [
        "ROUTER ceph1:8100 Qwen/Qwen3-32B: ready, 3/3 engines in the pool"
    ]
    assert status_router.problems([r]) == []


def test_an_engine_out_of_the_pool_is_named_under_its_route():
    r = row("gpu2-stopped")
    head, out = status_router.lines([r])
    assert head == "ROUTER ceph1:8100 Qwen/Qwen3-32B: ready, 2/3 engines in the pool"
    assert out.startswith("  out of the pool: ") and out.endswith("(its /health fails)")
    assert status_router.problems([r]) == []


def test_a_router_that_does_not_answer_makes_the_run_partial():
    r = row("router-stopped")
    (line,) = status_router.lines([r])
    assert line.startswith("ROUTER ceph1:8100 Qwen/Qwen3-32B: NOT READY (readiness None; ")
    assert "Connection refused" in line
    (problem,) = status_router.problems([r])
    assert problem.startswith("router ceph1:8100: URLError")


def test_a_key_file_the_probe_cannot_read_is_a_401_and_a_partial_run():
    r = row("key-file-missing")
    (line,) = status_router.lines([r])
    assert line == "ROUTER ceph1:8100 Qwen/Qwen3-32B: NOT READY (readiness 401; /workers: HTTP 401)"
    assert status_router.problems([r]) == ["router ceph1:8100: /workers: HTTP 401"]


def test_the_probe_asks_where_the_router_listens_not_always_loopback(tmp_path):
    # A router bound to one address (kvceph_router_bind = 127.0.0.2 here) does not answer on
    # 127.0.0.1: the probe must ask at the bind address.
    import http.server
    import subprocess
    import threading

    from deploys.facts.status import RouterAnswers

    class Handler(http.server.BaseHTTPRequestHandler):
        def do_GET(self):
            body = b"[]" if self.path == "/workers" else b"ok"
            self.send_response(200)
            self.end_headers()
            self.wfile.write(body)

        def log_message(self, *_):
            pass

    try:
        server = http.server.ThreadingHTTPServer(("127.0.0.2", 0), Handler)
    except OSError:
        import pytest

        pytest.skip("no 127.0.0.2 on this host")
    threading.Thread(target=server.serve_forever, daemon=True).start()
    port = server.server_address[1]
    try:
        fact = RouterAnswers()
        for address, readiness in (("127.0.0.2", 200), ("127.0.0.1", None)):
            line = fact.command("python3", port, timeout=2, address=address).get_raw_value()
            out = subprocess.run(["sh", "-c", line], capture_output=True, text=True, timeout=30)
            assert fact.process(out.stdout.splitlines())["readiness"] == readiness
    finally:
        server.shutdown()
