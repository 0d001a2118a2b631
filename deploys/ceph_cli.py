"""Bounded ``ceph`` command lines: every call has a deadline and a machine-readable format."""

from __future__ import annotations

from pyinfra.api import QuoteString, StringCommand

# Ceph's own defaults (no connect timeout, commands that wait forever on a lost quorum) would
# hang a deploy; these are the fallbacks when a caller has no CephSettings at hand.
DEFAULT_CONNECT_TIMEOUT = 10
DEFAULT_COMMAND_TIMEOUT = 60


def ceph(
    *args: object,
    connect_timeout: int = DEFAULT_CONNECT_TIMEOUT,
    command_timeout: int = DEFAULT_COMMAND_TIMEOUT,
    json: bool = True,
) -> StringCommand:
    """``timeout <s> ceph --connect-timeout <s> <args...> [-f json]``; args are shell-quoted."""
    parts: list = ["timeout", str(int(command_timeout)), "ceph"]
    parts += ["--connect-timeout", str(int(connect_timeout))]
    parts += [QuoteString(str(a)) for a in args]
    if json:
        parts += ["-f", "json"]
    return StringCommand(*parts)


def timeouts(ceph_settings) -> dict[str, int]:
    """The timeout keyword arguments every kvceph Ceph fact and operation takes."""
    return {
        "connect_timeout": ceph_settings.connect_timeout,
        "command_timeout": ceph_settings.command_timeout,
    }
