"""Settings of the monitoring stage: where the operator's Prometheus and Grafana read kvceph's
files, and where the Ceph mgr's exporter answers (hosts of group ``monitoring`` only).
"""

from __future__ import annotations

import re
from dataclasses import dataclass

GROUP = "monitoring"
HOSTPORT = r"[A-Za-z0-9_.\-]+:[0-9]{1,5}|\[[0-9A-Fa-f:.]+\]:[0-9]{1,5}"


@dataclass(frozen=True)
class MonitoringSettings:
    prometheus_dir: str  # targets, rules, credentials file and the scrape jobs
    prometheus_group: str  # the group Prometheus runs as: it reads the API key file
    prometheus_service: str | None  # reloaded when the rules change; None: not reloaded
    grafana_dir: str | None  # a Grafana provisioning folder for the dashboard; None: not written
    ceph_exporters: tuple[str, ...]  # host:port of each mgr; () = the Ceph admin host's :9283
    scrape_interval: str | None  # None: the operator's global scrape_interval
    haproxy_exporters: tuple[str, ...] = ()  # host:port of each haproxy's Prometheus endpoint
    engine_down_for: str = "5m"  # KvcephEngineDown's for: longer than an engine's load


def _hostports(r, key: str, example: str) -> tuple[str, ...]:
    """A list of ``host:port`` (ports 1..65535)."""
    out = tuple(r.list(key, []))
    for e in out:
        if not isinstance(e, str) or not re.fullmatch(HOSTPORT, e):
            raise r.fail(key, e, "is not host:port", f"use e.g. '{example}'")
        if not 1 <= int(e.rsplit(":", 1)[1]) <= 65535:
            raise r.fail(key, e, "has no port 1..65535", f"use e.g. '{example}'")
    return out


def load(r) -> MonitoringSettings:
    exporters = _hostports(r, "kvceph_ceph_mgr_exporters", "ceph1:9283")
    service = r.raw("kvceph_prometheus_service", "prometheus")
    grafana = r.raw("kvceph_grafana_dashboards_dir", "/var/lib/grafana/dashboards/kvceph")
    interval = r.raw("kvceph_prometheus_scrape_interval", None)
    return MonitoringSettings(
        prometheus_dir=r.path("kvceph_prometheus_dir", "/etc/prometheus/kvceph"),
        prometheus_group=r.str(
            "kvceph_prometheus_group", "prometheus", pattern=r"[a-z_][a-z0-9_-]*"
        ),
        prometheus_service=None
        if service is None
        else r.str("kvceph_prometheus_service", service, pattern=r"[A-Za-z0-9@_.\-]+"),
        grafana_dir=None if grafana is None else r.path("kvceph_grafana_dashboards_dir", grafana),
        ceph_exporters=exporters,
        # At least 1s: a shorter one scrapes the mgr and the engines in a loop.
        scrape_interval=r.duration("kvceph_prometheus_scrape_interval", interval, 1000, "30s"),
        haproxy_exporters=_hostports(r, "kvceph_haproxy_exporters", "ceph1:8405"),
        # An engine loads in 75-252 s (measured first starts, issue 52): a drained restart of a
        # deploy is down that long; under 1m pages on every scrape hiccup.
        engine_down_for=r.duration("kvceph_alert_engine_down_for", "5m", 60_000, "5m"),
    )
