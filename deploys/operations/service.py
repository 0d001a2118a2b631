"""Manage the engine's systemd unit: daemon-reload when stale, rolling restart on drift."""

from __future__ import annotations

import hashlib
import time

import gevent
from pyinfra import host, logger
from pyinfra.api import FunctionCommand, OperationError, QuoteString, StringCommand, operation

from deploys.engine import drain, engine_address
from deploys.facts import memo
from deploys.facts.connector import S3Disabled
from deploys.facts.engine import (
    SECRET_ENV_NAME,
    EngineReadiness,
    EngineVenvs,
    ServiceDrift,
    ServiceState,
)
from deploys.facts.rgw import RgwReachable
from deploys.tier import remote_tier

# render.DIGEST_VAR: the variable ServiceState reads as the running digest.
DIGEST_VAR = "KVCEPH_DIGEST"

# The restart roll (batches, failures) lives on the run's State object: a dict keyed by
# id(state) handed a later State an earlier one's roll when Python reused the freed id
# (seen in the unit tests: a new roll found "stopped at" an earlier test's failed host).
_ROLL_ATTR = "_kvceph_restart_roll"

_HEALTH_SCRIPT = """
import sys, time, urllib.request
port, deadline, base = sys.argv[1], time.monotonic() + float(sys.argv[2]), sys.argv[3]
last = "no answer"
while time.monotonic() < deadline:
    try:
        with urllib.request.urlopen(base + "/health", timeout=5) as r:
            if r.status == 200:
                sys.exit(0)
            last = "HTTP %s" % r.status
    except Exception as exc:
        last = "%s: %s" % (type(exc).__name__, exc)
    time.sleep(max(0.0, min(2.0, deadline - time.monotonic())))
sys.exit("kvceph: %s/health not 200 within %ss (last: %s)" % (base, sys.argv[2], last))
"""


class _Roll:
    """The run's restart roll: engines restart in batches of at most ``size``; a batch is
    admitted only when the previous one is healthy, and one failure stops the roll.

    Engines of different hosts run their operation concurrently (gevent); each waits in
    ``admit`` for a place in the current batch. A batch fills up to ``size`` (or with whoever
    arrives while it runs) and closes; the next opens when all its engines are back.
    """

    def __init__(self, size: int):
        self.size = size
        self.running: set[str] = set()
        self.closed = False
        self.batch = 0
        self.failed: list[str] = []

    def admit(self, label: str, poll: float = 0.2) -> int | None:
        """Wait for a place; the batch number, or None when the roll has stopped."""
        while not self.failed:
            if not self.closed and len(self.running) < self.size:
                if not self.running:
                    self.batch += 1
                self.running.add(label)
                self.closed = len(self.running) >= self.size
                return self.batch
            gevent.sleep(poll)
        return None

    def release(self, label: str, ok: bool) -> None:
        self.running.discard(label)
        if not ok:
            self.failed.append(label)
        if not self.running:
            self.closed = False


def _roll(state, size: int = 1) -> _Roll:
    roll = getattr(state, _ROLL_ATTR, None)
    if roll is None:
        roll = _Roll(size)
        setattr(state, _ROLL_ATTR, roll)
    return roll


class _HostFunction(FunctionCommand):
    """A FunctionCommand that also gets the operation's connector arguments (sudo, ...)."""

    def execute(self, state, host, connector_arguments):
        return self.function(state, host, connector_arguments, *self.args, **self.kwargs)


def _drain(state, host, connector_arguments, unit, port, python, timeout, bind) -> None:
    """Drain the engine (deploys/engine/drain.py) and log what the restart will cut; never fails:
    past the timeout the restart goes ahead."""
    ok, output = drain.command(python, port, timeout, bind).execute(
        state, host, dict(connector_arguments)
    )
    result = drain.parse(output.stdout_lines if output else ())
    line = drain.summary(result, timeout)
    log = logger.warning if result.cut or result.state == "failed" else logger.info
    log("%skvceph: drain %s %s: %s", host.print_prefix, host.name, unit, line)


def _restart_in_roll(
    state, host, connector_arguments, unit, port, python, health_timeout, batch, drain_timeout,
    bind, link=None,
):  # fmt: skip
    """Drain and restart ``unit`` in its batch and wait for /health; False stops the roll."""
    roll = _roll(state, batch)
    label = f"{host.name} {unit}"
    number = roll.admit(label)
    if number is None:
        logger.error(
            "%skvceph: not restarting %s: the rolling restart stopped at %s (not healthy); "
            "fix it and rerun, the roll resumes where the running digest differs",
            host.print_prefix,
            unit,
            ", ".join(roll.failed),
        )
        return False
    logger.info("%skvceph: restart batch %d: %s", host.print_prefix, number, label)
    ok = False
    started = drained = time.monotonic()
    try:
        if drain_timeout is not None:
            _drain(state, host, connector_arguments, unit, port, python, drain_timeout, bind)
            drained = time.monotonic()
        for command in (
            drain.restart_command(unit, port, link=link),
            StringCommand(
                "timeout",
                str(health_timeout + 30),
                QuoteString(python),
                "-c",
                QuoteString(_HEALTH_SCRIPT),
                str(port),
                str(health_timeout),
                QuoteString(engine_address.local_url(bind, port)),
            ),
        ):
            ok, output = command.execute(state, host, dict(connector_arguments))
            if not ok:
                for line in output.stderr_lines[-5:] if output else ():
                    logger.error("%s%s", host.print_prefix, line)
                break
        return ok
    finally:
        # Always: a peer of the next batch waits for this engine's place.
        roll.release(label, ok)
        logger.info(
            "%skvceph: restart batch %d: %s %s (drain %.1f s, restart %.1f s)",
            host.print_prefix,
            number,
            label,
            "healthy" if ok else "FAILED",
            drained - started,
            time.monotonic() - drained,
        )


