"""Manage the engine's systemd unit: daemon-reload when stale, rolling restart by digest."""

from __future__ import annotations

from pyinfra import host, logger
from pyinfra.api import FunctionCommand, OperationError, QuoteString, StringCommand, operation

from deploys.facts.engine import EngineReadiness, ServiceState

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


@operation()
def rolling_restart(
    digest: str,
    port: int,
    python: str,
    health_timeout: int,
    unit: str = "vllm.service",
):
    """
    Restart the engine when its running configuration digest differs, then wait for /health.

    + digest: the desired ``KVCEPH_DIGEST`` (``render.digest``)
    + port: the engine's HTTP port on 127.0.0.1
    + python: an interpreter on the host for the health loop (the engine venv's)
    + health_timeout: seconds to wait for ``GET /health`` = 200 after the restart
    + unit: the systemd unit

    Call it with ``_serial=True``: hosts restart one at a time. When one host does not become
    healthy its op fails, and every later host in the same run fails this op *without*
    restarting (a controller-side guard), so at most one host is down. Rerunning resumes: only
    hosts whose running digest still differs restart.

    .. code:: python

        service.rolling_restart(digest, 8000, "/opt/kvceph/venv/bin/python", 900, _serial=True)
    """
    current = host.get_fact(ServiceState, unit=unit)
    if current["active"] == "active" and current["digest"] == digest:
        host.noop(f"{unit} already runs configuration {digest[:12]}")
        return
    running = current["digest"][:12] if current["digest"] else "none"
    logger.info(
        "%s%s restarts: %s, running digest %s, desired %s",
        host.print_prefix,
        unit,
        current["active"],
        running,
        digest[:12],
    )
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


@operation(is_idempotent=False)
def daemon_reload():
    """
    Reload systemd's unit files, bounded in time (call it with ``_if=<unit op>.did_change``).
    """
    yield "timeout 120 systemctl daemon-reload"


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
def ready(python: str, port: int, model: str, timeout: int = 60):
    """
    Read-only readiness check: ``GET /health`` = 200 and a completion of 8 tokens with
    ``choices``. Never changes anything; fails the host with the reason when not ready.

    + python: an interpreter on the host (the engine venv's)
    + port: the engine's HTTP port on 127.0.0.1
    + model: the served model name (the ``serve`` argument)
    + timeout: seconds per HTTP request

    The probe runs as a fact, so it is re-read when the operation executes (after the restart
    stage); while planning, a not-ready engine is expected and only noted.
    """
    probe = host.get_fact(EngineReadiness, python=python, port=port, model=model, timeout=timeout)
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
