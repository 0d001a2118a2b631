"""Scrape targets (Prometheus file-based service discovery) and the scrape jobs that read them.

Every engine of every inference host is one target with the labels the rules and the dashboard
group by: ``host``, ``engine`` (the ``kvceph_engines`` name), ``cache_group``. The
engines' API key, when the gate needs one, is a ``credentials_file`` the stage writes beside
the targets: the key never appears in a rendered file's text.
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping
from dataclasses import dataclass

from deploys.monitoring.rules import CEPH_JOB, ENGINES_JOB, ROUTERS_JOB
from deploys.settings import HostSettings
from deploys.settings.inventory import group_key
from deploys.settings.ports import ROUTE_METRICS_OFFSET

ENGINES_FILE = "engines.json"
CEPH_FILE = "ceph-mgr.json"
ROUTERS_FILE = "routers.json"
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


def router_targets(routes: Iterable[tuple[str, str, int]]) -> list[dict]:
    """file_sd target groups, one per route of each router host: its metrics port.

    + routes: (router host, the address Prometheus reaches it at, the route's metrics port)
    """
    return [
        {
            "targets": [hostport(address, port)],
            "labels": {"host": host, "route": str(port - ROUTE_METRICS_OFFSET)},
        }
        for host, address, port in sorted(routes)
    ]


def ceph_targets(exporters: Iterable[str]) -> list[dict]:
    """The Ceph mgr exporter(s), ``host:port`` (every mgr host: only the active one answers)."""
    exporters = list(exporters)
    return [{"targets": exporters, "labels": {}}] if exporters else []


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
    ceph: dict = {"job_name": CEPH_JOB, "honor_labels": True}
    if o.interval:
        ceph["scrape_interval"] = o.interval
    ceph["file_sd_configs"] = [{"files": [f"{o.directory}/{CEPH_FILE}"]}]
    routers: dict = {"job_name": ROUTERS_JOB}
    if o.interval:
        routers["scrape_interval"] = o.interval
    routers["file_sd_configs"] = [{"files": [f"{o.directory}/{ROUTERS_FILE}"]}]
    return [engines, ceph, routers]


def rule_files(directory: str) -> list[str]:
    return [f"{directory}/rules/*.yml"]


def prometheus_config(o: ScrapeOptions, extra: Mapping | None = None) -> dict:
    """A whole prometheus.yml for a Prometheus that serves kvceph alone (the lab's)."""
    return {
        **(extra or {}),
        "rule_files": rule_files(o.directory),
        "scrape_configs": scrape_configs(o),
    }
