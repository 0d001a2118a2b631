"""cephadm service specs as data: built from the settings, checked, dumped for ``orch apply``.

Pure. The RGW service stage picks which specs a cluster gets (deploys/stages/rgw_service.py);
this module says what each one holds. A spec is a plain dict in the orchestrator's own
layout (``service_type``, ``service_id``, ``placement``, ``spec``), the same shape
``ceph orch ls --export`` answers with, so the stage compares it with the cluster's directly.
"""

from __future__ import annotations

from typing import Any

import yaml

from deploys.settings.ceph import RgwSettings
from deploys.settings.ports import INGRESS_MONITOR_PORT


def rgw_spec(rgw: RgwSettings, concentrator: bool = False) -> dict[str, Any]:
    """The cephadm RGW service; with ``concentrator`` the per-host haproxy keys (Ceph Tentacle
    v20.2+, IBM Storage Ceph 8.1) that clients reach instead of ``rgw_frontend_port``.

    + rgw: the RGW settings
    + concentrator: add ``concentrator`` and ``concentrator_frontend_port``
    """
    spec: dict[str, Any] = {"rgw_frontend_port": rgw.frontend_port}
    if concentrator:
        spec["concentrator"] = rgw.concentrator
        spec["concentrator_frontend_port"] = rgw.concentrator_port
    return {
        "service_type": "rgw",
        "service_id": rgw.service_id,
        "service_name": rgw.service_name,
        "placement": {"count_per_host": rgw.count_per_host, "label": rgw.label},
        "networks": list(rgw.networks),
        "spec": spec,
    }


def ingress_spec(rgw: RgwSettings) -> dict[str, Any]:
    """cephadm's ingress (haproxy + keepalived, Pacific+) in front of the RGW service: one
    ``virtual_ip``, or with several a ``virtual_ips_list`` (cephadm makes each ingress host
    MASTER of one of them, so each rgw host's haproxy carries its share, and moves a stopped
    host's VIP to another). With a certificate, haproxy terminates TLS (its key travels beside
    the spec, added at upload time only: ``operations/ceph.py`` ``service_spec(secret_spec=...)``).

    + rgw: the RGW settings (``ingress_virtual_ips`` set)
    """
    vips = rgw.ingress_virtual_ips
    # One VIP keeps `virtual_ip`: a cluster converged before the list existed sees no change.
    where = {"virtual_ip": vips[0]} if len(vips) == 1 else {"virtual_ips_list": list(vips)}
    spec: dict[str, Any] = {
        "backend_service": rgw.service_name,
        **where,
        "frontend_port": rgw.ingress_frontend_port,
        "monitor_port": INGRESS_MONITOR_PORT,
    }
    if rgw.ingress_ssl_cert:
        spec["ssl"] = True
        spec["ssl_cert"] = rgw.ingress_ssl_cert.strip() + "\n"
    return {
        "service_type": "ingress",
        "service_id": rgw.service_name,
        "service_name": f"ingress.{rgw.service_name}",
        "placement": {"label": rgw.label},
        "spec": spec,
    }


def probe_spec(rgw: RgwSettings) -> dict[str, Any]:
    """The concentrator spec as the dry run gets it: ``placement: count: 1``.

    The question is whether the orchestrator takes the concentrator keys, not where the
    daemons go: before the first run no host has the rgw label, and a dry run of a label
    placement then answers "Error EINVAL: Cannot place ...: No matching hosts for label rgw".
    """
    return {**rgw_spec(rgw, concentrator=True), "placement": {"count": 1}}


class _Dumper(yaml.SafeDumper):
    """Multi-line strings (a certificate) as literal blocks, as an operator would write them."""


def _str(dumper: yaml.SafeDumper, value: str):
    style = "|" if "\n" in value else None
    return dumper.represent_scalar("tag:yaml.org,2002:str", value, style=style)


_Dumper.add_representer(str, _str)


def dump(spec: dict[str, Any]) -> str:
    """The spec as the YAML ``ceph orch apply -i`` reads (keys in the order built)."""
    return yaml.dump(spec, Dumper=_Dumper, sort_keys=False)
