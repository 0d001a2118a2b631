"""Stage 2a: the cephadm RGW service spec (plus ingress where needed) and the rgw host labels.

Whether the cluster takes the RGW ``concentrator`` is asked of the cluster itself: the
concentrator spec goes through ``ceph orch apply -i - --dry-run`` and its answer decides
(concentrator, ingress, or a one-line stop). Versions are only a hint: Ceph 20.2.4 (Tentacle)
was announced with concentrators but its packages refuse them (``RGWSpec.__init__() got an
unexpected keyword argument 'concentrator'``), while IBM Storage Ceph 8.1 (19.2.1) has them.
"""

from __future__ import annotations

import re

from pyinfra import host, inventory, logger
from pyinfra.api import OperationError, deploy

from deploys import specs
from deploys.cluster import ceph_cli, ownership, zones
from deploys.facts import memo
from deploys.facts.ceph import (
    CephFsid,
    CephOrchStatus,
    CephOwnershipMarkers,
    CephPools,
    CephReachable,
    CephServiceSpec,
    CephSpecProbe,
    CephVersions,
    version_key,
)
from deploys.facts.rgw import RgwZoneLayout
from deploys.operations import ceph
from deploys.settings import HostSettings, run_control
from deploys.settings.ceph import RgwSettings
from deploys.settings.reader import HOSTNAME
from deploys.stages.ceph_pools import unreachable_message

# Where concentrators were announced: upstream Tentacle (v20.2) and IBM Storage Ceph 8.1
# (19.2.1, builds tagged "el9cp"). A hint for messages only; the dry run decides.
CONCENTRATOR_UPSTREAM = (20, 2)
CONCENTRATOR_DOWNSTREAM = (19, 2, 1)
# haproxy's health/stats port on the ingress hosts (the cephadm documentation's value).
CEPH_HOSTNAME_KEY = "kvceph_ceph_hostname"
# Opt-in: apply the concentrator spec even when the orchestrator's dry run refused it (a
# cluster whose dry run is wrong). The apply's own refusal then fails the stage.
ALLOW_UNPROBED_KEY = run_control.key("allow_unprobed_concentrator")
_HOSTNAME = HOSTNAME


class SpecError(ValueError):
    """The wanted RGW layout cannot be expressed for this cluster; one-line reason and fix."""


def concentrator_announced(version: str) -> bool:
    """Whether a Ceph version was announced with RGW concentrators (a hint, not a decision)."""
    key = version_key(version)
    if re.search(r"\.el\d+cp", version):  # downstream build (e.g. 19.2.1-222.el9cp)
        return key[:3] >= CONCENTRATOR_DOWNSTREAM
    return key[:2] >= CONCENTRATOR_UPSTREAM


def _release(versions: dict | None) -> str:
    if not versions:
        return "Ceph (version unknown)"
    hint = ""
    if concentrator_announced(versions["oldest"]):
        hint = ", announced with concentrators"
    return f"Ceph {versions['oldest']} ({versions['release']}{hint})"


def _plain_release(versions: dict | None) -> str:
    """The cluster's release without the concentrator hint: "Ceph 20.2.4 (tentacle)"."""
    if not versions:
        return "this Ceph (version unknown)"
    return f"Ceph {versions['oldest']} ({versions['release']})"


# The orchestrator's possible answers to the concentrator dry run (``CephSpecProbe``): every
# service the stage could apply, whatever the cluster answers (status.py reads them all).
PROBE_ANSWERS = (
    ("concentrator refused", {"accepted": False, "rc": 0, "message": "refused"}),
    ("concentrator accepted", {"accepted": True, "rc": 0, "message": None}),
)