HASH_SEED_VAR = "PYTHONHASHSEED"


def _sha256(value: str) -> str:
    return hashlib.sha256(value.encode()).hexdigest()


def state_kwargs(unit: str, environment, files, secret_environment=None) -> dict:
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

    + current: the ServiceDrift fact read with ``state_kwargs``
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
        if have != want and name == HASH_SEED_VAR:
            # The fleet's hash seed is kept with the secrets (deploys/access/engine_users.py).
            reasons.append(f"running env {name} differs from desired (value not shown)")
        elif have != want:
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


# The endpoint probe for an engine that turned S3 off: two tries 2 s apart, 5 s each (~12 s
# at most, and only for such an engine): a blip is not "answers".
S3_PROBE = {"timeout": 5, "tries": 2, "delay": 2}


def _s3_off(unit: str, current: dict, endpoint: str | None) -> str | None:
    """The restart reason of a running engine whose LMCache turned S3 off in this start and
    whose endpoint answers again; None otherwise (a warning while the endpoint is down)."""
    if endpoint is None or current["active"] != "active" or not current["main_pid"]:
        return None
    at = remote_tier.s3_off_at(memo.read(host, S3Disabled, unit=unit))
    if at is None:
        return None
    # A moment's answer: never memoised (facts/memo.py).
    probe = host.get_fact(RgwReachable, endpoint=endpoint, **S3_PROBE) or {}
    if probe.get("reachable"):
        return remote_tier.s3_off_reason(at, endpoint)
    why = (probe.get("attempts") or ["no answer"])[-1].split(": ", 1)[-1]
    logger.warning(
        "%s%s", host.print_prefix, remote_tier.s3_off_waits(host.name, unit, at, endpoint, why)
    )
    return None


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
    batch: int = 1,
    drain_timeout: int | None = None,
    bind: str = "0.0.0.0",
    venv_link: str | None = None,
    venv: str | None = None,
    venv_base: str | None = None,
    s3_endpoint: str | None = None,
):
    """
    Restart the engine when what runs is not the desired configuration, then wait for /health.

    + digest: the desired ``KVCEPH_DIGEST`` (``render.digest``)
    + port: the engine's HTTP port
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
    + batch: how many engines of the run may restart at once (``kvceph_restart_batch``
      resolved to a count); the first call of a run sets it
    + drain_timeout: seconds to drain the engine before its restart (``kvceph_drain_timeout``,
      deploys/engine/drain.py); None where the gate is off (``kvceph_vllm_guard`` False): no drain
    + bind: ``kvceph_vllm_bind``; the drain and health wait reach the engine there
      (``engine_address.local``: loopback of its family for a wildcard)
    + venv_link: the engine's venv link (its ExecStart goes through it), None where kvceph
      installs nothing; switched to ``venv`` right before the restart, never otherwise
    + venv: the profile's venv; a link pointing elsewhere restarts the engine
    + venv_base: ``kvceph_venv`` (where the ``EngineVenvs`` fact looks)
    + s3_endpoint: the S3 endpoint as the engine reaches it (``kvceph_s3_endpoint``), where the
      engine runs LMCache's stock S3 connector: an engine whose current start logged "S3
      connection disabled" (``remote_tier.S3_DISABLED``) restarts too, once the endpoint
      answers from its host (``RgwReachable``, the S3 tier stage's probe); while it does not,
      the engine keeps running and a warning says so. None: not checked (kvceph's connector)

    The host restarts when it is not active, its running ``KVCEPH_DIGEST`` differs, its running
    environment differs, or a config file differs or is newer than the process: so a hand edit
    followed by a hand restart (digest unchanged) is still put back. Planning sees "differs",
    execution (files already rewritten) sees "newer": both decide the same.

    Call it once per engine, on all hosts at once (no ``_serial``): engines restart in
    batches of ``batch`` across the hosts, each batch only when the previous one is healthy.
    When an engine does not become healthy its op fails, and every engine not yet restarted
    fails this op *without* restarting (a controller-side roll), so at most one batch is down.
    Rerunning resumes: only engines still not running the desired configuration restart.

    .. code:: python

        service.rolling_restart(digest, 8000, "/opt/kvceph/venv/bin/python", 900, batch=2)
    """
    current = memo.read(
        host, ServiceDrift, **state_kwargs(unit, environment, files, secret_environment)
    )
    reasons = restart_reasons(current, digest, environment, files, secret_environment)
    link = None
    if venv_link and venv:
        link = (venv_link, venv)
        runs = memo.read(host, EngineVenvs, base=venv_base or venv)["links"].get(venv_link)
        if runs != venv and current["active"] == "active" and current["main_pid"]:
            # A crash-restart after this run wrote the env file has the new digest but the
            # old code: the link says which code runs.
            reasons.append(f"runs venv {runs or 'none'}, desired {venv}")
    s3_off = _s3_off(unit, current, s3_endpoint)
    if s3_off:
        reasons.append(s3_off)
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
    not_running = reasons == [current["active"]]
    logger.info(
        "%s%s: %s",
        host.print_prefix,
        unit,
        "not running: no drain"
        if not_running
        else drain.plan_note(drain_timeout is not None, drain_timeout or 0),
    )
    if note:
        logger.info("%s%s", host.print_prefix, note)
    yield _HostFunction(
        _restart_in_roll,
        (unit, port, python, health_timeout, batch, drain_timeout, bind),
        {"link": link} if link else {},
    )


