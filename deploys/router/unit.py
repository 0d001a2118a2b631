"""PURE: the router's systemd template unit, one instance per route (``kvceph-router@PORT``)."""

from __future__ import annotations

import shlex

from deploys import paths
from deploys.engine import engine_address
from deploys.settings.router import RouterSettings

UNIT = "kvceph-router@.service"
UNIT_PATH = f"{paths.UNIT_DIR}/{UNIT}"
CONFIG_DIR = f"{paths.CONFIG_DIR}/router"
KEY_PATH = f"{CONFIG_DIR}/api-key"
LAUNCHER = f"{paths.SCRIPT_DIR}/router_launch.py"
LAUNCHER_SOURCE = paths.REMOTE / "router_launch.py"
# The drain of a router: on SIGTERM vllm-router 0.1.17 refuses new connections at once and
# finishes the streams it carries (measured: a 5 s stream stopped 1.5 s in ended with [DONE],
# a new connection 0.3 s after the signal was refused). systemd waits this long for them.
STOP_TIMEOUT = 240
# How long the deploy waits for a restarted router to listen (it listens once an engine is
# healthy) before the next router host's restart.
LISTEN_TIMEOUT = 120
# Waits for the restarted route to listen. vllm-router listens only once one of its engines is
# healthy, so with none of them listening (a first converge: the engines are installed after
# the router) there is nothing to wait for and the wait ends at once, saying so; the router
# comes up with its first engine. argv: port, timeout, address, then the engines' host:port.
_LISTENS = (
    "import socket,sys,time\n"
    "def up(h,p):\n"
    " try:socket.create_connection((h,int(p)),1).close();return True\n"
    " except OSError:return False\n"
    "port,wait,addr=sys.argv[1],float(sys.argv[2]),sys.argv[3]\n"
    "engines=[a.rsplit(':',1) for a in sys.argv[4:]]\n"
    "if engines and not any(up(h.strip('[]'),p) for h,p in engines):\n"
    " print('router on :%s: none of its engines listens yet; it listens once one is healthy'%port)"
    ";sys.exit(0)\n"
    "end=time.time()+wait\n"
    "while not up(addr,port):\n"
    " if time.time()>end:sys.exit('router on :%s not listening after %s s (it listens once "
    "an engine is healthy): journalctl -u kvceph-router@%s'%(port,sys.argv[2],port))\n"
    " time.sleep(0.5)\n"
)


def config_path(port: int) -> str:
    return f"{CONFIG_DIR}/{int(port)}.json"


def restart_command(port: int, venv: str, bind: str, engines: tuple[str, ...] = ()) -> str:
    """Restart one route's instance (its stop drains it, ``STOP_TIMEOUT``), then wait until it
    listens again (``LISTEN_TIMEOUT``): the deploy restarts the next router host only then.

    + port: the route's port; + venv: kvceph_router_venv (its Python polls the port)
    + bind: kvceph_router_bind (a wildcard is polled on loopback)
    + engines: the route's workers as ``host:port``; none listening: no wait (``_LISTENS``)
    """
    name = f"kvceph-router@{int(port)}.service"
    workers = "".join(f" {shlex.quote(e)}" for e in engines)
    return (
        f"timeout {STOP_TIMEOUT + 60} systemctl restart {name} && "
        f"{shlex.quote(venv + '/bin/python')} -c {shlex.quote(_LISTENS)} {int(port)} "
        f"{LISTEN_TIMEOUT} {shlex.quote(engine_address.local(bind))}{workers}"
    )


def text(r: RouterSettings, api_key: bool) -> str:
    """The unit. A dynamic user with no capability, a read-only system and only inet/unix
    sockets: the router reads its config and key and talks HTTP, nothing else. The key comes
    through systemd's credentials (root reads the 0600 file, the service sees a private copy)."""
    credential = f"LoadCredential=api-key:{KEY_PATH}\n" if api_key else ""
    return f"""\
# kvceph: the cache-aware router (vllm-router), one instance per route: %i is its port.
[Unit]
Description=kvceph router (vllm-router), route on port %i
After=network-online.target
Wants=network-online.target

[Service]
ExecStart={r.venv}/bin/python {LAUNCHER} {CONFIG_DIR}/%i.json
{credential}DynamicUser=yes
Restart=always
RestartSec=2
TimeoutStopSec={STOP_TIMEOUT}
KillMode=mixed
LimitNOFILE=65536
UMask=0077
NoNewPrivileges=yes
CapabilityBoundingSet=
AmbientCapabilities=
ProtectSystem=strict
ProtectHome=yes
PrivateTmp=yes
PrivateDevices=yes
ProtectKernelTunables=yes
ProtectKernelModules=yes
ProtectKernelLogs=yes
ProtectControlGroups=yes
ProtectClock=yes
ProtectHostname=yes
RestrictAddressFamilies=AF_INET AF_INET6 AF_UNIX
RestrictNamespaces=yes
RestrictRealtime=yes
RestrictSUIDSGID=yes
LockPersonality=yes
SystemCallArchitectures=native
SystemCallFilter=@system-service

[Install]
WantedBy=multi-user.target
"""
