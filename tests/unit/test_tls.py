"""TLS to RGW with a private CA: the CA bundle setting, and the handshake check that names the
certificate problem in one line, within its timeout (real TLS, on 127.0.0.1)."""

from __future__ import annotations

import json
import socket
import ssl
import subprocess
import sys
import threading
import time
from pathlib import Path

import pytest

from deploys import settings as s
from deploys.facts.tls import _HANDSHAKE_SCRIPT
from deploys.settings.reader import SettingsError

REPO = Path(__file__).resolve().parents[2]
MAKE_CERT = REPO / "lab" / "tls" / "make-cert.sh"
BASE = {"kvceph_s3_endpoint_ip": "10.0.0.5"}


def load(**data):
    return s.load({**BASE, **data}, "gpu1", ["gpu"])


@pytest.fixture(scope="module")
def pki(tmp_path_factory):
    """A lab CA with a wildcard certificate, one without the bucket's name, and another CA."""
    root = tmp_path_factory.mktemp("pki")
    good, other = root / "good", root / "other"
    run = ["bash", str(MAKE_CERT)]
    subprocess.run([*run, str(good), "s3", "DNS:s3.kvlab", "DNS:*.s3.kvlab", "IP:127.0.0.1"],
                   check=True)  # fmt: skip
    subprocess.run([*run, str(good), "nosan", "DNS:s3.kvlab"], check=True)
    subprocess.run([*run, str(other), "s3", "DNS:*.s3.kvlab"], check=True)
    return {"good": good, "other": other}


# --- the setting -------------------------------------------------------------------------------


def test_ca_bundle_is_read_and_normalised(pki):
    me = load(kvceph_s3_endpoint="https://s3.cephlab.com:443", kvceph_s3_ca_bundle=str(
        pki["good"] / "ca.pem"))  # fmt: skip
    assert me.security.s3_ca_pem.startswith("-----BEGIN CERTIFICATE-----\n")
    assert me.security.s3_ca_pem.count("BEGIN CERTIFICATE") == 1
    assert me.s3.disable_tls is False


@pytest.mark.parametrize(
    ("content", "problem"),
    [
        (None, "cannot be read"),
        ("not a certificate\n", "has no PEM certificate"),
        ("KEY", "holds a private key"),
        # A well-formed block of garbage base64 (Python's decoder is lenient; OpenSSL is not).
        (
            "-----BEGIN CERTIFICATE-----\nMIIB=QUJD==QUJDQUJD====QUJD\n-----END CERTIFICATE-----\n",
            "holds a broken PEM certificate",
        ),
        ("BAD_DER", "holds a broken PEM certificate"),
    ],
)
def test_bad_ca_bundle_is_refused_in_one_line(pki, tmp_path, content, problem):
    path = tmp_path / "bundle.pem"
    if content == "BAD_DER":
        # Valid base64 of bytes that are no certificate.
        path.write_text(
            "-----BEGIN CERTIFICATE-----\n" + "QUJD" * 16 + "\n-----END CERTIFICATE-----\n"
        )
    elif content == "KEY":
        path.write_text((pki["good"] / "ca.pem").read_text() + (pki["good"] / "ca.key").read_text())
    elif content is not None:
        path.write_text(content)
    with pytest.raises(SettingsError) as e:
        load(kvceph_s3_ca_bundle=str(path))
    assert str(e.value).startswith(f"gpu1: kvceph_s3_ca_bundle = '{path}': {problem}")
    assert "\n" not in str(e.value) and "PRIVATE" not in str(e.value).split(":", 2)[2][:40]


def test_disable_tls_follows_the_scheme():
    assert load().s3.disable_tls is False
    plain = load(kvceph_s3_endpoint="http://s3.cephlab.com:80", kvceph_lab=True)
    assert plain.s3.disable_tls is True


