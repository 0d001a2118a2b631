"""Engine software, remote tier part: kvceph's connector into the engine venv, and whether
LMCache's compiled CUDA ops load there (called by the engine-software stage, after the engine
packages: the venv exists).

The connector travels as a wheel built on the controller (deploys/tier/connector_package.py),
uploaded to ``/var/cache/kvceph/connector/`` and installed with ``pip --no-deps --no-index``
from that file: inference hosts need no package index. Nothing is uploaded or installed when
the venv already holds the same version with the same content.
"""

from __future__ import annotations

import io

from pyinfra import host
from pyinfra.operations import files

from deploys.facts import memo
from deploys.facts.connector import ConnectorInstalled
from deploys.operations import connector as connector_ops
from deploys.operations import files as kvfiles
from deploys.settings import HostSettings
from deploys.tier import connector_package


def apply(me: HostSettings) -> None:
    e = me.engine
    if me.lmcache.tier.connector == "kvceph":
        wheel = connector_package.current()
        fact = memo.read(host, ConnectorInstalled, venv=e.venv)
        if connector_ops.needs_install(fact, wheel.version, wheel.content):
            kvfiles.directory(
                name="kvceph connector directory", path=connector_package.HOST_DIR, mode="0755"
            )
            files.put(
                name=f"kvceph connector wheel {wheel.filename}",
                src=io.BytesIO(wheel.data),
                dest=wheel.host_path,
                mode="0644",
            )
        connector_ops.installed(
            name=f"kvceph connector {wheel.version} in {e.venv_label}",
            venv=e.venv,
            wheel=wheel.host_path,
            version=wheel.version,
            content=wheel.content,
        )
    if e.accelerator == "nvidia":
        connector_ops.compiled_ops(name="LMCache compiled CUDA ops", venv=e.venv)
