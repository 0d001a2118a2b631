"""PURE: the router's systemd template unit, one instance per route (``kvceph-router@PORT``)."""

from __future__ import annotations

from deploys import paths
from deploys.settings.router import RouterSettings

UNIT = "kvceph-router@.service"
UNIT_PATH = f"{paths.UNIT_DIR}/{UNIT}"
CONFIG_DIR = f"{paths.CONFIG_DIR}/router"
KEY_PATH = f"{CONFIG_DIR}/api-key"
LAUNCHER = f"{paths.SCRIPT_DIR}/router_launch.py"
LAUNCHER_SOURCE = paths.REMOTE / "router_launch.py"


def config_path(port: int) -> str:
    return f"{CONFIG_DIR}/{int(port)}.json"


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
