"""Settings of the router stage: the cache-aware router in front of the engines (hosts of group
``router`` only; docs/router.md).
"""

from __future__ import annotations

from dataclasses import dataclass

GROUP = "router"
# The policies that keep a prefix on one engine (cache_aware: longest cached prefix, else the
# least loaded; consistent_hash: a hash of the request's session/user/text) and round_robin,
# the baseline bench/router.py compares against.
POLICIES = ("cache_aware", "consistent_hash", "round_robin")
VERSION = "0.1.17"


METRICS_OFFSET = 1000  # a route's metrics port is its port + this (kvceph_router_port < 64536)


def metrics_port(port: int) -> int:
    """Where the route on ``port`` serves its Prometheus metrics."""
    return port + METRICS_OFFSET


@dataclass(frozen=True)
class RouterSettings:
    port: int  # the route of the only served model; more models: ``ports``
    ports: tuple[tuple[str, int], ...]  # served model -> port, when the fleet serves several
    bind: str  # the address the router listens on
    policy: str
    wheelhouse: str | None  # a directory of wheels on the controller (the host has no index)
    index_url: str | None  # else pip's index (or the host's configured one)
    venv: str
    health_interval: int  # seconds between the router's /health checks of each engine
    health_failures: int  # failed checks before an engine leaves the pool


def load(r) -> RouterSettings:
    ports = r.raw("kvceph_router_ports", {}) or {}
    if not isinstance(ports, dict) or not all(
        isinstance(k, str) and isinstance(v, int) and 1024 <= v <= 64535 for k, v in ports.items()
    ):
        raise r.fail(
            "kvceph_router_ports",
            ports,
            "is not a mapping of served model to port",
            "use e.g. {'Qwen/Qwen3-32B': 8100, 'Qwen/Qwen3-8B': 8101}",
        )
    for model in ports:
        if not model.strip() or any(ord(c) < 32 or c == "\x7f" for c in model):
            raise r.fail(
                "kvceph_router_ports", model, "is not a served model's name (one line)",
                "use the model name the engines serve, e.g. 'Qwen/Qwen3-32B'",
            )  # fmt: skip
    if len(set(ports.values())) != len(ports):
        raise r.fail("kvceph_router_ports", ports, "gives two models one port", "use one port each")
    policy = r.str("kvceph_router_policy", "cache_aware")
    if policy not in POLICIES:
        raise r.fail(
            "kvceph_router_policy",
            policy,
            "is not a policy kvceph deploys",
            f"use one of {', '.join(POLICIES)}",
        )
    return RouterSettings(
        port=r.int("kvceph_router_port", 8100, lo=1024, hi=64535),
        ports=tuple(sorted(ports.items())),
        bind=r.ip(
            "kvceph_router_bind", r.str("kvceph_router_bind", "0.0.0.0"), "e.g. 0.0.0.0 or ::"
        ),
        policy=policy,
        wheelhouse=r.opt_str("kvceph_router_wheelhouse"),
        index_url=r.url("kvceph_router_index_url"),
        venv=r.path("kvceph_router_venv", "/opt/kvceph/router"),
        health_interval=r.int("kvceph_router_health_interval", 1, lo=1, hi=60),
        health_failures=r.int("kvceph_router_health_failures", 2, lo=1, hi=10),
    )
