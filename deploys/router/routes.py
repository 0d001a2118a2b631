"""PURE: one route per served model, its workers every engine that serves it.

A route is one router process (vllm-router 0.1.17 serves one pool per process unless its
``--enable-igw`` mode is on, which kvceph does not use) on its own port. Its workers are the
engines of every cache group serving the model: the policy keeps a prefix on one engine, so a
repeat lands where the prefix is cached whichever group that engine belongs to; the cache
groups are listed for the operator (status.py), since S3 sharing stops at a group's edge.
"""

from __future__ import annotations

import ipaddress
from collections.abc import Iterable, Mapping
from dataclasses import dataclass

from deploys.engine import engine_address
from deploys.monitoring.targets import cache_group
from deploys.settings import HostSettings
from deploys.settings.reader import SettingsError
from deploys.settings.router import RouterSettings, metrics_port


@dataclass(frozen=True)
class Worker:
    url: str  # http://address:port, as the router reaches the engine
    host: str
    engine: str  # the kvceph_engines name
    cache_group: str


@dataclass(frozen=True)
class Route:
    model: str  # the served model name clients send
    port: int
    workers: tuple[Worker, ...]

    @property
    def unit(self) -> str:
        return f"kvceph-router@{self.port}.service"

    @property
    def cache_groups(self) -> tuple[str, ...]:
        return tuple(sorted({w.cache_group for w in self.workers}))


def engine_url(me: HostSettings, address: str, port: int) -> str:
    """Where another host reaches this engine: its bind address when it names one, else the
    host's inventory address."""
    reach = engine_address.remote(me.security.vllm_bind) or address
    return f"http://{engine_address.url_host(reach)}:{port}"


def routes(
    hosts: Mapping[str, HostSettings], addresses: Mapping[str, str], r: RouterSettings, router: str
) -> list[Route]:
    """The routes of the router host ``router``, sorted by model.

    + hosts: every host's settings (preflight's)
    + addresses: each host's inventory address
    + r: the router host's settings
    + router: its name (for the error)
    """
    by_model: dict[str, list[Worker]] = {}
    for name in sorted(hosts):
        me = hosts[name]
        if not me.is_inference:
            continue
        bind = me.security.vllm_bind
        if name != router and ipaddress.ip_address(bind).is_loopback:
            raise SettingsError(
                f"{name}: kvceph_vllm_bind = {bind!r}: its engines listen on loopback only, and "
                f"the router on {router} cannot reach them; fix: bind them to an address "
                f"{router} reaches (or 0.0.0.0), or run the router on {name}"
            )
        for engine in me.engine.engines:
            by_model.setdefault(me.engine.model, []).append(
                Worker(
                    engine_url(me, addresses[name], engine.port),
                    name,
                    engine.name,
                    cache_group(me),
                )
            )
    ports = dict(r.ports)
    if len(by_model) > 1 or ports:
        missing = sorted(set(by_model) - set(ports))
        if missing:
            raise SettingsError(
                f"{router}: kvceph_router_ports has no port for served model(s) "
                f"{', '.join(missing)}; fix: give each model its own port, e.g. "
                f"kvceph_router_ports = {{{missing[0]!r}: {r.port}}}"
            )
        unserved = sorted(set(ports) - set(by_model))
        if unserved:
            raise SettingsError(
                f"{router}: kvceph_router_ports = {{{unserved[0]!r}: {ports[unserved[0]]}}}: no "
                "engine of the inventory serves that model (the route would have no worker); "
                "fix: remove it, or name the model as kvceph_model spells it"
            )
    else:
        ports = dict.fromkeys(by_model, r.port)
    for model, workers in by_model.items():
        seen: dict[str, Worker] = {}
        for w in workers:
            if w.url in seen:
                raise SettingsError(
                    f"{w.host}: worker {w.url} of route {model!r} is also {seen[w.url].host}'s "
                    f"engine {seen[w.url].engine}: two inventory entries reach one engine (the "
                    "router would count it twice); fix: give each host its own address and "
                    "each engine its own port"
                )
            seen[w.url] = w
    return [Route(m, ports[m], tuple(by_model[m])) for m in sorted(by_model)]


def worker_urls(route: Route) -> list[str]:
    return [w.url for w in route.workers]


# The router's retry backoff (vllm-router's defaults: 50 ms x 1.5^n, 5 tries, ~0.7 s in all).
# HEALTH_TIMEOUT: seconds one health check of an engine may take.
HEALTH_TIMEOUT = 2
RETRY_FIRST_MS, RETRY_FACTOR, RETRY_MAX_MS = 100, 1.5, 1000


def retries(r: RouterSettings) -> int:
    """Tries whose backoff outlasts the health bound: a request the router sent to an engine
    that just began to drain (503) or restart (refused) is retried until the health checks
    have taken that engine out of the pool, and then lands on another one (docs/router.md
    "Drain"). The bound: ``health_failures + 1`` checks (the first may come a whole interval
    after the drain began), each an interval plus as long as a check may take
    (``HEALTH_TIMEOUT``: the router's checker falls behind on a loaded host; the lab's roll
    through the router lost 3 of ~800 streams to 503s with a bound of intervals only), and two
    seconds of margin. It costs only the requests sent in that window some latency."""
    bound_ms = ((r.health_failures + 1) * (r.health_interval + HEALTH_TIMEOUT) + 2) * 1000
    total, wait, tries = 0.0, float(RETRY_FIRST_MS), 1
    while total < bound_ms:
        total += min(wait, RETRY_MAX_MS)
        wait *= RETRY_FACTOR
        tries += 1
    return tries


def config(route: Route, r: RouterSettings) -> dict:
    """The launcher's configuration (deploys/remote/router_launch.py): no secret in it."""
    return {
        "host": r.bind,
        "port": route.port,
        "worker_urls": worker_urls(route),
        "policy": r.policy,
        "health_check_interval_secs": r.health_interval,
        "health_failure_threshold": r.health_failures,
        "health_success_threshold": 1,
        "health_check_timeout_secs": HEALTH_TIMEOUT,
        "health_check_endpoint": "/health",
        "retry_max_retries": retries(r),
        "retry_initial_backoff_ms": RETRY_FIRST_MS,
        "retry_backoff_multiplier": RETRY_FACTOR,
        "retry_max_backoff_ms": RETRY_MAX_MS,
        # At start the router does not listen until an engine is healthy, and exits after
        # this long without one (a restart loop while the engines start with it): it waits
        # as long as the deploy waits for an engine (the health checks bring in the rest).
        "worker_startup_timeout_secs": 600,
        "worker_startup_check_interval": 1,
        # The health checks take a draining engine out, and back after one success. The
        # circuit breaker (10 failures: out for 60 s) counted the retried 503s of a drain and
        # kept the engine out long after it was back: the next engine's drain then had no
        # engine left, and its clients got 503s (test_19's lost streams; docs/router.md).
        "disable_circuit_breaker": True,
        # Metrics of each route on its own port beside it (port + 1000), on the router's
        # address: Prometheus scrapes them (deploys/monitoring/targets.router_targets).
        "prometheus_host": r.bind,
        "prometheus_port": metrics_port(route.port),
    }


def api_key_validation_urls(route: Route) -> list[str]:
    """Where the router checks a client's key before any route (admin ones included): the
    engines' own ``/v1/models``, which answer 200 only to the key (any one that is up)."""
    return [f"{u}/v1/models" for u in worker_urls(route)]


def addresses_of(names: Iterable[str], lookup) -> dict[str, str]:
    return {n: lookup(n) for n in names}
