"""Facts about TLS on a host: its system trust store, and a handshake to an S3 endpoint."""

from __future__ import annotations

from pyinfra.api import FactBase

from deploys.facts.probe_output import last_json_line, probe_command

# Each OS family's own tool and where it takes extra anchors from.
TRUST_STORES = {
    "debian": {
        "anchor_dir": "/usr/local/share/ca-certificates",
        "update": "update-ca-certificates",
        "bundle": "/etc/ssl/certs/ca-certificates.crt",
    },
    "rhel": {
        "anchor_dir": "/etc/pki/ca-trust/source/anchors",
        "update": "update-ca-trust extract",
        "bundle": "/etc/pki/tls/certs/ca-bundle.crt",
    },
}


class TrustStore(FactBase):
    """
    The host's system trust store family: ``"debian"`` (``update-ca-certificates``, Debian and
    Ubuntu), ``"rhel"`` (``update-ca-trust``, RHEL, Rocky, Alma, Fedora), or None.
    """

    command = (
        "if command -v update-ca-certificates >/dev/null 2>&1; then echo debian; "
        "elif command -v update-ca-trust >/dev/null 2>&1; then echo rhel; else echo none; fi"
    )

    def process(self, output):
        word = output[0].strip() if output else "none"
        return word if word in TRUST_STORES else None


# argv: host, port, timeout. One JSON line: {"ok": bool, "problem": str|None}. Trusts what the
# system store trusts (as LMCache's awscrt does); Python 3.6 compatible.
_HANDSHAKE_SCRIPT = r"""
import json, socket, ssl, sys, tempfile
host, port, timeout = sys.argv[1], int(sys.argv[2]), float(sys.argv[3])
out = {"ok": False, "problem": None}

def names():
    # The certificate's names, read without verification (only to say what it covers).
    try:
        ctx = ssl._create_unverified_context()
        with socket.create_connection((host, port), timeout=timeout) as s:
            with ctx.wrap_socket(s, server_hostname=host) as t:
                der = t.getpeercert(binary_form=True)
        with tempfile.NamedTemporaryFile("w", suffix=".pem") as f:
            f.write(ssl.DER_cert_to_PEM_cert(der))
            f.flush()
            cert = ssl._ssl._test_decode_cert(f.name)
        return ", ".join(v for k, v in cert.get("subjectAltName", ()) if k in ("DNS", "IP Address"))
    except Exception:
        return "unknown"

try:
    with socket.create_connection((host, port), timeout=timeout) as sock:
        with ssl.create_default_context().wrap_socket(sock, server_hostname=host) as tls:
            out["ok"] = True
except ssl.SSLCertVerificationError as exc:
    code, message = exc.verify_code, exc.verify_message
    if code == 62:
        out["problem"] = ("certificate does not cover %s (it names: %s)" % (host, names()))
    elif code in (2, 18, 19, 20, 21):
        out["problem"] = ("certificate chain not trusted (%s): its CA is not in the host's "
                          "system trust store" % message)
    elif code in (9, 10):
        out["problem"] = "certificate %s" % message
    else:
        out["problem"] = "certificate rejected: %s" % message
except socket.timeout:
    out["problem"] = "no TLS handshake within %gs" % timeout
except ssl.SSLError as exc:
    out["problem"] = "TLS handshake failed (%s); is it a TLS port?" % (exc.reason or exc)
except OSError as exc:
    out["problem"] = "cannot connect: %s" % (exc.strerror or exc)
print(json.dumps(out))
""".strip()


class TlsHandshake(FactBase):
    """
    A TLS handshake from this host to ``server:port``, verified against the system trust store
    (SNI and name check on ``server``). Bounded by ``timeout`` seconds (connect, handshake).

    Returns ``{"ok": True, "problem": None}`` or ``{"ok": False, "problem": "certificate does
    not cover lmcache.s3.kvlab (it names: s3.kvlab)"}``.
    """

    def default(self):
        return {"ok": False, "problem": "no answer from the probe"}

    def command(self, python: str, server: str, port: int, timeout: int = 10):
        failed = '{"ok": false, "problem": "probe failed or timed out"}'
        args = (server, port, timeout)
        return probe_command(3 * timeout + 5, python, _HANDSHAKE_SCRIPT, args, failed)

    def process(self, output):
        answer = last_json_line(output)
        if answer is not None:
            return answer
        return {"ok": False, "problem": " ".join(output)[-300:] or "no answer from the probe"}
