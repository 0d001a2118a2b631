"""After ``ceph orch apply`` or a rolling restart: what the orchestrator really holds and runs.

``orch apply`` exits 0 for a spec the mgr refused (Ceph 20.2.4: ``ServiceSpec:
RGWSpec.__init__() got an unexpected keyword argument 'concentrator'``), so a spec counts as
applied only when the orchestrator exports it (our keys; its own additions such as
``rgw_exit_timeout_secs`` are ignored) and runs as many daemons as it placed, within a bounded
wait. Every failure is one line with the cluster's own words.

The functions take ``run(command) -> (rc, lines)`` so they run the same on a host (pyinfra)
and against recorded answers (unit tests).
"""

from __future__ import annotations

import json
import time
from collections.abc import Callable
from datetime import datetime

from pyinfra import logger
from pyinfra.api import FunctionCommand, OperationError, QuoteString, StringCommand

from deploys.access import sudo
from deploys.cluster.ceph_cli import ceph, redacted
from deploys.facts.ceph import orch_apply_refusal

Run = Callable[[object], "tuple[int, list[str]]"]
# The orchestrator deploys in its own loop; 20.2.4 ran two RGWs ~20 s after the apply on 2 cores.
DEFAULT_WAIT = 180
POLL = 3
PROGRESS_EVERY = 15
# cephadm acts on its daemon cache, refreshed every 10 min unless asked: with a stale entry
# (a daemon restarted a minute before read as not running) it skips a scale-down ("not
# enough RGW daemons left", RgwService.ok_to_stop) and retries only at its next loop, which
# the read-back's 180 s did not reach (the cephadm lab's count 2 -> 1, intermittent). A read
# with `orch ps --refresh` invalidates the cache and wakes that loop; asked at most this often.
REFRESH_EVERY = 30


def spec_differences(wanted, current, path: str = "") -> list[str]:
    """Keys of ``wanted`` whose value differs in ``current`` (keys we do not set are ignored)."""
    if isinstance(wanted, dict):
        if not isinstance(current, dict):
            return [path or "."]
        diffs = []
        for key, value in wanted.items():
            diffs += spec_differences(value, current.get(key), f"{path}.{key}" if path else key)
        return diffs
    return [] if wanted == current else [path]


def _json(lines: list[str]):
    text = "\n".join(lines).strip()
    if not text or not text.startswith(("[", "{")):
        return None
    try:
        return json.loads(text)
    except ValueError:
        return None


def _one_line(text: str, limit: int = 400) -> str:
    """An orchestrator event (it embeds cephadm's stderr, newlines and all) as one short line."""
    flat = " | ".join(part.strip() for part in text.splitlines() if part.strip())
    return flat if len(flat) <= limit else flat[: limit - 3] + "..."


def read_service(run: Run, service_name: str, t: dict, refresh: bool = False) -> dict:
    """One look at a service: the spec the orchestrator holds, its size, its daemons.

    ``orch ls -f json`` carries the spec (as ``--export`` does) plus status and events; secret
    values (an ingress's ``ssl_key``) arrive as their sha256. ``refresh``: ``orch ps
    --refresh`` (cephadm refreshes its daemon cache and runs its loop again; this answer is
    still the old cache).
    """
    rc, lines = run(redacted(ceph("orch", "ls", "--service_name", service_name, **t)))
    listed = _json(lines) if rc == 0 else None
    listed = listed[0] if isinstance(listed, list) and listed else None
    ps = ("orch", "ps", "--service_name", service_name) + (("--refresh",) if refresh else ())
    rc, lines = run(ceph(*ps, **t))
    daemons = [
        {
            "name": d.get("daemon_name") or f"{d.get('daemon_type')}.{d.get('daemon_id')}",
            "status": d.get("status_desc"),
            "started": d.get("started"),
            "refreshed": d.get("last_refresh"),
            "ports": d.get("ports") or [],
        }
        for d in ((_json(lines) or []) if rc == 0 else [])
    ]
    status = (listed or {}).get("status") or {}
    events = (listed or {}).get("events") or []
    spec = {k: v for k, v in (listed or {}).items() if k not in ("status", "events")}
    return {
        "export": spec or None,
        "size": status.get("size"),
        "created": status.get("created"),
        "daemons": daemons,
        "errors": [e for e in events if "[ERROR]" in e],
    }