def plan_specs(
    rgw: RgwSettings, versions: dict | None, probe: dict | None, force: bool = False
) -> tuple[list[dict], str | None]:
    """The specs to apply (deploys/specs.py), in order, and a notice for the operator (or None).

    + probe: the orchestrator's answer to the concentrator spec's dry run (``CephSpecProbe``);
      only read when a concentrator is wanted
    + force: ``kvceph_allow_unprobed_concentrator``: the concentrator spec even when refused

    Raises SpecError when the settings ask for a layout this cluster cannot run.
    """
    ingress = specs.ingress_spec(rgw) if rgw.ingress_virtual_ips else None
    plain = specs.rgw_spec(rgw)
    if not rgw.concentrator:
        return [plain] + ([ingress] if ingress else []), None
    release = _release(versions)
    if probe is None:
        raise SpecError(
            f"kvceph_rgw_concentrator = {rgw.concentrator!r}: no answer from "
            f"`ceph orch apply --dry-run` of the concentrator spec on {release}; fix: check "
            "`ceph orch status` on the admin host, or set kvceph_rgw_concentrator = None"
        )
    said = probe.get("message")
    if probe.get("accepted") or force:
        notice = None
        if not probe.get("accepted"):
            notice = (
                f"kvceph: {ALLOW_UNPROBED_KEY}: applying the {rgw.concentrator} concentrator "
                f"spec although the orchestrator's dry run refused it ({said})"
            )
        elif ingress:
            # Both haproxys would want the same hosts; the concentrator already fronts RGW.
            notice = (
                f"kvceph: {rgw.ingress_key} {rgw.ingress_shown} is not used: "
                f"{release} fronts RGW with the {rgw.concentrator} concentrator"
            )
        return [specs.rgw_spec(rgw, concentrator=True)], notice
    if ingress is None:
        raise SpecError(
            f"kvceph_rgw_concentrator = {rgw.concentrator!r}: the orchestrator of {release} "
            f"refuses the concentrator spec (dry run: {said}); fix: set "
            "kvceph_rgw_ingress_virtual_ips (one per rgw host) for an ingress service "
            "(haproxy + keepalived), "
            f"or kvceph_rgw_concentrator = None (or --data {ALLOW_UNPROBED_KEY}=true to apply "
            "it anyway)"
        )
    # A normal run on such a cluster (the cephadm lab's every deploy): what kvceph does instead,
    # in words; the orchestrator's own refusal text is for the stop above, not this line.
    notice = (
        f"kvceph: RGW service: {_plain_release(versions)} takes no RGW concentrator (its "
        "orchestrator's dry run refuses the spec), so kvceph fronts RGW with cephadm's ingress "
        f"instead (haproxy + keepalived): an ingress service on {rgw.ingress_shown} port "
        f"{rgw.ingress_frontend_port}"
    )
    return [plain, ingress], notice


def wanted_specs(me: HostSettings, t: dict) -> tuple[list[dict], str | None]:
    """:func:`plan_specs` with the cluster's answers (facts; read once per run and host)."""
    rgw = me.rgw
    probe = None
    if rgw.concentrator:
        probe = memo.read(host, CephSpecProbe, spec=specs.dump(specs.probe_spec(rgw)), **t)
    versions = memo.read(host, CephVersions, **t)
    return plan_specs(rgw, versions, probe, force=me.run.allow_unprobed_concentrator)


def ceph_hostname(inventory_name: str, data) -> str:
    """The host's name in the orchestrator: ``kvceph_ceph_hostname``, else its inventory name."""
    value = data.get(CEPH_HOSTNAME_KEY) or inventory_name
    if not isinstance(value, str) or not re.fullmatch(_HOSTNAME, value):
        raise OperationError(
            f"{inventory_name}: {CEPH_HOSTNAME_KEY} = {value!r}: not a host name; "
            "fix: use the name `ceph orch host ls` shows"
        )
    return value


def orchestrator_silent_message(host_name: str, command_timeout: int) -> str:
    """The one line for an orchestrator that does not answer at all (mgr gone or stuck)."""
    return (
        f"{host_name}: RGW service: `ceph orch status` gave no answer in {command_timeout} s "
        "(kvceph_ceph_command_timeout): no active mgr, or its orchestrator module is stuck; "
        f"nothing was changed; fix: on {host_name} check `ceph mgr stat` and start a mgr "
        "(`ceph orch daemon start mgr.<id>` once one runs, else `systemctl start "
        "ceph-<fsid>@mgr.<id>`) or fail over a stuck one (`ceph mgr fail`), then run again"
    )


def _orchestrator(me: HostSettings, t: dict) -> bool:
    """Whether kvceph manages RGW here; stops when it should but no orchestrator answers."""
    rgw = me.rgw
    orch = memo.read(host, CephOrchStatus, **t) or {"available": False, "error": "no answer"}
    if rgw.managed_by == "external":
        state = orch.get("backend") if orch["available"] else orch.get("error")
        logger.warning(
            f"kvceph: RGW service skipped: kvceph_rgw_managed_by = 'external' (orchestrator: "
            f"{state}); RGW daemons, ports and labels are managed outside kvceph"
        )
        return False
    if orch.get("timed_out"):
        raise OperationError(orchestrator_silent_message(host.name, me.ceph.command_timeout))
    if not orch["available"]:
        raise OperationError(
            f"RGW service: kvceph_rgw_managed_by = 'cephadm' but no orchestrator answers "
            f"`ceph orch status` ({orch.get('error')}); fix: enable cephadm "
            "(`ceph mgr module enable cephadm; ceph orch set backend cephadm`), or set "
            "kvceph_rgw_managed_by = 'external'"
        )
    return True


def _plan(me: HostSettings, t: dict) -> tuple[list[dict], str | None]:
    try:
        return wanted_specs(me, t)
    except SpecError as exc:
        raise OperationError(f"RGW service: {exc}") from None


