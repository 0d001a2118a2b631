"""Scrape targets (Prometheus file-based service discovery) and the scrape jobs that read them.

Every engine of every inference host is one target with the labels the rules and the dashboard
group by: ``host``, ``engine`` (the ``kvceph_engines`` name), ``cache_group``. The
engines' API key, when the gate needs one, is a ``credentials_file`` the stage writes beside
the targets: the key never appears in a rendered file's text.
"""

from __future__ import annotations

import copy
from collections.abc import Iterable, Mapping
from dataclasses import dataclass

from deploys.engine import engine_address
from deploys.monitoring.rules import CEPH_JOB, ENGINES_JOB, HAPROXY_JOB, MP_JOB, ROUTER_JOB
from deploys.settings import HostSettings
from deploys.settings.inventory import group_key
from deploys.settings.router import metrics_port

ENGINES_FILE = "engines.json"
CEPH_FILE = "ceph-mgr.json"
ROUTER_FILE = "router.json"
HAPROXY_FILE = "haproxy.json"
MP_FILE = "mp-server.json"
# The gate's path for the host's LMCache MP server (deploys/remote/engine_guard.py)
MP_METRICS_PATH = "/kvceph/mp-server/metrics"
API_KEY_FILE = "engine-api-key"


def cache_group(me: HostSettings) -> str:
    """A cache group's label: the served model, TP and PP where not 1 (inventory.group_key:
    the namespace's fields that tell groups apart, deploys/settings/namespace.py)."""
    model, tp, pp = group_key(me)
    return f"{model} tp{tp}" + (f" pp{pp}" if pp != 1 else "")


def hostport(address: str, port: int) -> str:
    return (
        f"[{address}]:{port}"
        if ":" in address and not address.startswith("[")
        else (f"{address}:{port}")
    )


def engine_targets(hosts: Iterable[tuple[HostSettings, str]]) -> list[dict]:
    """file_sd target groups, one per engine.

    + hosts: (settings, the address Prometheus reaches the host at) of every inference host
    """
    out = []
    for me, address in sorted(hosts, key=lambda h: h[0].host):
        for engine in me.engine.engines:
            out.append(
                {
                    "targets": [hostport(address, engine.port)],
                    "labels": {
                        "host": me.host,
                        "engine": engine.name,
                        "cache_group": cache_group(me),
                        "accelerator": me.engine.accelerator,
                    },
                }
            )
    return out


def mp_targets(hosts: Iterable[tuple[HostSettings, str]]) -> list[dict]:
    """file_sd target groups, one per MP host: its first engine's port, where the gate serves the
    server's /metrics (in-process hosts, and hosts without the gate, have none).

    + hosts: (settings, the address Prometheus reaches the host at) of every inference host
    """
    out = []
    for me, address in sorted(hosts, key=lambda h: h[0].host):
        if not (me.engine.profile.mp and me.security.guard):
            continue
        first = me.engine.engines[0]
        out.append(
            {
                "targets": [hostport(address, first.port)],
                "labels": {"host": me.host, "engine": first.name, "cache_group": cache_group(me)},
            }
        )
    return out


def ceph_targets(exporters: Iterable[str]) -> list[dict]:
    """The Ceph mgr exporter(s), ``host:port`` (every mgr host: only the active one reports)."""
    exporters = list(exporters)
    return [{"targets": exporters, "labels": {}}] if exporters else []


def router_targets(hosts: Iterable[tuple[HostSettings, str]]) -> list[dict]:
    """file_sd target groups, one per route of every router host (its metrics port).

    + hosts: (settings, the address Prometheus reaches the host at) of every router host
    """
    out = []
    for me, address in sorted(hosts, key=lambda h: h[0].host):
        # the metrics listen where the route does: a named bind address, else every address
        reach = engine_address.remote(me.router.bind) or address
        for port in sorted({p for _, p in me.router.ports} or {me.router.port}):
            out.append(
                {
                    "targets": [hostport(reach, metrics_port(port))],
                    "labels": {"host": me.host, "route": str(port)},
                }
            )
    return out


def haproxy_targets(exporters: Iterable[str]) -> list[dict]:
    """haproxy's Prometheus endpoint(s), ``host:port`` (``kvceph_haproxy_exporters``)."""
    return ceph_targets(exporters)


@dataclass(frozen=True)
class ScrapeOptions:
    directory: str  # where the target files and the credentials file are on the Prometheus host
    api_key: bool  # the engines' gate wants a key for /metrics from Prometheus' address
    scheme: str = "http"
    interval: str | None = None  # None: the operator's global scrape_interval


def scrape_configs(o: ScrapeOptions) -> list[dict]:
    """The jobs for the operator's ``scrape_configs`` (or ``scrape_config_files``)."""
    engines: dict = {"job_name": ENGINES_JOB, "scheme": o.scheme, "metrics_path": "/metrics"}
    if o.interval:
        engines["scrape_interval"] = o.interval
    if o.api_key:
        engines["authorization"] = {
            "type": "Bearer",
            "credentials_file": f"{o.directory}/{API_KEY_FILE}",
        }
    engines["file_sd_configs"] = [{"files": [f"{o.directory}/{ENGINES_FILE}"]}]
    # The MP servers through the gate: the engines' scheme and key
    mp = {**copy.deepcopy(engines), "job_name": MP_JOB, "metrics_path": MP_METRICS_PATH}
    mp["file_sd_configs"] = [{"files": [f"{o.directory}/{MP_FILE}"]}]
    ceph: dict = {"job_name": CEPH_JOB, "honor_labels": True}
    if o.interval:
        ceph["scrape_interval"] = o.interval
    ceph["file_sd_configs"] = [{"files": [f"{o.directory}/{CEPH_FILE}"]}]
    out = [engines, mp, ceph]
    for job, file in ((ROUTER_JOB, ROUTER_FILE), (HAPROXY_JOB, HAPROXY_FILE)):
        extra: dict = {"job_name": job, "metrics_path": "/metrics"}
        if o.interval:
            extra["scrape_interval"] = o.interval
        extra["file_sd_configs"] = [{"files": [f"{o.directory}/{file}"]}]
        out.append(extra)
    return out


def rule_files(directory: str) -> list[str]:
    return [f"{directory}/rules/*.yml"]


def prometheus_config(o: ScrapeOptions, extra: Mapping | None = None) -> dict:
    """A whole prometheus.yml for a Prometheus that serves kvceph alone (the lab's)."""
    return {
        **(extra or {}),
        "rule_files": rule_files(o.directory),
        "scrape_configs": scrape_configs(o),
    }