def converged(
    service_name: str, wanted: dict, seen: dict, restarted: dict | None = None
) -> str | None:
    """None when the service is as wanted and all its daemons run, else what is missing."""
    if seen["export"] is None:
        return f"service {service_name} is not in `ceph orch ls`"
    diffs = spec_differences(wanted, seen["export"])
    if diffs:
        return f"service {service_name} holds a different {', '.join(diffs)}"
    size, daemons = seen["size"], seen["daemons"]
    running = [d for d in daemons if d["status"] == "running"]
    if not size or len(running) != size or len(daemons) != size:
        others = [f"{d['name']} {d['status']}" for d in daemons if d["status"] != "running"]
        return (
            f"service {service_name}: {len(running)} of {size} daemons running"
            + (f" ({', '.join(others)})" if others else "")
            + (f"; {len(daemons)} placed" if len(daemons) != size else "")
        )
    # After a re-apply `orch ps` lists the old daemons until cephadm's next refresh (a port
    # change looked converged at once): only daemons seen since the spec was stored count.
    stale = [d["name"] for d in daemons if not _after(d.get("refreshed"), seen.get("created"))]
    if stale:
        return f"service {service_name}: not refreshed since the apply: {', '.join(stale)}"
    wrong_port = _off_port(wanted, daemons)
    if wrong_port:
        return f"service {service_name}: {wrong_port}"
    if restarted is not None:
        same = [d["name"] for d in running if restarted.get(d["name"]) == d["started"]]
        if same:
            return f"service {service_name}: not restarted yet: {', '.join(same)}"
    return None


def _after(when: str | None, created: str | None) -> bool:
    """Whether an orchestrator timestamp is later than ``created`` (no ``created``: yes)."""
    if not created:
        return True
    if not when:
        return False
    try:
        return datetime.fromisoformat(when) > datetime.fromisoformat(created)
    except ValueError:
        return False


def _off_port(wanted: dict, daemons: list[dict]) -> str | None:
    """RGW daemons listening outside ``[rgw_frontend_port, +count_per_host)``, as one phrase."""
    if wanted.get("service_type") != "rgw":
        return None
    port = (wanted.get("spec") or {}).get("rgw_frontend_port")
    if port is None:
        return None
    count = (wanted.get("placement") or {}).get("count_per_host") or 1
    off = [
        f"{d['name']} on {d['ports']}"
        for d in daemons
        if not d["ports"] or any(not port <= p < port + count for p in d["ports"])
    ]
    if not off:
        return None
    return f"daemons not on ports {port}-{port + count - 1} yet: {', '.join(off)}"


def wait_converged(
    run: Run,
    service_name: str,
    wanted: dict,
    t: dict,
    wait: int = DEFAULT_WAIT,
    restarted: dict | None = None,
    clock: Callable[[], float] = time.monotonic,
    sleep: Callable[[float], None] = time.sleep,
    progress: Callable[[str], None] | None = None,
) -> str | None:
    """Poll until :func:`converged` (None) or ``wait`` seconds pass (the one-line reason).

    + progress: told what is still missing, with the seconds waited, every PROGRESS_EVERY
      seconds (the wait is minutes at worst: a slow cluster is told from a hung deploy)
    + every REFRESH_EVERY seconds still not converged, one read asks cephadm to refresh
    """
    start = clock()
    deadline, told, refreshed = start + wait, start, start
    while True:
        now = clock()
        refresh = now - refreshed >= REFRESH_EVERY
        if refresh:
            refreshed = now
        seen = read_service(run, service_name, t, refresh=refresh)
        missing = converged(service_name, wanted, seen, restarted)
        if missing is None:
            return None
        if clock() >= deadline:
            last = f"; orchestrator: {_one_line(seen['errors'][-1])}" if seen["errors"] else ""
            return f"{missing} after {wait} s{last}"
        if progress is not None and clock() - told >= PROGRESS_EVERY:
            told = clock()
            progress(f"waiting {told - start:.0f} s of {wait} s: {missing}")
        sleep(POLL)


