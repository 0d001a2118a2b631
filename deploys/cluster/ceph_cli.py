"""Bounded ``ceph`` command lines: every call has a deadline and a machine-readable format."""

from __future__ import annotations

import hashlib

from pyinfra.api import QuoteString, StringCommand

# Ceph's own defaults (no connect timeout, commands that wait forever on a lost quorum) would
# hang a deploy; these are the fallbacks when a caller has no CephSettings at hand.
DEFAULT_CONNECT_TIMEOUT = 10
DEFAULT_COMMAND_TIMEOUT = 60
# Seconds between the deadline's TERM and a KILL. A containerized `ceph` (`cephadm shell`, a
# podman wrapper) can outlive TERM: timeout signals its whole process group, podman's own
# `crun kill` that would forward TERM into the container dies of it, and `podman run` waits on
# a CLI that waits on a stopped mgr forever (measured on the cephadm lab: 10 min and counting).
KILL_AFTER = 5


def ceph(
    *args: object,
    connect_timeout: int = DEFAULT_CONNECT_TIMEOUT,
    command_timeout: int = DEFAULT_COMMAND_TIMEOUT,
    json: bool = True,
) -> StringCommand:
    """``timeout -k 5 <s> ceph --connect-timeout <s> <args...> [-f json]``; args are shell-quoted.

    Exit status 124 when TERM at the deadline ended it, 137 when only the KILL did.
    """
    parts: list = ["timeout", "-k", str(KILL_AFTER), str(int(command_timeout)), "ceph"]
    parts += ["--connect-timeout", str(int(connect_timeout))]
    parts += [QuoteString(str(a)) for a in args]
    if json:
        parts += ["-f", "json"]
    return StringCommand(*parts)


def command_timeout(ceph_settings) -> int:
    """Seconds for one radosgw-admin or admin-helper call on the Ceph admin host.

    + ceph_settings: the host's Ceph settings (None: a host without them, the default)
    """
    return ceph_settings.command_timeout if ceph_settings else DEFAULT_COMMAND_TIMEOUT


def timeouts(ceph_settings) -> dict[str, int]:
    """The timeout keyword arguments every kvceph Ceph fact and operation takes."""
    return {
        "connect_timeout": ceph_settings.connect_timeout,
        "command_timeout": ceph_settings.command_timeout,
    }


# Spec keys whose values are secrets (the ingress's TLS private key). The orchestrator's answers
# (``orch ls``, ``--export``) carry them in clear, so the host replaces each by its sha256 before
# pyinfra reads the output: facts, logs and -vvv output never hold the key. (The script spells
# "PRIVATE KEY" apart: -vvv prints the command itself, and no output should hold that phrase.)
SECRET_SPEC_KEYS = ("ssl_key",)
_REDACT = f"""
import hashlib, json, sys
text = sys.stdin.read()
def walk(v):
    if isinstance(v, dict):
        return {{k: ("sha256:" + hashlib.sha256(x.encode()).hexdigest())
                 if k in {SECRET_SPEC_KEYS!r} and isinstance(x, str) else walk(x)
                 for k, x in v.items()}}
    return [walk(x) for x in v] if isinstance(v, list) else v
try:
    print(json.dumps(walk(json.loads(text))))
except ValueError:
    sys.stdout.write("(redacted)\\n" if "PRIVATE " + "KEY" in text else text)
"""


def secret_hash(value: str) -> str:
    """How a secret spec value is compared: ``sha256:<hex>`` (as :func:`redacted` prints it)."""
    return "sha256:" + hashlib.sha256(value.encode()).hexdigest()


def redacted(command: StringCommand) -> StringCommand:
    """``command`` (JSON output), every secret spec value replaced by its hash on the host.

    The command's exit status is kept; its stderr is not touched.
    """
    return StringCommand(
        "out=$(",
        command,
        "); rc=$?; printf '%s\\n' \"$out\" | python3 -c",
        QuoteString(_REDACT),
        "; exit $rc",
    )