def check(me: HostSettings) -> None:
    """Before any Ceph change: the RGW layout must be one this cluster's orchestrator takes.

    An unreachable cluster stops here with the Ceph stages' one line (no further ``ceph`` call
    waits out its connect timeout).
    """
    if me.rgw.managed_by != "cephadm":
        return
    t = ceph_cli.timeouts(me.ceph)
    problem = unreachable_message(
        host.name, me.ceph.connect_timeout, memo.read(host, CephReachable, **t)
    )
    if problem:
        raise OperationError(problem)
    if _orchestrator(me, t):
        wanted, _ = _plan(me, t)
        problem = ownership_refusal(me, wanted, t) or zone_refusal(me, t)
        if problem:
            raise OperationError(problem)


def zone_refusal(me: HostSettings, t: dict) -> str | None:
    """deploys/cluster/zones.py's refusal for the zone kvceph's RGW serves: the one its spec names
    (an adopted service), else the cluster's default; a cluster without ``.rgw.root`` has no
    zone yet (RGW creates "default" at first start), so nothing is read there: a
    ``radosgw-admin`` read would create it."""
    pools = memo.read(host, CephPools, **t)
    if pools is None:
        return f"{host.name}: cannot read the pools (`ceph osd pool ls detail`)"
    if ".rgw.root" not in pools:
        found = zones.FRESH
    else:
        current = memo.read(host, CephServiceSpec, service_name=me.rgw.service_name, **t)
        where = zones.zone_of(current)
        found = memo.read(host, RgwZoneLayout, **where, timeout=t["command_timeout"])
    names = [p.name for p in me.ceph.pools]
    return zones.refusal(me.rgw.service_name, found, names)


def owned_options(me: HostSettings) -> list[tuple[str, str]]:
    """The RGW options kvceph sets, ``(option, value)``, all in ``me.rgw.config_section``."""
    rgw = me.rgw
    options = [("rgw_dns_name", rgw.dns_name)]
    if rgw.exit_timeout_secs is not None:
        options.append(("rgw_exit_timeout_secs", str(rgw.exit_timeout_secs)))
    return options


def ownership_refusal(me: HostSettings, wanted: list[dict], t: dict) -> str | None:
    """The one line naming every service and option kvceph would change without owning it
    (read from the same facts the operations read), or None."""
    markers = memo.read(host, CephOwnershipMarkers, **t)
    if markers is None:
        return f"{host.name}: cannot read kvceph's markers (`ceph config-key dump kvceph/owned/`)"
    adopt = me.run.adopt
    refusals, names = [], []
    for spec in wanted:
        current = memo.read(host, CephServiceSpec, service_name=spec["service_name"], **t)
        plan = ownership.plan_service(spec, current, markers, adopt, memo.read(host, CephFsid, **t))
        if plan.refusal:
            refusals.append(plan.refusal)
            names.append(spec["service_name"])
    section = me.rgw.config_section
    for option, value in owned_options(me):
        plan = ceph.read_option_plan(section, option, value, adopt, t)
        if plan.refusal:
            refusals.append(plan.refusal)
            names.append(ownership.option_name(section, option))
    return ownership.refusal_line(refusals, names) if refusals else None


@deploy("RGW service")
def apply(me: HostSettings, checked):
    rgw = me.rgw
    t = ceph_cli.timeouts(me.ceph)
    if not _orchestrator(me, t):
        return
    wanted, notice = _plan(me, t)
    if notice:
        logger.info(notice)

    if rgw.exit_timeout_secs is not None:
        # Before any daemon (re)starts, so even this run's restarts drain within the bound:
        # 20.2.4's cephadm hands the spec's rgw_exit_timeout_secs to radosgw as a stray
        # `--stop-timeout` argument, so podman stops RGW after its default 10 s and SIGKILLs
        # one still draining (exit 137: cephadm then shows the daemon in `error`). radosgw
        # reads the option from the config database at runtime.
        ceph.config_option(
            name=f"RGW drains at most {rgw.exit_timeout_secs} s when stopped "
            f"({rgw.config_section} rgw_exit_timeout_secs)",
            who=rgw.config_section,
            option="rgw_exit_timeout_secs",
            value=str(rgw.exit_timeout_secs),
            adopt=me.run.adopt,
            **t,
        )
    # Labels first: the spec's placement selects hosts by label.
    for name in sorted(n for n, h in checked.hosts.items() if "rgw" in h.groups):
        ceph_name = ceph_hostname(name, inventory.get_host(name).data)
        ceph.host_label(
            name=f"Label {ceph_name} {rgw.label}", ceph_host=ceph_name, label=rgw.label, **t
        )
    for spec in wanted:
        service = spec["service_name"]
        # The ingress's TLS key travels beside the spec, never in it (ssl_cert is public).
        secret = None
        if spec["service_type"] == "ingress" and rgw.ingress_ssl_key is not None:
            secret = {"ssl_key": rgw.ingress_ssl_key}
        ceph.service_spec(
            name=f"Apply the {service} spec (read back: exported, all daemons running)",
            spec=spec,
            secret_spec=secret,
            adopt=me.run.adopt,
            **t,
        )