def apply_and_wait(
    run: Run,
    remote: str,
    service_name: str,
    wanted: dict,
    t: dict,
    wait: int = DEFAULT_WAIT,
    progress: Callable[[str], None] | None = None,
) -> str | None:
    """``ceph orch apply -i <remote>`` (the file is removed), then :func:`wait_converged`.

    Returns None on success, else one line: the mgr's refusal, or what never converged.
    """
    rc, lines = run(
        StringCommand(
            ceph("orch", "apply", "-i", remote, **t, json=False),
            "2>&1; rc=$?; rm -f",
            QuoteString(remote),
            "; exit $rc",
        )
    )
    refusal = orch_apply_refusal(lines, rc)
    if refusal:
        return f"ceph orch apply {service_name} refused: {refusal}"
    return wait_converged(run, service_name, wanted, t, wait, progress=progress)


def restart_and_wait(
    run: Run,
    service_name: str,
    t: dict,
    wait: int = DEFAULT_WAIT,
    progress: Callable[[str], None] | None = None,
) -> str | None:
    """Restart every daemon of the service, one at a time: ``ceph orch daemon restart <name>``,
    then wait until that daemon started again and every daemon runs, before the next. (``ceph
    orch restart <service>`` restarts them all at once: S3 gone until the first is back.)"""
    before = read_service(run, service_name, t)
    wanted = {"service_name": service_name}
    for daemon in sorted(before["daemons"], key=lambda d: d["name"]):
        name = daemon["name"]
        rc, lines = run(
            StringCommand(ceph("orch", "daemon", "restart", name, **t, json=False), "2>&1")
        )
        refusal = orch_apply_refusal(lines, rc)
        if refusal:
            return f"ceph orch daemon restart {name} failed: {refusal}"
        problem = wait_converged(
            run,
            service_name,
            wanted,
            t,
            wait,
            restarted={name: daemon["started"]},
            progress=progress,
        )
        if problem:
            return f"{service_name}: rolling restart stopped at {name}: {problem}"
    return None


# --- as pyinfra commands: run when the operation executes, on the operation's host ----------


def _host_run(state, host) -> Run:
    elevation = sudo.arguments(state, host)  # a FunctionCommand gets no connector arguments

    def run(command):
        ok, output = host.run_shell_command(command, **elevation)
        return (0 if ok else 1), list(output.stdout_lines) + list(output.stderr_lines)

    return run


def _progress(host, service_name: str) -> Callable[[str], None]:
    """The read-back's waits as log lines beside pyinfra's output (``kvceph: host: ...``)."""
    return lambda line: logger.info("    kvceph: %s: %s: %s", host.name, service_name, line)


def _apply_read_back(state, host, remote, service_name, wanted, t, wait):
    problem = apply_and_wait(
        _host_run(state, host), remote, service_name, wanted, t, wait, _progress(host, service_name)
    )
    if problem:
        raise OperationError(f"kvceph: {problem}")
    return True


def _restart_read_back(state, host, service_name, t, wait):
    problem = restart_and_wait(
        _host_run(state, host), service_name, t, wait, _progress(host, service_name)
    )
    if problem:
        raise OperationError(f"kvceph: {problem}")
    return True


def apply_command(remote: str, service_name: str, wanted: dict, t: dict, wait: int):
    """:func:`apply_and_wait` as a command an operation yields."""
    return FunctionCommand(_apply_read_back, (remote, service_name, wanted, t, wait), {})


def restart_command(service_name: str, t: dict, wait: int = DEFAULT_WAIT):
    """:func:`restart_and_wait` as a command an operation yields."""
    return FunctionCommand(_restart_read_back, (service_name, t, wait), {})
