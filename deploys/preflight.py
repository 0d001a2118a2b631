"""Checks that run once, before the first operation on any host.

pyinfra executes deploy.py once per host while it collects operations, and facts are read
during that collection; so everything that can be decided from the inventory alone is decided
here, on the first host's pass, and a problem stops the run before any host is touched.
"""

from __future__ import annotations

import sys
import traceback
from dataclasses import dataclass

from gevent.lock import BoundedSemaphore
from pyinfra import logger
from pyinfra.api.exceptions import ConnectError, PyinfraError

from deploys import compat, lock, render, rgw_service, secrets, settings

compat.install()

_CACHE: dict[int, Preflight] = {}
# pyinfra loads deploy.py for all hosts concurrently (gevent); the first one does the checks.
_ONCE = BoundedSemaphore()


@dataclass(frozen=True)
class Preflight:
    hosts: dict[str, settings.HostSettings]
    cache_groups: list[settings.CacheGroup]
    credentials: secrets.S3Credentials

    @property
    def admin(self) -> settings.HostSettings:
        return next(h for h in self.hosts.values() if h.is_ceph_admin)


class PreflightError(PyinfraError):
    """A problem found before any host is touched; pyinfra prints it as one line."""


def _stop(message: str) -> None:
    # pyinfra re-raises its own errors from deploy files without a traceback:
    # "--> pyinfra error in deploy.py line N: kvceph: <host>: <key> = ...; fix: ..."
    raise PreflightError(f"kvceph: {message}")


def _dry_run() -> bool:
    # pyinfra keeps --dry in the CLI, not in State; the plan must never take the lock.
    return any(a in sys.argv for a in ("--dry", "--debug-operations", "--debug-facts"))


def _take_lock(inventory, checked: Preflight) -> None:
    admin = inventory.get_host(checked.admin.host)
    if _dry_run():
        return
    data = admin.data
    try:
        # With --limit the admin host may be outside the run: the lock still lives there.
        admin.connect(reason="for the run lock", raise_exceptions=True)
        status = lock.acquire(
            admin,
            stale_after=checked.admin.lock_stale_after,
            break_lock=str(data.get("kvceph_break_lock", "")).lower() in ("1", "true", "yes"),
        )
    except ConnectError as exc:
        _stop(f"{admin.name}: cannot connect to take the run lock: {exc}; fix: check SSH to it")
    except lock.LockError as exc:
        _stop(str(exc))
    logger.info("kvceph: run lock on %s: %s", admin.name, status)


def run(state, inventory) -> Preflight:
    """Validate every host's settings and the cross-host invariants (once per run)."""
    with _ONCE:
        cached = _CACHE.get(id(state))
        if cached is None:
            cached = _CACHE[id(state)] = _check(inventory)
        return cached


# Ceph versions to render the RGW specs for: every template a release could choose (the stage
# picks one from the cluster's real version).
_SPEC_VERSIONS = (
    {"oldest": "16.2.15", "release": "pacific", "versions": ["16.2.15"]},
    {"oldest": "20.2.0", "release": "tentacle", "versions": ["20.2.0"]},
)


def _renders(me: settings.HostSettings, creds) -> list[tuple[str, object]]:
    """(template, render call) for every file kvceph writes for this host's roles."""
    calls: list[tuple[str, object]] = []
    if me.is_inference:
        calls += [
            ("lmcache.yaml.j2", lambda: render.lmcache_yaml(me)),
            ("vllm.env.j2", lambda: render.env_file(me, "0" * 64)),
            ("vllm.service.j2", lambda: render.unit(me)),
            ("aws_credentials.j2", lambda: render.aws_credentials(me, creds)),
            ("aws_config.j2", lambda: render.aws_config(me)),
        ]
    if me.is_ceph_admin and me.rgw.managed_by == "cephadm":
        for v in _SPEC_VERSIONS:
            calls.append((f"RGW spec for Ceph {v['release']}", _spec_render(me, v)))
    return calls


def _spec_render(me: settings.HostSettings, versions: dict):
    def call():
        try:
            return rgw_service.plan_specs(me.rgw, versions)
        except rgw_service.SpecError:
            return None  # a layout this release cannot run: the stage says so, with facts

    return call


def _template_of(exc: BaseException, fallback: str) -> str:
    # jinja2 puts the template's own file in the traceback; syntax errors carry its name.
    name = getattr(exc, "name", None)
    if isinstance(name, str) and name:
        return name
    frames = [f.filename for f in traceback.extract_tb(exc.__traceback__)]
    return next((f.rsplit("/", 1)[-1] for f in reversed(frames) if f.endswith(".j2")), fallback)


def check_templates(hosts: dict[str, settings.HostSettings], creds) -> None:
    """Render every template for every host (no facts); the first error stops the run."""
    for name, me in hosts.items():
        for label, call in _renders(me, creds):
            try:
                call()
            except Exception as exc:  # noqa: BLE001 - any rendering failure is one line
                template = _template_of(exc, label)
                error = " ".join(str(exc).split()) or type(exc).__name__
                _stop(
                    f"{name}: template {template}: {type(exc).__name__}: {error}; "
                    f"fix: correct templates/{template} or the setting it renders"
                    if template.endswith(".j2")
                    else f"{name}: template {template}: {type(exc).__name__}: {error}; "
                    "fix: correct the template or the setting it renders"
                )


def _check(inventory) -> Preflight:
    try:
        hosts = {
            h.name: settings.load(h.data, h.name, list(dict.fromkeys(h.groups))) for h in inventory
        }
        groups = settings.check_inventory(list(hosts.values()))
        creds = secrets.load()
    except (settings.SettingsError, secrets.SecretsError) as exc:
        _stop(str(exc))
    for g in groups:
        logger.info(
            "kvceph: cache group %s TP=%d: %s", g.model, g.tensor_parallel_size, ", ".join(g.hosts)
        )
    check_templates(hosts, creds)
    result = Preflight(hosts, groups, creds)
    _take_lock(inventory, result)
    return result
