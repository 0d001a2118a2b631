"""S3 tier: RGW reachability before any S3 write (a local HTTP server; the @fake deploy)."""

from __future__ import annotations

import http.server
import socket
import subprocess
import sys
import threading

import pytest
from fake_deploy import _commands
from fake_deploy import run as _run

from deploys.facts.rgw import HTTP_PROBE, RgwReachable
from deploys.operations import s3

HAPROXY_503 = (
    b"<html><body><h1>503 Service Unavailable</h1>\n"
    b"No server is available to handle this request.\n</body></html>\n"
)
RGW_LIST = (
    b'<?xml version="1.0" encoding="UTF-8"?><ListAllMyBucketsResult>'
    b"<Owner><ID>anonymous</ID></Owner><Buckets></Buckets></ListAllMyBucketsResult>"
)
RGW_ERROR = b'<?xml version="1.0" encoding="UTF-8"?><Error><Code>SlowDown</Code></Error>'


def _server(status: int, body: bytes):
    class Handler(http.server.BaseHTTPRequestHandler):
        def do_GET(self):  # noqa: N802
            self.send_response(status)
            self.send_header("Content-Length", str(len(body)))
            self.end_headers()
            self.wfile.write(body)

        def log_message(self, *args):
            pass

    srv = http.server.HTTPServer(("127.0.0.1", 0), Handler)
    threading.Thread(target=srv.serve_forever, daemon=True).start()
    return srv


def _probe(url: str, tries: int = 2) -> list[str]:
    proc = subprocess.run(
        [sys.executable, "-c", HTTP_PROBE, url, "2", str(tries), "0"],
        capture_output=True,
        text=True,
        timeout=30,
    )
    assert proc.returncode == 0, proc.stderr
    return RgwReachable().process(proc.stdout.splitlines())


@pytest.mark.parametrize(
    ("status", "body", "reachable"),
    [(200, RGW_LIST, True), (403, b"", True), (503, RGW_ERROR, True), (503, HAPROXY_503, False)],
)
def test_probe_counts_any_rgw_answer_but_not_a_proxy_page(status, body, reachable):
    srv = _server(status, body)
    try:
        probe = _probe(f"http://127.0.0.1:{srv.server_port}/")
    finally:
        srv.shutdown()
    assert probe["reachable"] is reachable
    if reachable:
        assert probe == {"reachable": True, "status": status, "attempts": []}
    else:
        assert probe["attempts"] == [
            f"try {i}/2: HTTP 503 from a proxy, not RGW: 503 Service Unavailable No server is "
            "available to handle this request."
            for i in (1, 2)
        ]


def test_probe_reports_connection_refused_each_try():
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        port = s.getsockname()[1]  # closed again: nothing listens there
    probe = _probe(f"http://127.0.0.1:{port}/", tries=3)
    assert probe["reachable"] is False
    assert len(probe["attempts"]) == 3
    assert all("Connection refused" in a for a in probe["attempts"])


def test_probe_command_is_bounded_and_never_fails():
    cmd = str(RgwReachable().command("http://127.0.0.1:80", timeout=5, tries=3, delay=2))
    assert cmd.startswith("timeout 26 python3 -c ")
    assert cmd.endswith("http://127.0.0.1:80 5 3 2 2>&1 || echo kvceph-probe-failed=$?")


def test_probe_killed_by_its_timeout_reads_as_unreachable():
    probe = RgwReachable().process(["try 1/3: timed out", "kvceph-probe-failed=124"])
    assert probe == {
        "reachable": False,
        "status": None,
        "attempts": ["try 1/3: timed out", "probe timed out"],
    }
    assert RgwReachable().process(["/bin/sh: python3: not found", "kvceph-probe-failed=127"])[
        "attempts"
    ] == ["probe failed (exit 127): /bin/sh: python3: not found"]


