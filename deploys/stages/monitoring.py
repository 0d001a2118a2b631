"""Monitoring: scrape targets, rules and the dashboard for the operator's Prometheus and Grafana.

Runs on the hosts of group ``monitoring`` (where the operator's Prometheus runs; none: nothing
is written). Every text comes from ``deploys.monitoring`` (pure); this stage places it,
atomically, and reloads Prometheus only when a rule file changed (targets are re-read by
Prometheus itself: file-based discovery). The engines' API key goes into a file readable by
Prometheus' group only, never into a rendered config.
"""

from __future__ import annotations

from pyinfra import inventory
from pyinfra.api import deploy

from deploys.monitoring import files as rendering
from deploys.monitoring import targets
from deploys.operations import files
from deploys.settings import HostSettings
from deploys.settings.secrets import Secret


def addresses(names) -> dict[str, str]:
    """Each host's address as the inventory gives it (what pyinfra connects to)."""
    out = {}
    for name in names:
        h = inventory.get_host(name)
        out[name] = str(h.data.get("ssh_hostname") or h.name)
    return out


def options(me: HostSettings, checked) -> targets.ScrapeOptions:
    key = checked.credentials.vllm_api_key is not None
    guarded = any(h.security.guard for h in checked.hosts.values() if h.is_inference)
    return targets.ScrapeOptions(
        directory=me.monitoring.prometheus_dir,
        api_key=key and guarded,
        interval=me.monitoring.scrape_interval,
    )


@deploy("Monitoring")
def apply(me: HostSettings, checked) -> None:
    """Targets, rules, scrape jobs and the API key file; the dashboard when Grafana's folder is
    set. + me: this monitoring host's settings; + checked: preflight's result (every host)."""
    m = me.monitoring
    o = options(me, checked)
    texts = rendering.rendered(
        checked.hosts,
        addresses(checked.hosts),
        o,
        ceph_exporters=m.ceph_exporters,
        engine_down_for=m.engine_down_for,
        haproxy_exporters=m.haproxy_exporters,
    )
    reload = f"systemctl try-reload-or-restart {m.prometheus_service}"
    files.directory(name=f"Prometheus files {m.prometheus_dir}", path=m.prometheus_dir, mode="0755")
    files.directory(
        name=f"Prometheus rules {m.prometheus_dir}/rules",
        path=f"{m.prometheus_dir}/rules",
        mode="0755",
    )
    for rel, text in texts.items():
        is_rule = rel in rendering.RULES
        files.atomic_file(
            name=f"Prometheus {rel}",
            path=f"{m.prometheus_dir}/{rel}",
            content=text,
            on_change=reload if is_rule and m.prometheus_service else None,
        )
    if o.api_key:
        files.private_file(
            name=f"Engines' API key for Prometheus {m.prometheus_dir}/{targets.API_KEY_FILE}",
            path=f"{m.prometheus_dir}/{targets.API_KEY_FILE}",
            content=Secret(checked.credentials.vllm_api_key.reveal() + "\n"),
            group=m.prometheus_group,
            mode="0640",
        )
    if m.grafana_dir:
        files.directory(name=f"Grafana dashboards {m.grafana_dir}", path=m.grafana_dir, mode="0755")
        files.atomic_file(
            name=f"Grafana dashboard {m.grafana_dir}/kvceph.json",
            path=f"{m.grafana_dir}/kvceph.json",
            content=rendering.dashboard_text(checked.hosts),
        )