def test_plain_http_is_refused_outside_a_lab():
    with pytest.raises(SettingsError, match=r"^gpu1: kvceph_s3_endpoint = 'http://s3.cephlab.com"
                       r":80': is plain HTTP: .*fix: use https://"):  # fmt: skip
        load(kvceph_s3_endpoint="http://s3.cephlab.com:80")


# --- the handshake check, against a real TLS server ------------------------------------------


class Server:
    """A TLS (or silent) server on 127.0.0.1 that completes handshakes and closes."""

    def __init__(self, cert: Path | None):
        self.sock = socket.socket()
        self.sock.bind(("127.0.0.1", 0))
        self.sock.listen(8)
        self.port = self.sock.getsockname()[1]
        self.ctx = None
        if cert is not None:
            self.ctx = ssl.SSLContext(ssl.PROTOCOL_TLS_SERVER)
            self.ctx.load_cert_chain(str(cert))
        threading.Thread(target=self._serve, daemon=True).start()

    def _serve(self):
        held = []
        while True:
            try:
                conn, _ = self.sock.accept()
            except OSError:
                return
            if self.ctx is None:
                held.append(conn)  # accepts, never speaks: a hung peer
                continue
            try:
                with self.ctx.wrap_socket(conn, server_side=True) as tls:
                    tls.recv(1)
            except (OSError, ssl.SSLError):
                pass

    def close(self):
        self.sock.close()


def probe(port: int, ca: Path, host: str = "lmcache.s3.kvlab", timeout: float = 2) -> tuple:
    # The check runs with the host's system store; SSL_CERT_FILE stands in for it here.
    # The name resolves through /etc/hosts on inference hosts; here it is sent to 127.0.0.1
    # by connecting to the address and verifying the name.
    script = _HANDSHAKE_SCRIPT.replace(
        "socket.create_connection((host, port)", "socket.create_connection(('127.0.0.1', port)"
    )
    started = time.monotonic()
    proc = subprocess.run(
        [sys.executable, "-c", script, host, str(port), str(timeout)],
        capture_output=True,
        text=True,
        timeout=30,
        env={"SSL_CERT_FILE": str(ca), "PATH": "/usr/bin:/bin"},
    )
    return json.loads(proc.stdout.strip().splitlines()[-1]), time.monotonic() - started


@pytest.fixture
def server():
    servers = []

    def start(cert):
        servers.append(Server(cert))
        return servers[-1]

    yield start
    for srv in servers:
        srv.close()


def test_handshake_verifies_with_the_private_ca(pki, server):
    srv = server(pki["good"] / "s3.pem")
    assert probe(srv.port, pki["good"] / "ca.pem")[0] == {"ok": True, "problem": None}


def test_a_ca_that_does_not_match_is_named(pki, server):
    srv = server(pki["good"] / "s3.pem")
    result, _ = probe(srv.port, pki["other"] / "ca.pem")
    assert result["ok"] is False
    assert result["problem"].startswith("certificate chain not trusted"), result


def test_a_missing_san_is_named_with_what_the_certificate_covers(pki, server):
    srv = server(pki["good"] / "nosan.pem")
    result, _ = probe(srv.port, pki["good"] / "ca.pem")
    assert result == {
        "ok": False,
        "problem": "certificate does not cover lmcache.s3.kvlab (it names: s3.kvlab)",
    }


def test_a_silent_peer_is_reported_within_the_timeout(server, pki):
    srv = server(None)
    result, took = probe(srv.port, pki["good"] / "ca.pem", timeout=1)
    assert result == {"ok": False, "problem": "no TLS handshake within 1s"}
    assert took < 10


def test_plain_http_port_is_not_mistaken_for_tls(pki):
    import http.server

    httpd = http.server.HTTPServer(("127.0.0.1", 0), http.server.BaseHTTPRequestHandler)
    threading.Thread(target=httpd.serve_forever, daemon=True).start()
    try:
        result, _ = probe(httpd.server_port, pki["good"] / "ca.pem")
    finally:
        httpd.shutdown()
    assert result["ok"] is False and "TLS handshake failed" in result["problem"], result