def test_unreachable_message_is_one_line_naming_endpoint_and_host():
    probe = {"reachable": False, "status": None, "attempts": ["try 3/3: [Errno 111] refused"]}
    message = s3.unreachable_message("http://127.0.0.1:80", "ceph1", probe)
    assert message == (
        "S3 tier: cannot reach RGW at http://127.0.0.1:80 from ceph1: [Errno 111] refused; "
        "fix: start RGW / check the endpoint"
    )
    assert s3.unreachable_message("http://x", "h", {"reachable": True, "status": 200}) is None


RGW_DOWN_LINE = (
    "S3 tier: cannot reach RGW at http://127.0.0.1:80 from @fake/ceph1: HTTP 503 from a proxy, "
    "not RGW: 503 Service Unavailable No server is available to handle this request.; "
    "fix: on @fake/ceph1 `ceph orch ps --service_name rgw.standard` name the daemons not "
    "running: `ceph orch daemon start <name>` for each, then run again"
)


def test_rgw_down_dry_run_stops_with_one_line():
    rc, out = _run("tests/inventories/fake_rgw_down.py", "--dry")
    assert rc != 0
    errors = [line for line in out.splitlines() if line.startswith("--> ") and "error" in line]
    assert len(errors) == 1 and errors[0].endswith(RGW_DOWN_LINE), errors
    assert out.count("S3 tier: RGW at http://127.0.0.1:80 from @fake/ceph1: try ") == 3


def test_rgw_down_while_the_run_deploys_rgw_plans_and_checks_at_execution():
    # Fresh cluster: the RGW spec is applied by this run, so planning cannot expect an answer.
    rc, out = _run("tests/inventories/fake_rgw_down.py", "--dry", env={"KVCEPH_FAKE_FRESH": "1"})
    assert rc == 0, out[-2000:]
    assert "RGW service | Apply the rgw.standard spec" in out


def test_rgw_down_executed_stops_before_any_s3_write():
    # -y on a fresh cluster: ops run at execution time; the probe must fail before the first
    # S3 tier write (rgw_dns_name, s3admin.py, files) and before any engine is touched.
    rc, out = _run(
        "tests/inventories/fake_rgw_down.py",
        "-y",
        "-vvv",
        "--debug",
        env={"KVCEPH_FAKE_FRESH": "1"},
    )
    assert rc != 0
    assert RGW_DOWN_LINE in out
    commands = [cmd for _, cmd in _commands(out)]
    assert any("osd pool create" in c for c in commands)  # the earlier stage did run
    # Reading the running engine is allowed (the upgrade check reads it while the vLLM stage is
    # prepared: ServiceDrift, `systemctl show` + hashes); changing anything is not.
    commands = [c for c in commands if not c.startswith("timeout 20 systemctl show")]
    for write in ("config set client.rgw", "s3admin", "/usr/local/lib/kvceph", "systemctl"):
        assert [c for c in commands if write in c] == [], write
    probe = next(i for i, c in enumerate(commands) if "urllib.request" in c)
    # The run applied the RGW spec first: the probe gives cephadm time to start RGW.
    assert "http://127.0.0.1:80 5 20 2 2>&1" in commands[probe]
    assert probe == len(commands) - 1 or all("radosgw-admin" in c for c in commands[probe + 1 :])


def test_unreachable_behind_cephadm_ingress_names_the_ingress_daemons_to_start():
    from deploys import settings
    from deploys.stages import s3_tier

    me = settings.load(
        {"kvceph_s3_endpoint_ip": "10.0.0.5", "kvceph_rgw_ingress_virtual_ip": "10.0.0.100/24"},
        "ceph1",
        ["ceph_admin", "rgw"],
    )
    probe = {"reachable": False, "status": None, "attempts": ["try 3/3: [Errno 111] refused"]}
    line = s3.unreachable_message(
        "https://10.0.0.100:443", "ceph1", probe, s3_tier.unreachable_fix(me)
    )
    assert line == (
        "S3 tier: cannot reach RGW at https://10.0.0.100:443 from ceph1: [Errno 111] refused; "
        "fix: on ceph1 `ceph orch ps --service_name rgw.standard` and `ceph orch ps "
        "--service_name ingress.rgw.standard` (haproxy, keepalived) name the daemons not "
        "running: `ceph orch daemon start <name>` for each, then run again"
    )