@operation()
def daemon_reload_if_stale(unit: str = "vllm.service"):
    """
    ``systemctl daemon-reload`` when systemd reports the unit file changed on disk.

    + unit: the systemd unit

    Catches a run interrupted between writing the unit and reloading; the normal path reloads
    with ``_if=<unit op>.did_change``.
    """
    if memo.read(host, ServiceState, unit=unit)["need_reload"]:
        yield "timeout 120 systemctl daemon-reload"
    else:
        host.noop(f"systemd has the current {unit}")


@operation()
def enabled(unit: str = "vllm.service"):
    """
    Enable the unit at boot (start/restart is ``rolling_restart``'s business).

    + unit: the systemd unit
    """
    if memo.read(host, ServiceState, unit=unit)["enabled"]:
        host.noop(f"{unit} is enabled")
    else:
        yield StringCommand("timeout 60 systemctl enable", QuoteString(unit))


@operation()
def ready(
    python: str,
    port: int,
    model: str,
    timeout: int = 60,
    secrets: str = "/dev/null",
    bind: str = "0.0.0.0",
):
    """
    Read-only readiness check: ``GET /health`` = 200 and a completion of 8 tokens with
    ``choices``. Never changes anything; fails the host with the reason when not ready.

    + python: an interpreter on the host (the engine venv's)
    + port: the engine's HTTP port
    + model: the served model name (the ``serve`` argument)
    + timeout: seconds per HTTP request
    + secrets: the engine's secrets file; its ``VLLM_API_KEY`` is sent as the bearer token
      (read on the host, so the key never passes through pyinfra)
    + bind: ``kvceph_vllm_bind`` (the probe reaches the engine at ``engine_address.local``)

    The probe runs as a fact, so it is re-read when the operation executes (after the restart
    stage); while planning, a not-ready engine is expected and only noted.
    """
    address = engine_address.local(bind)
    probe = host.get_fact(
        EngineReadiness,
        python=python,
        port=port,
        model=model,
        timeout=timeout,
        secrets=secrets,
        address=address,
    )
    if probe.get("health") == 200 and probe.get("choices"):
        host.noop(f"engine on port {port} is healthy and answers completions")
        return
    reason = (
        f"engine on {engine_address.url_host(address)}:{port} not ready: "
        f"/health={probe.get('health')}, "
        f"completion choices={bool(probe.get('choices'))}, error={probe.get('error')}"
    )
    if getattr(host.state, "is_executing", False):
        raise OperationError(f"kvceph: {reason}; fix: journalctl -u vllm.service on {host.name}")
    host.noop(f"checked when executing ({reason} while planning)")
    yield from ()  # a generator that never yields: readiness changes nothing


@operation()
def removed(unit: str, files: list[str]):
    """
    Stop, disable and delete an engine the inventory no longer lists (its unit and env file).

    + unit: the systemd unit (one ``facts.engine.EngineUnits`` found)
    + files: the unit's files to delete (unit file, env file)

    The deploy calls it only for units kvceph wrote that ``kvceph_engines`` no longer names,
    before any engine restarts: the devices and port it held are free when the new engines
    start; and for LMCache's MP server once the host's engines rolled back in process (the MP
    engines waiting for their turn use it). The one destructive change made without an
    opt-in: the inventory asked for it.
    """
    yield StringCommand("timeout 300 systemctl disable --now", QuoteString(unit))
    yield StringCommand("rm -f", *(QuoteString(f) for f in files))
    yield "timeout 120 systemctl daemon-reload"
    yield StringCommand(
        "timeout 60 systemctl reset-failed", QuoteString(unit), "2>/dev/null || true"
    )
