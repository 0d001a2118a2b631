"""The engine's remote tier: kvceph's connector in the venv, LMCache's compiled ops, the tier's
presence after a start."""

from __future__ import annotations

from pyinfra import host, logger
from pyinfra.api import QuoteString, StringCommand, operation
from pyinfra.api.exceptions import OperationError

from deploys.facts import memo
from deploys.facts.connector import CompiledOps, ConnectorInstalled, RemoteTierLog
from deploys.tier import remote_tier


def needs_install(fact: dict, version: str, content: str) -> bool:
    """True unless the venv holds exactly this version and content of the connector."""
    return (fact.get("version"), fact.get("content")) != (version, content)


@operation()
def installed(venv: str, wheel: str, version: str, content: str, timeout: int = 600):
    """
    kvceph's connector in ``venv``, installed from the wheel file on the host without its
    dependencies and without an index (awscrt comes with LMCache).

    + venv: the engine venv (it exists: the engine packages are installed first)
    + wheel: the wheel's path on the host
    + version: the connector's version
    + content: its content hash (``connector_package.content_hash``)
    + timeout: seconds pip may take

    Nothing runs when the venv already has this version with this content (fact
    ``ConnectorInstalled``); a changed package of the same version is reinstalled.

    .. code:: python

        connector.installed("/opt/kvceph/venv", "/var/cache/kvceph/connector/kvceph_connector-"
                            "0.1.0-py3-none-any.whl", "0.1.0", "3f2a...")
    """
    fact = memo.read(host, ConnectorInstalled, venv=venv)
    if not needs_install(fact, version, content):
        host.noop(f"{venv} has kvceph-connector {version} ({content[:12]})")
        return
    yield StringCommand(
        "timeout",
        str(timeout),
        QuoteString(f"{venv}/bin/python"),
        "-m pip install --disable-pip-version-check --no-input --quiet --no-index --no-deps",
        "--force-reinstall",
        QuoteString(wheel),
    )


def compiled_ops_note(fact: dict, venv: str) -> tuple[str, bool]:
    """(the sentence for the plan, whether it is a warning) for a ``CompiledOps`` fact.

    + fact: the fact's answer
    + venv: the engine venv it was read in
    """
    if not fact:
        return f"LMCache compiled CUDA ops: not checked yet ({venv} does not exist yet)", False
    torch, lmc = fact.get("torch"), fact.get("lmcache")
    if fact.get("loaded") is None:
        missing = " and ".join(n for n, v in (("torch", torch), ("lmcache", lmc)) if not v)
        return (
            f"LMCache compiled CUDA ops: not applicable, no {missing} in {venv} "
            "(an engine that emulates vLLM)",
            False,
        )
    if fact["loaded"]:
        return f"LMCache {lmc} compiled CUDA ops load with torch {torch}", False
    return (
        f"LMCache {lmc}'s compiled CUDA ops (lmcache.cuda_ops) do not load with torch {torch} in "
        f"{venv} ({fact.get('error')}): LMCache copies KV to the GPU on its torch fallback "
        "(slower loads); fix: install the LMCache build made for this torch, or build LMCache "
        "against it (nvcc + torch headers)",
        True,
    )


@operation()
def compiled_ops(venv: str):
    """
    Read-only: whether LMCache's compiled CUDA ops load in ``venv``; a plan warning naming
    the torch / LMCache pair when they do not. Never fails, never changes anything.

    + venv: the engine venv (NVIDIA hosts: Gaudi's LMCache runs without them)
    """
    note, warn = compiled_ops_note(host.get_fact(CompiledOps, venv=venv), venv)
    if warn:
        logger.warning("%s%s", host.print_prefix, note)
    host.noop(note)
    yield from ()


@operation()
def remote_tier_present(unit: str, connector: str):
    """
    Read-only: the engine ``unit`` has a remote tier, from LMCache's own lines in its journal
    since the process started (``remote_tier.verdict``); fails the host naming LMCache's cause
    when it has none. While planning (before the restart stage) it only notes.

    + unit: the engine's systemd unit
    + connector: ``kvceph_lmcache_connector`` (the fix it names)
    """
    log = host.get_fact(RemoteTierLog, unit=unit)
    v = remote_tier.verdict(log.get("lines", []))
    if v.state == remote_tier.MISSING:
        message = remote_tier.failure_message(host.name, unit, connector, v)
        if getattr(host.state, "is_executing", False):
            raise OperationError(f"kvceph: {message}")
        host.noop(f"checked when executing (now: {message})")
        return
    if v.state == remote_tier.OK:
        host.noop(f"{unit}: LMCache's remote tier is connected")
    else:
        host.noop(f"{unit}: LMCache logged nothing about a remote tier since the start")
    yield from ()
