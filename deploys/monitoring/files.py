"""Every file the monitoring stage writes, as text, from the checked inventory.

+ ``rendered(checked, addresses, options)`` -> {path relative to the Prometheus directory: text}
and ``dashboard_text(checked)``. The lab's Prometheus test renders through the same functions.
"""

from __future__ import annotations

import json
from collections.abc import Mapping

import yaml

from deploys.monitoring import dashboard, rules, savings, targets
from deploys.settings import HostSettings

MGR_EXPORTER_PORT = 9283  # the mgr prometheus module's default server_port
RULES = {
    "rules/kvceph-figures.yml": "recording",
    "rules/kvceph-alerts.yml": "alerts",
    "rules/kvceph-router.yml": "router alerts",
    "rules/kvceph-mp-server.yml": "LMCache MP server alerts",
}
SCRAPE_FILE = "scrape-configs.yml"


def group_figures(hosts: Mapping[str, HostSettings]) -> list[rules.GroupFigures]:
    """One GroupFigures per cache group, from its first host's settings (the group agrees)."""
    seen: dict[str, rules.GroupFigures] = {}
    for me in sorted((h for h in hosts.values() if h.is_inference), key=lambda h: h.host):
        name = targets.cache_group(me)
        if name not in seen:
            curve, _, _ = savings.prefill_curve(me)
            per_worker = me.lmcache.kv_bytes_per_token
            # the settings' figure is one TP worker's; a loaded token moves every worker's
            whole = per_worker * me.engine.tensor_parallel_size if per_worker else None
            seen[name] = rules.GroupFigures(name, curve.a, curve.b, whole)
    return list(seen.values())


def rgw_service(hosts: Mapping[str, HostSettings]) -> tuple[str, int] | None:
    """(service id, daemons) of the RGW service cephadm runs for kvceph; None outside cephadm."""
    admin = next((h for h in hosts.values() if h.is_ceph_admin), None)
    rgw_hosts = [h for h in hosts.values() if "rgw" in h.groups]
    if admin is None or admin.rgw.managed_by != "cephadm" or not rgw_hosts:
        return None
    return admin.rgw.service_id, len(rgw_hosts) * admin.rgw.count_per_host


def data_pool(hosts: Mapping[str, HostSettings]) -> str:
    admin = next((h for h in hosts.values() if h.is_ceph_admin and h.ceph), None)
    pools = [p.name for p in admin.ceph.pools] if admin else []
    return next((p for p in pools if p.endswith("buckets.data")), "default.rgw.buckets.data")


def _yaml(data) -> str:
    return "# Managed by kvceph (deploy.py, Monitoring stage): edits are overwritten.\n" + (
        yaml.safe_dump(data, sort_keys=False, width=1000)
    )


def _json(data) -> str:
    return json.dumps(data, indent=2, sort_keys=False) + "\n"


def rendered(
    hosts: Mapping[str, HostSettings],
    addresses: Mapping[str, str],
    options: targets.ScrapeOptions,
    ceph_exporters: tuple[str, ...] = (),
    engine_down_for: str = rules.ENGINE_DOWN_FOR,
    haproxy_exporters: tuple[str, ...] = (),
) -> dict[str, str]:
    """{path under the Prometheus directory: text}; the API key file is not among them.

    + hosts: every host's settings; + addresses: host name -> the address Prometheus uses
    + ceph_exporters: host:port of the mgr exporters (empty: the Ceph admin host's :9283)
    + engine_down_for: KvcephEngineDown's ``for``
    + haproxy_exporters: host:port of haproxy's Prometheus endpoints (empty: none scraped)
    """
    inference = [(h, addresses[h.host]) for h in hosts.values() if h.is_inference]
    mp_hosts = targets.mp_targets(inference)
    routers = [(h, addresses[h.host]) for h in hosts.values() if h.router and h.host in addresses]
    if not ceph_exporters:
        admin = [h.host for h in hosts.values() if h.is_ceph_admin]
        ceph_exporters = tuple(
            targets.hostport(addresses[a], MGR_EXPORTER_PORT) for a in admin if a in addresses
        )
    return {
        targets.ENGINES_FILE: _json(targets.engine_targets(inference)),
        targets.MP_FILE: _json(mp_hosts),
        targets.CEPH_FILE: _json(targets.ceph_targets(ceph_exporters)),
        targets.ROUTER_FILE: _json(targets.router_targets(routers)),
        targets.HAPROXY_FILE: _json(targets.haproxy_targets(haproxy_exporters)),
        "rules/kvceph-figures.yml": _yaml(
            {"groups": [rules.recording_rules(group_figures(hosts))]}
        ),
        "rules/kvceph-alerts.yml": _yaml(
            {
                "groups": [
                    rules.alert_rules(rgw_service(hosts), engine_down_for),
                    rules.cache_alerts(),
                ]
            }
        ),
        SCRAPE_FILE: _yaml({"scrape_configs": targets.scrape_configs(options)}),
        # An inventory without routers gets an empty group: no alert on a router it never had.
        "rules/kvceph-router.yml": _yaml(
            {
                "groups": [
                    rules.router_alert_rules()
                    if routers
                    else {"name": "kvceph-router-alerts", "rules": []}
                ]
            }
        ),
        # Likewise for the MP server: no MP host, no alert about one.
        "rules/kvceph-mp-server.yml": _yaml(
            {
                "groups": [
                    rules.mp_server_alerts()
                    if mp_hosts
                    else {"name": "kvceph-mp-server-alerts", "rules": []}
                ]
            }
        ),
    }


def dashboard_text(hosts: Mapping[str, HostSettings]) -> str:
    return _json(dashboard.dashboard(data_pool(hosts)))
