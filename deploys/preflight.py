"""Checks that run once, before the first operation on any host.

pyinfra executes deploy.py once per host while it collects operations, and facts are read
during that collection; so everything that can be decided from the inventory alone is decided
here, on the first host's pass, and a problem stops the run before any host is touched.
"""

from __future__ import annotations

import sys
from dataclasses import dataclass

from pyinfra import logger

from deploys import secrets, settings

_CACHE: dict[int, Preflight] = {}


@dataclass(frozen=True)
class Preflight:
    hosts: dict[str, settings.HostSettings]
    cache_groups: list[settings.CacheGroup]
    credentials: secrets.S3Credentials

    @property
    def admin(self) -> settings.HostSettings:
        return next(h for h in self.hosts.values() if h.is_ceph_admin)


def _stop(message: str) -> None:
    # One line, no traceback: the operator reads what to fix. Exit code 2 like a usage error.
    sys.stderr.write(f"kvceph: {message}\n")
    sys.stderr.flush()
    raise SystemExit(2)


def run(state, inventory) -> Preflight:
    """Validate every host's settings and the cross-host invariants (cached per run)."""
    cached = _CACHE.get(id(state))
    if cached is not None:
        return cached
    try:
        hosts = {
            h.name: settings.load(h.data, h.name, [g for g in h.groups])
            for h in inventory.iter_hosts()
        }
        groups = settings.check_inventory(list(hosts.values()))
        creds = secrets.load()
    except (settings.SettingsError, secrets.SecretsError) as exc:
        _stop(str(exc))
    for g in groups:
        logger.info(
            "kvceph: cache group %s TP=%d: %s", g.model, g.tensor_parallel_size, ", ".join(g.hosts)
        )
    result = Preflight(hosts, groups, creds)
    _CACHE[id(state)] = result
    return result
