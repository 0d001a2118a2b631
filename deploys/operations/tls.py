"""Trust a private CA on a host, and check a TLS endpoint from it."""

from __future__ import annotations

import posixpath

from pyinfra import host
from pyinfra.api import OperationError, operation

from deploys.facts import memo
from deploys.facts.tls import TRUST_STORES, TlsHandshake, TrustStore
from deploys.operations.files import atomic_file

ANCHOR_NAME = "kvceph-s3-ca.crt"


@operation()
def ca_trusted(pem: str):
    """
    Put CA certificates into the host's system trust store with the OS's own tool.

    + pem: the CA certificate(s), PEM

    Debian/Ubuntu: ``/usr/local/share/ca-certificates/kvceph-s3-ca.crt`` then
    ``update-ca-certificates``; RHEL family: ``/etc/pki/ca-trust/source/anchors/`` then
    ``update-ca-trust extract``. Idempotent: nothing runs when the anchor is already there.
    """
    family = memo.read(host, TrustStore)
    store = next((store for name, store in TRUST_STORES.items() if family == name), None)
    if store is None:
        raise OperationError(
            "kvceph: no system trust store tool (update-ca-certificates or "
            "update-ca-trust); fix: install the ca-certificates package"
        )
    yield from atomic_file._inner(
        posixpath.join(store["anchor_dir"], ANCHOR_NAME),
        pem,
        user="root",
        group="root",
        mode="0644",
        on_change=f"timeout 120 {store['update']}",
    )


@operation()
def handshake(python: str, server: str, port: int, timeout: int = 10):
    """
    Read-only: a TLS handshake from the host to ``server:port`` with the system trust store;
    fails the host with one line (host, endpoint, certificate problem) when it does not verify.

    + python: an interpreter on the host
    + server: the name to connect to and verify (the bucket's virtual-host name)
    + port: the TLS port
    + timeout: seconds for the connection and the handshake (never a hang)

    Like ``service.ready``, the probe is a fact re-read at execution (after the CA is
    installed); while planning a failure is only noted.
    """
    probe = host.get_fact(TlsHandshake, python=python, server=server, port=port, timeout=timeout)
    if probe.get("ok"):
        host.noop(f"TLS to {server}:{port} verifies with the system trust store")
        return
    line = f"TLS to {server}:{port}: {probe.get('problem')}"
    if getattr(host.state, "is_executing", False):
        raise OperationError(
            f"kvceph: {host.name}: {line}; fix: a certificate for {server} signed by the CA in "
            "kvceph_s3_ca_bundle (docs/security.md)"
        )
    host.noop(f"checked when executing ({line} while planning)")
    yield from ()
