"""Router: the cache-aware router in front of every served model (hosts of group ``router``).

One ``kvceph-router@PORT`` instance per route (deploys/router/routes.py), its workers every
engine serving the model; vllm-router installed --no-deps from the controller's wheelhouse
(its compiled module needs no Python dependency) into its own venv. An instance restarts only
when its config, the unit, the launcher, the key or the package changed, one router host at a
time: its stop drains it (vllm-router refuses new connections on SIGTERM and finishes the
streams it carries) and the next host waits until it listens again. Engines leave a
route's pool through its health checks: a draining engine's /health answers 503 (docs/router.md
"Drain").
"""

from __future__ import annotations

import json

from pyinfra import host
from pyinfra.api import deploy
from pyinfra.operations import files as pyfiles
from pyinfra.operations import server, systemd

from deploys import paths
from deploys.facts import memo
from deploys.facts.engine import EngineVersions
from deploys.operations import engine as engine_ops
from deploys.operations import files
from deploys.router import routes as routing
from deploys.router import unit
from deploys.settings import HostSettings
from deploys.settings.router import VERSION
from deploys.settings.secrets import Secret
from deploys.stages.engine_software import wheels
from deploys.stages.monitoring import addresses

PACKAGE = f"vllm-router=={VERSION}"


def routes(me: HostSettings, checked) -> list[routing.Route]:
    """This router host's routes (every inference host of the inventory)."""
    return routing.routes(checked.hosts, addresses(checked.hosts), me.router, me.host)


@deploy("Router")
def apply(me: HostSettings, checked) -> None:
    """Package, launcher, key, one config and unit instance per route, each running. + me: this
    router host's settings; + checked: preflight's result (every host)."""
    r = me.router
    found = routes(me, checked)
    key = checked.credentials.vllm_api_key
    software = _package(r)
    files.named_directory("Router config", unit.CONFIG_DIR, "0755")
    files.named_directory("Directory", paths.SCRIPT_DIR, "0755")
    launcher = files.atomic_file(
        name=f"Router launcher {unit.LAUNCHER}",
        path=unit.LAUNCHER,
        content=unit.LAUNCHER_SOURCE.read_text(),
        mode="0644",
    )
    changed = [software, launcher]
    if key is not None:
        changed.append(
            files.private_file(
                name=f"Engines' API key for the router {unit.KEY_PATH}",
                path=unit.KEY_PATH,
                content=Secret(key.reveal() + "\n"),
            )
        )
    unit_file = files.atomic_file(
        name=f"Unit {unit.UNIT_PATH}",
        path=unit.UNIT_PATH,
        content=unit.text(r, key is not None),
        on_change="timeout 120 systemctl daemon-reload",
    )
    changed.append(unit_file)
    for route in found:
        config = routing.config(route, r)
        if key is not None:
            config["api_key_validation_urls"] = routing.api_key_validation_urls(route)
        route_file = files.atomic_file(
            name=f"Route {route.model} on :{route.port} {unit.config_path(route.port)}",
            path=unit.config_path(route.port),
            content=json.dumps(config, indent=1, sort_keys=True) + "\n",
        )
        # Decided at plan time from the operations' own facts (``will_change``), not with
        # ``_if=``: pyinfra lists an ``_if`` operation as a conditional change in every --dry
        # plan, so a converged fleet's plan would never be empty.
        if any(op.will_change for op in (route_file, *changed)):
            # One router host at a time (``_serial``), and the next only once this one
            # listens again: clients of the fleet's other routers never see all of them down.
            server.shell(
                name=f"Restart {route.unit} ({len(route.workers)} engines), drained, one host "
                "at a time",
                commands=[
                    unit.restart_command(
                        route.port, r.venv, r.bind, tuple(_hostport(w.url) for w in route.workers)
                    )
                ],
                _serial=True,
            )
        systemd.service(
            name=f"{route.unit} running and enabled",
            service=route.unit,
            running=True,
            enabled=True,
        )


def _hostport(url: str) -> str:
    """``host:port`` of a worker URL (``http://address:port``)."""
    from urllib.parse import urlsplit

    u = urlsplit(url)
    return f"{u.hostname}:{u.port or (443 if u.scheme == 'https' else 80)}"


def _package(r):
    """vllm-router in the router's venv: the wheel uploaded from the controller's wheelhouse
    (only when missing), pip --no-index --no-deps."""
    installed = memo.read(host, EngineVersions, venv=r.venv).get("packages", {})
    find_links = None
    if r.wheelhouse:
        find_links = f"{paths.WHEELHOUSE}-router"
        if installed.get("vllm-router") != VERSION:
            files.directory(name="Router wheelhouse", path=find_links, mode="0755")
            for wheel in wheels(r.wheelhouse, "kvceph_router_wheelhouse"):
                pyfiles.put(
                    name=f"Wheel {wheel.name}",
                    src=str(wheel),
                    dest=f"{find_links}/{wheel.name}",
                    mode="0644",
                )
    return engine_ops.venv_packages(
        name=f"Router package in {r.venv}",
        venv=r.venv,
        packages=[PACKAGE],
        index_url=None if find_links else r.index_url,
        find_links=find_links,
        no_deps=["vllm-router"],
        timeout=600,
    )
