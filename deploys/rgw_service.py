"""Stage 2a: the cephadm RGW service spec (plus ingress where needed) and the rgw host labels.

Which spec the cluster gets is decided here from the Ceph release, never by trial: Pacific
rejects the whole spec when it sees the concentrator keys (``RGWSpec.__init__() got an
unexpected keyword argument 'concentrator'``).
"""

from __future__ import annotations

import re
from pathlib import Path

import jinja2
import yaml
from pyinfra import host, inventory, logger
from pyinfra.api import OperationError, deploy

from deploys import ceph_cli
from deploys.facts.ceph import CephOrchStatus, CephVersions, version_key
from deploys.operations import ceph
from deploys.settings import HostSettings, RgwSettings

TEMPLATES = Path(__file__).resolve().parent.parent / "templates"
# RGW concentrators arrived upstream in Tentacle (v20.2) and downstream in IBM Storage Ceph 8.1
# (19.2.1, builds tagged "el9cp").
CONCENTRATOR_UPSTREAM = (20, 2)
CONCENTRATOR_DOWNSTREAM = (19, 2, 1)
# haproxy's health/stats port on the ingress hosts (the cephadm documentation's value).
INGRESS_MONITOR_PORT = 1967
CEPH_HOSTNAME_KEY = "kvceph_ceph_hostname"
_HOSTNAME = r"[A-Za-z0-9][A-Za-z0-9.\-]{0,252}"


class SpecError(ValueError):
    """The wanted RGW layout cannot be expressed for this cluster; one-line reason and fix."""


def concentrator_supported(version: str) -> bool:
    """Whether a Ceph version accepts the RGW ``concentrator`` spec fields."""
    key = version_key(version)
    if re.search(r"\.el\d+cp", version):  # downstream build (e.g. 19.2.1-222.el9cp)
        return key[:3] >= CONCENTRATOR_DOWNSTREAM
    return key[:2] >= CONCENTRATOR_UPSTREAM


def render(template: str, **values) -> str:
    env = jinja2.Environment(
        loader=jinja2.FileSystemLoader(TEMPLATES),
        undefined=jinja2.StrictUndefined,
        keep_trailing_newline=True,
    )
    return env.get_template(template).render(**values)


def plan_specs(rgw: RgwSettings, versions: dict | None) -> tuple[list[str], str | None]:
    """The spec texts to apply, in order, and a notice for the operator (or None).

    Raises SpecError when the settings ask for a layout this cluster cannot run.
    """
    if not versions:
        raise SpecError("cannot read the Ceph version (ceph versions); the spec depends on it")
    common = {
        "service_id": rgw.service_id,
        "count_per_host": rgw.count_per_host,
        "label": rgw.label,
        "networks": list(rgw.networks),
        "frontend_port": rgw.frontend_port,
    }
    ingress = None
    if rgw.ingress_virtual_ip:
        ingress = render(
            "rgw_ingress_spec.yaml.j2",
            backend_service=rgw.service_name,
            label=rgw.label,
            virtual_ip=rgw.ingress_virtual_ip,
            frontend_port=rgw.ingress_frontend_port,
            monitor_port=INGRESS_MONITOR_PORT,
        )
    version, release = versions["oldest"], versions["release"]
    if rgw.concentrator and concentrator_supported(version):
        spec = render(
            "rgw_spec_concentrator.yaml.j2",
            concentrator=rgw.concentrator,
            concentrator_port=rgw.concentrator_port,
            **common,
        )
        notice = None
        if ingress:
            # Both haproxys would want the same hosts; the concentrator already fronts RGW.
            notice = (
                f"kvceph: kvceph_rgw_ingress_virtual_ip {rgw.ingress_virtual_ip} is not used: "
                f"Ceph {version} fronts RGW with the {rgw.concentrator} concentrator"
            )
        return [spec], notice
    plain = render("rgw_spec.yaml.j2", **common)
    if not rgw.concentrator:
        return [plain] + ([ingress] if ingress else []), None
    if ingress is None:
        raise SpecError(
            f"kvceph_rgw_concentrator = {rgw.concentrator!r}: Ceph {version} ({release}) has no "
            "RGW concentrator (Tentacle v20.2+ or IBM Storage Ceph 8.1) and would reject the "
            "spec; fix: set kvceph_rgw_ingress_virtual_ip for an ingress service (haproxy + "
            "keepalived), or kvceph_rgw_concentrator = None"
        )
    notice = (
        f"kvceph: Ceph {version} ({release}) has no RGW concentrator: RGW gets an ingress "
        f"service on {rgw.ingress_virtual_ip} port {rgw.ingress_frontend_port} instead"
    )
    return [plain, ingress], notice


def ceph_hostname(inventory_name: str, data) -> str:
    """The host's name in the orchestrator: ``kvceph_ceph_hostname``, else its inventory name."""
    value = data.get(CEPH_HOSTNAME_KEY) or inventory_name
    if not isinstance(value, str) or not re.fullmatch(_HOSTNAME, value):
        raise OperationError(
            f"{inventory_name}: {CEPH_HOSTNAME_KEY} = {value!r}: not a host name; "
            "fix: use the name `ceph orch host ls` shows"
        )
    return value


@deploy("RGW service")
def apply(me: HostSettings, checked):
    rgw = me.rgw
    t = ceph_cli.timeouts(me.ceph)
    orch = host.get_fact(CephOrchStatus, **t) or {"available": False, "error": "no answer"}
    if rgw.managed_by == "external":
        state = orch.get("backend") if orch["available"] else orch.get("error")
        logger.warning(
            f"kvceph: RGW service skipped: kvceph_rgw_managed_by = 'external' (orchestrator: "
            f"{state}); RGW daemons, ports and labels are managed outside kvceph"
        )
        return
    if not orch["available"]:
        raise OperationError(
            f"RGW service: kvceph_rgw_managed_by = 'cephadm' but no orchestrator answers "
            f"`ceph orch status` ({orch.get('error')}); fix: enable cephadm "
            "(`ceph mgr module enable cephadm; ceph orch set backend cephadm`), or set "
            "kvceph_rgw_managed_by = 'external'"
        )
    try:
        specs, notice = plan_specs(rgw, host.get_fact(CephVersions, **t))
    except SpecError as exc:
        raise OperationError(f"RGW service: {exc}") from None
    if notice:
        logger.warning(notice)

    # Labels first: the spec's placement selects hosts by label.
    for name in sorted(n for n, h in checked.hosts.items() if "rgw" in h.groups):
        ceph_name = ceph_hostname(name, inventory.get_host(name).data)
        ceph.host_label(
            name=f"Label {ceph_name} {rgw.label}", ceph_host=ceph_name, label=rgw.label, **t
        )
    for spec in specs:
        service = yaml.safe_load(spec)["service_name"]
        ceph.service_spec(name=f"Apply the {service} spec", spec=spec, **t)
