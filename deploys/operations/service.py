"""Manage the engine's systemd unit: daemon-reload when stale, rolling restart on drift."""

from __future__ import annotations

import hashlib

from pyinfra import host, logger
from pyinfra.api import FunctionCommand, OperationError, QuoteString, StringCommand, operation

from deploys.facts.engine import SECRET_ENV_NAME, EngineReadiness, ServiceDrift, ServiceState

# render.DIGEST_VAR: the variable ServiceState reads as the running digest.
DIGEST_VAR = "KVCEPH_DIGEST"

# Per pyinfra run (keyed by id(state)): hosts whose restart began / finished. A _serial op
# still runs on the next host after one fails, so the next host's guard checks these.
_ROLL: dict[int, dict[str, set[str]]] = {}

_HEALTH_SCRIPT = """
import sys, time, urllib.request
port, deadline = sys.argv[1], time.monotonic() + float(sys.argv[2])
last = "no answer"
while time.monotonic() < deadline:
    try:
        with urllib.request.urlopen("http://127.0.0.1:%s/health" % port, timeout=5) as r:
            if r.status == 200:
                sys.exit(0)
            last = "HTTP %s" % r.status
    except Exception as exc:
        last = "%s: %s" % (type(exc).__name__, exc)
    time.sleep(max(0.0, min(2.0, deadline - time.monotonic())))
sys.exit("kvceph: /health on port %s not 200 within %ss (last: %s)" % (port, sys.argv[2], last))
"""


def _roll_guard(state, host, unit: str):
    roll = _ROLL.setdefault(id(state), {"started": set(), "done": set()})
    stuck = sorted(roll["started"] - roll["done"])
    if stuck:
        logger.error(
            "%skvceph: not restarting %s: the rolling restart stopped at %s (not healthy); "
            "fix it and rerun, the roll resumes where the running digest differs",
            host.print_prefix,
            unit,
            ", ".join(stuck),
        )
        return False
    roll["started"].add(host.name)
    return True


def _roll_done(state, host):
    _ROLL.setdefault(id(state), {"started": set(), "done": set()})["done"].add(host.name)
    return True


def _sha256(value: str) -> str:
    return hashlib.sha256(value.encode()).hexdigest()


def _state_kwargs(unit: str, environment, files, secret_environment=None) -> dict:
    """ServiceDrift's arguments: secret-looking variables are read back as hashes only."""
    kwargs: dict = {"unit": unit}
    # The digest has its own line in ServiceState's part of the command.
    names = sorted(n for n in environment or {} if n != DIGEST_VAR)
    plain = tuple(n for n in names if not SECRET_ENV_NAME.search(n))
    secret = tuple(
        sorted({*(n for n in names if SECRET_ENV_NAME.search(n)), *(secret_environment or {})})
    )
    if plain:
        kwargs["env"] = plain
    if secret:
        kwargs["secret_env"] = secret
    if files:
        kwargs["files"] = tuple(sorted(files))
    return kwargs


def restart_reasons(
    current: dict, digest: str, environment=None, files=None, secret_environment=None
) -> list[str]:
    """Why the running engine is not the desired one ([] when it is); no secret values.

    + current: the ServiceDrift fact read with ``_state_kwargs``
    + digest: the desired ``KVCEPH_DIGEST``
    + environment: desired variable -> value (the env file's, ``render.environment``)
    + files: config file path -> sha256 of its desired content
    + secret_environment: secret variable -> sha256 of its desired value (the secrets file's)
    """
    if current["active"] != "active" or not current["main_pid"]:
        return [current["active"]]
    reasons = []
    if current["digest"] != digest:
        reasons.append("running digest differs")
    for name, want in sorted((environment or {}).items()):
        if name == DIGEST_VAR:
            continue  # the digest's own reason above
        if SECRET_ENV_NAME.search(name):
            if current["env_sha256"].get(name) != _sha256(want):
                reasons.append(f"running env {name} differs from desired (value not shown)")
            continue
        have = current["env"].get(name)
        if have != want:
            shown = f"{name} unset" if have is None else f"{name}={have}"
            reasons.append(f"running env {shown}, desired {want}")
    for name, want_sha in sorted((secret_environment or {}).items()):
        if current["env_sha256"].get(name) != want_sha:
            reasons.append(f"running env {name} differs from desired (value not shown)")
    for path, want in sorted((files or {}).items()):
        have = current["sha256"].get(path)
        if have != want:
            what = "is absent" if have is None else "differs from desired"
            reasons.append(f"{path} {what}")
    # A file rewritten earlier in this run, or edited by hand since the start, while its
    # content now matches: the process may still run what it read before.
    for path in current["newer"]:
        if path in (files or {}):
            reasons.append(f"{path} changed after the process started")
    return reasons


