"""The ports one host listens on, from every subject's settings, each held by one key.

An engine, a router route, a route's metrics and RGW (its frontends, the concentrator, the
ingress) on one host that share a port fail only when the second one starts, on the host. The
set is made from the settings of every role the host has, so a port key added to a subject is
covered once it is listed in :func:`listening`. Pure: no pyinfra state.

Fleet-wide (:func:`check_fleet`): cephadm places the RGW and ingress daemons on every rgw host
from the admin host's spec, so an rgw host's own listeners are checked against the admin's RGW
ports, whatever that host's own data says.
"""

from __future__ import annotations

from typing import TYPE_CHECKING

from deploys.settings.reader import SettingsError

if TYPE_CHECKING:
    from deploys.settings import HostSettings

# The router serves each route's metrics beside it (deploys/router/routes.py).
ROUTE_METRICS_OFFSET = 1000
# cephadm's ingress haproxy status port (its default), in kvceph's ingress spec (deploys/specs.py);
# kvceph never exposes it and it is no setting, but it holds the port on every rgw host.
INGRESS_MONITOR_PORT = 1967


def listening(h: HostSettings, spec: HostSettings | None = None) -> list[tuple[int, str]]:
    """(port, what listens there, as the key that sets it) for every listener of ``h``.

    + spec: the host whose RGW settings make the RGW spec (the admin host; None: ``h``)
    """
    found: list[tuple[int, str]] = []
    if h.engine is not None:
        for e in h.engine.engines:
            found.append((e.port, f"kvceph_engines {e.name}'s port"))
    if h.router is not None:
        routes = list(h.router.ports) or [("", h.router.port)]
        for model, port in routes:
            key = f"kvceph_router_ports {model!r}" if model else "kvceph_router_port"
            found.append((port, key))
            found.append((port + ROUTE_METRICS_OFFSET, f"{key}'s metrics (port + 1000)"))
    rgw = (spec or h).rgw
    if "rgw" in h.groups and rgw.managed_by == "cephadm":
        for i in range(rgw.count_per_host):
            found.append((rgw.frontend_port + i, "kvceph_rgw_frontend_port"))
        # One front of the RGWs runs on the host: the ingress's haproxy where VIPs are given,
        # else the concentrator (deploys/stages/rgw_service.py picks one).
        if rgw.ingress_virtual_ips:
            found.append((rgw.ingress_frontend_port, "kvceph_rgw_ingress_frontend_port"))
            found.append((INGRESS_MONITOR_PORT, "the ingress's haproxy monitor port (kvceph's)"))
        elif rgw.concentrator:
            found.append((rgw.concentrator_port, "kvceph_rgw_concentrator_port"))
    return found


def check(h: HostSettings, spec: HostSettings | None = None) -> None:
    """Refuse two listeners of one host on one port (one line: host, both keys, the port).

    + spec: the host whose RGW settings make the RGW spec (the admin host; None: ``h``)
    """
    held: dict[int, str] = {}
    admin = f" (the RGW spec, from {spec.host})" if spec is not None and spec is not h else ""
    for port, what in listening(h, spec):
        if admin and what.startswith(("kvceph_rgw_", "the ingress")):
            what += admin
        if not 1 <= port <= 65535:
            raise SettingsError(
                f"{h.host}: {what} = {port}: is not a port (1..65535); fix: use a lower port"
            )
        if port in held and held[port] != what:
            raise SettingsError(
                f"{h.host}: {what} = {port}: is also {held[port]} on this host: the second "
                "listener would fail to start; fix: give each listener of the host its own port"
            )
        held.setdefault(port, what)


def check_fleet(hosts: list[HostSettings]) -> None:
    """:func:`check` on every rgw host with the admin host's RGW ports (cephadm runs the
    daemons of the admin's spec there); a host's own check used its own data only.

    + hosts: the inventory's hosts (one of them the Ceph admin)
    """
    admin = next((h for h in hosts if h.is_ceph_admin), None)
    if admin is None:
        return
    for h in hosts:
        if "rgw" in h.groups:
            check(h, admin)
