"""Whether an engine has a remote (S3) tier, from what LMCache 0.5.6 logged since it started.

Pure module. LMCache never refuses to start over its remote tier: a plugin it cannot import, an
adapter that raises, a connector that cannot be created are each one log line, and vLLM then
serves with no remote tier: every request recomputes, silently. Readiness and verify.py read
the journal with these templates (lmcache/v1/storage_backend/__init__.py, remote_backend.py,
connector/__init__.py) and fail naming the cause.

Note what the sources say: "Created remote backend for plugin: kvceph" is logged even when the
connector inside it could not be created (RemoteBackend.init_connection logs "Failed to
initialize/re-establish remote connection" and keeps ``connection = None``); the line that
proves a working connection is "Connection initialized/re-established at <url>". LMCache's
health monitor retries the connection later, so a failure followed by that line is healed.

The stock S3 connector can also lose a working tier for good: ``S3_DISABLED`` below. status.py
says so per engine, and the deploy restarts such an engine (drained) once the endpoint answers.
"""

from __future__ import annotations

import re
from dataclasses import dataclass
from datetime import UTC, datetime

OK, MISSING, UNKNOWN = "ok", "missing", "unknown"

# One pattern per LMCache template that means "this worker has no remote tier (yet)".
_FAILURES = (
    # storage_backend/__init__.py: RemoteBackend(...) raised for the plugin.
    re.compile(r"Failed to create remote backend for plugin (\S+): (.*)"),
    # connector/__init__.py: the plugin module or class could not be imported.
    re.compile(r"Failed to load remote connector (\S+) due to import/attribute error: (.*)"),
    # connector/__init__.py: the adapter class raised in its constructor.
    re.compile(r"Failed to create remote connector (\S+) adapter: (.*)"),
    # remote_backend.py: the adapter's create_connector raised (or no adapter parsed the URL).
    re.compile(r"Failed to initialize/re-establish remote connection: (.*)"),
)
_SUCCESS = re.compile(r"Connection initialized/re-established at (\S+)")
# For ``grep -E`` on the host: every line verdict() reads contains one of these.
PREFILTER = (
    "Failed to create remote backend for plugin|Failed to load remote connector"
    "|Failed to create remote connector|Failed to initialize/re-establish remote connection"
    "|Connection initialized/re-established at"
)


@dataclass(frozen=True)
class Verdict:
    """``state`` OK / MISSING / UNKNOWN and, when missing, LMCache's own words for why."""

    state: str
    cause: str = ""


def _failure(line: str) -> str | None:
    for pattern in _FAILURES:
        m = pattern.search(line)
        if m:
            # The last group is LMCache's reason; the plugin name (when there) leads it.
            return " ".join(m.group(0).split())[:300]
    return None


def verdict(lines: list[str]) -> Verdict:
    """What the engine's LMCache lines since its start say about its remote tier.

    + lines: journal lines since the engine's main process started, oldest first

    MISSING when a failure line has no success line after it (the last word wins, so a
    connection the health monitor re-established counts); OK when a success line is last;
    UNKNOWN when LMCache said neither (no remote tier configured, or not initialised yet).
    """
    last = UNKNOWN
    cause = ""
    for line in lines:
        why = _failure(line)
        if why:
            last, cause = MISSING, why
        elif _SUCCESS.search(line):
            last, cause = OK, ""
    return Verdict(last, cause)


def failure_message(host: str, unit: str, connector: str, v: Verdict) -> str:
    """The one line readiness and verify.py fail with.

    + host: the inference host
    + unit: the engine's systemd unit
    + connector: kvceph_lmcache_connector of the host
    + v: the MISSING verdict
    """
    fix = (
        "check that kvceph_connector is installed in the engine venv (engine-software stage) "
        "and the kvceph.* keys in /etc/kvceph/lmcache.yaml"
        if connector == "kvceph"
        else "check remote_url and extra_config in /etc/kvceph/lmcache.yaml"
    )
    return (
        f"{host}: {unit} serves with no remote tier: LMCache logged '{v.cause}' (it only logs a "
        f"failed remote backend; every request recomputes); fix: {fix}, then restart the unit; "
        f"journalctl -u {unit}"
    )


# LMCache 0.5.6's stock S3 connector (s3_connector.py ``_update_connection_failures``): after
# ``max_connection_failures`` (3) connection errors in a row (refused, socket, DNS, timeout) it
# sets ``connection_disabled``, logs this line at ERROR, and nothing ever clears the flag: every
# later get, put and lookup is skipped for the life of the process while vLLM keeps serving
# (recompute), so no health check sees it. Its DEBUG lines "S3 connection disabled. Skipping
# ..." share the first words; this prefix is the one line that marks the moment. kvceph's
# connector has no such state (a request that fails is a miss, the next one tries again).
S3_DISABLED = "S3 connection disabled after"


def s3_off_at(fact: dict | None) -> str | None:
    """When the engine's current start logged ``S3_DISABLED`` (facts ``S3Disabled``), else None.

    + fact: the ``S3Disabled`` fact (None where it was not read: kvceph's connector)
    """
    fact = fact or {}
    return fact.get("at") if fact.get("started") else None


def shown_time(at: str) -> str:
    """The journal's ISO time (``2026-12-04T13:50:16.124250+0000``, systemd 252 with ``--utc``)
    as ``2026-12-04 13:50:16 UTC``; unparsable text as it came."""
    try:
        t = datetime.fromisoformat(at)
    except ValueError:
        return at
    if t.tzinfo is not None:
        t = t.astimezone(UTC)
    return t.strftime("%Y-%m-%d %H:%M:%S") + (" UTC" if t.tzinfo is not None else "")


def s3_off_reason(at: str, endpoint: str) -> str:
    """The deploy's restart reason for an engine whose LMCache turned S3 off.

    + at: when it logged ``S3_DISABLED`` (the journal's time)
    + endpoint: the S3 endpoint, answering again from the engine's host
    """
    return (
        f"S3 connection disabled at {shown_time(at)} (LMCache's S3 connector stopped using S3 "
        f"after connection errors; it recomputes until restarted) and {endpoint} answers again"
    )


def s3_off_waits(host: str, unit: str, at: str, endpoint: str, why: str) -> str:
    """The deploy's warning for such an engine while the endpoint still does not answer.

    + host, unit: the engine
    + at: when it logged ``S3_DISABLED``
    + endpoint: the S3 endpoint as the engine reaches it
    + why: the probe's last failed try
    """
    return (
        f"kvceph: {host} {unit}: S3 connection disabled at {shown_time(at)} (LMCache recomputes "
        f"every request until restarted); not restarted: {endpoint} does not answer from {host} "
        f"({why}); fix: bring the S3 endpoint back, then rerun the deploy (it restarts the "
        "engine, drained)"
    )