@operation()
def rolling_restart(
    digest: str,
    port: int,
    python: str,
    health_timeout: int,
    unit: str = "vllm.service",
    environment: dict[str, str] | None = None,
    files: dict[str, str] | None = None,
    secret_environment: dict[str, str] | None = None,
    note: str | None = None,
):
    """
    Restart the engine when what runs is not the desired configuration, then wait for /health.

    + digest: the desired ``KVCEPH_DIGEST`` (``render.digest``)
    + port: the engine's HTTP port on 127.0.0.1
    + python: an interpreter on the host for the health loop (the engine venv's)
    + health_timeout: seconds to wait for ``GET /health`` = 200 after the restart
    + unit: the systemd unit
    + environment: the env file's variables and values (``render.environment``); a running
      process whose environment differs restarts (variables systemd adds are not compared)
    + files: path -> sha256 of the desired content of every file the engine reads; a host
      restarts when one differs now (it is rewritten in this run) or changed after the start
    + secret_environment: secret variable -> sha256 of its desired value (never the value: an
      operation's arguments can reach pyinfra's debug output); read back from the running
      process as a sha256 too
    + note: a line logged with the restart notice (the deploy passes the host's last cache
      probe verdict, ``deploys/probe/report.last_verdict``)

    The host restarts when it is not active, its running ``KVCEPH_DIGEST`` differs, its running
    environment differs, or a config file differs or is newer than the process: so a hand edit
    followed by a hand restart (digest unchanged) is still put back. Planning sees "differs",
    execution (files already rewritten) sees "newer": both decide the same.

    Call it with ``_serial=True``: hosts restart one at a time. When one host does not become
    healthy its op fails, and every later host in the same run fails this op *without*
    restarting (a controller-side guard), so at most one host is down. Rerunning resumes: only
    hosts still not running the desired configuration restart.

    .. code:: python

        service.rolling_restart(digest, 8000, "/opt/kvceph/venv/bin/python", 900, _serial=True)
    """
    current = host.get_fact(
        ServiceDrift, **_state_kwargs(unit, environment, files, secret_environment)
    )
    reasons = restart_reasons(current, digest, environment, files, secret_environment)
    if not reasons:
        host.noop(f"{unit} already runs configuration {digest[:12]}")
        return
    running = current["digest"][:12] if current["digest"] else "none"
    logger.info(
        "%s%s restarts: %s; running digest %s, desired %s",
        host.print_prefix,
        unit,
        "; ".join(reasons),
        running,
        digest[:12],
    )
    if note:
        logger.info("%s%s", host.print_prefix, note)
    yield FunctionCommand(_roll_guard, (unit,), {})
    yield StringCommand("timeout 300 systemctl restart", QuoteString(unit))
    yield StringCommand(
        "timeout",
        str(health_timeout + 30),
        QuoteString(python),
        "-c",
        QuoteString(_HEALTH_SCRIPT),
        str(port),
        str(health_timeout),
    )
    yield FunctionCommand(_roll_done, (), {})


@operation()
def daemon_reload_if_stale(unit: str = "vllm.service"):
    """
    ``systemctl daemon-reload`` when systemd reports the unit file changed on disk.

    + unit: the systemd unit

    Catches a run interrupted between writing the unit and reloading; the normal path reloads
    with ``_if=<unit op>.did_change``.
    """
    if host.get_fact(ServiceState, unit=unit)["need_reload"]:
        yield "timeout 120 systemctl daemon-reload"
    else:
        host.noop(f"systemd has the current {unit}")


@operation()
def enabled(unit: str = "vllm.service"):
    """
    Enable the unit at boot (start/restart is ``rolling_restart``'s business).

    + unit: the systemd unit
    """
    if host.get_fact(ServiceState, unit=unit)["enabled"]:
        host.noop(f"{unit} is enabled")
    else:
        yield StringCommand("timeout 60 systemctl enable", QuoteString(unit))


@operation()
def ready(python: str, port: int, model: str, timeout: int = 60, secrets: str = "/dev/null"):
    """
    Read-only readiness check: ``GET /health`` = 200 and a completion of 8 tokens with
    ``choices``. Never changes anything; fails the host with the reason when not ready.

    + python: an interpreter on the host (the engine venv's)
    + port: the engine's HTTP port on 127.0.0.1
    + model: the served model name (the ``serve`` argument)
    + timeout: seconds per HTTP request
    + secrets: the engine's secrets file; its ``VLLM_API_KEY`` is sent as the bearer token
      (read on the host, so the key never passes through pyinfra)

    The probe runs as a fact, so it is re-read when the operation executes (after the restart
    stage); while planning, a not-ready engine is expected and only noted.
    """
    probe = host.get_fact(
        EngineReadiness, python=python, port=port, model=model, timeout=timeout, secrets=secrets
    )
    if probe.get("health") == 200 and probe.get("choices"):
        host.noop(f"engine on port {port} is healthy and answers completions")
        return
    reason = (
        f"engine on 127.0.0.1:{port} not ready: /health={probe.get('health')}, "
        f"completion choices={bool(probe.get('choices'))}, error={probe.get('error')}"
    )
    if getattr(host.state, "is_executing", False):
        raise OperationError(f"kvceph: {reason}; fix: journalctl -u vllm.service on {host.name}")
    host.noop(f"checked when executing ({reason} while planning)")
    yield from ()  # a generator that never yields: readiness changes nothing
