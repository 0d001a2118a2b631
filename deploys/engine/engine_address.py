"""PURE: where kvceph's own checks reach an engine, from ``kvceph_vllm_bind``.

The deploy's health wait, drain and readiness check, and status.py, run on the engine's host;
verify.py runs on the controller. A wildcard bind (``0.0.0.0``, ``::``) is reached on loopback
of its family (``::`` is dual-stack on Linux, but ``::1`` answers also where
``net.ipv6.bindv6only`` = 1); any other bind only on its own address (``::1``, a data-plane
address).
"""

from __future__ import annotations

import ipaddress


def local(bind: str) -> str:
    """The address a process on the engine's host connects to."""
    ip = ipaddress.ip_address(bind)
    if ip.is_unspecified:
        return "::1" if ip.version == 6 else "127.0.0.1"
    return ip.compressed


def url_host(address: str) -> str:
    """``address`` as a URL's host part: an IPv6 literal in brackets."""
    return f"[{address}]" if ":" in address else address


def local_url(bind: str, port: int) -> str:
    """``http://<address>:<port>`` of the engine as its own host reaches it."""
    return f"http://{url_host(local(bind))}:{port}"


def own_network(bind: str) -> str | None:
    """The bind address as a one-address network when the engine listens on one address that
    is not loopback: a local client's source is then that address (the kernel picks the
    destination's own), so the gate must count it as loopback for kvceph's checks to read
    /health and /metrics without the API key. None for a wildcard or loopback bind."""
    ip = ipaddress.ip_address(bind)
    if ip.is_unspecified or ip.is_loopback:
        return None
    return f"{ip.compressed}/{ip.max_prefixlen}"


def remote(bind: str) -> str | None:
    """The address the controller reaches the engine at when the bind names one (a
    data-plane address); None for a wildcard (the host's inventory address serves) or
    loopback (not reachable from elsewhere)."""
    ip = ipaddress.ip_address(bind)
    if ip.is_unspecified or ip.is_loopback:
        return None
    return ip.compressed
