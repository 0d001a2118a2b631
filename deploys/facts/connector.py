"""Facts about the engine's remote tier: kvceph's connector in the venv, LMCache's compiled CUDA
ops, and what LMCache logged about its remote backend (and S3 turned off) since the engine
started."""

from __future__ import annotations

import re

from pyinfra.api import FactBase, QuoteString, StringCommand

from deploys.facts.engine import venv_script
from deploys.facts.probe_output import last_json_line
from deploys.tier import connector_package, remote_tier

# Runs in the venv's python: the connector's version and the content hash of its RECORD lines
# (connector_package.content_hash, the same filter: keep the two in step).
_CONNECTOR_SCRIPT = f"""
import hashlib, json, importlib.metadata as m
try:
    d = m.distribution({connector_package.DISTRIBUTION!r})
except m.PackageNotFoundError:
    print(json.dumps({{"version": None, "content": None}}))
else:
    own = sorted(
        line.strip() for line in (d.read_text("RECORD") or "").splitlines()
        if line.startswith({connector_package.PACKAGE + "/"!r}) and ",sha256=" in line
        and ".pyc," not in line
    )
    content = hashlib.sha256("\\n".join(own).encode()).hexdigest()
    print(json.dumps({{"version": d.version, "content": content}}))
"""


class ConnectorInstalled(FactBase):
    """
    kvceph's connector in the engine venv: ``{"version": "0.1.0", "content": "<sha256>"}``;
    both None when it is not installed, ``{}`` when the venv does not exist.
    """

    default = dict

    def command(self, venv: str, timeout: int = 60):
        return venv_script(venv, _CONNECTOR_SCRIPT, timeout)

    def process(self, output):
        return last_json_line(output) or {}


# Imports lmcache.cuda_ops where LMCache 0.5.6's CudaDeviceOps.ensure_native() does
# (lmcache/v1/platform/devices/cuda/device_ops.py): failing there, LMCache logs "lmcache.cuda_ops
# compiled extension not found" and copies to the GPU with its torch fallback.
_COMPILED_OPS_SCRIPT = """
import json, importlib.metadata as m, importlib.util as u
def version(name):
    try:
        return m.version(name)
    except m.PackageNotFoundError:
        return None
out = {"torch": version("torch"), "lmcache": version("lmcache"), "loaded": None, "error": None}
if out["torch"] and out["lmcache"]:
    try:
        import torch
        import lmcache.cuda_ops
        out["loaded"] = True
    except Exception as exc:
        out["loaded"] = False
        out["error"] = f"{type(exc).__name__}: {exc}"[:300]
print(json.dumps(out))
"""


class CompiledOps(FactBase):
    """
    Whether LMCache's compiled CUDA ops load in the engine venv with its torch.

    Returns ``{"torch": "2.9.0+cu128", "lmcache": "0.5.6", "loaded": True, "error": None}``;
    ``loaded`` is None when there is no torch or no LMCache to try (an emulating engine), and
    ``{}`` when the venv does not exist.
    """

    default = dict

    def command(self, venv: str, timeout: int = 120):
        return venv_script(venv, _COMPILED_OPS_SCRIPT, timeout, quiet=True)

    def process(self, output):
        return last_json_line(output) or {}


def _started_lines(output) -> list[str] | None:
    """The journal lines after a journal command's 'started' line, or None when not started."""
    lines = [line for line in output if line.strip()]
    if not lines or lines[0].strip() != "started":
        return None
    return lines[1:]


class RemoteTierLog(FactBase):
    """
    LMCache's remote-backend lines in the unit's journal since its main process started, oldest
    first (``remote_tier.PREFILTER`` picks them; ``remote_tier.verdict`` reads them).

    Returns ``{"started": True, "lines": ["... Created remote backend for plugin: kvceph"]}``;
    ``started`` is False when the unit runs no process (nothing to read).
    """

    def default(self):
        return {"started": False, "lines": []}

    def command(self, unit: str = "vllm.service"):
        u = QuoteString(unit)
        return StringCommand(
            "t=$(timeout 20 systemctl show -p ExecMainStartTimestamp --timestamp=unix --value",
            u,
            "2>/dev/null); pid=$(timeout 20 systemctl show -p MainPID --value",
            u,
            '2>/dev/null); if [ -n "$pid" ] && [ "$pid" != 0 ] && [ -n "$t" ]; then echo started;'
            " timeout 30 journalctl -q --no-pager -o cat -u",
            u,
            '--since "$t" | grep -E',
            QuoteString(remote_tier.PREFILTER),
            "| tail -n 200; fi; true",
        )

    def process(self, output):
        lines = _started_lines(output)
        return self.default() if lines is None else {"started": True, "lines": lines}


# LMCache's console formatter colours its lines (lmcache/logging.py).
_ANSI = re.compile(r"\x1b\[[0-9;]*m")


def _this_start_journal(unit: str, *grep) -> StringCommand:
    """'started' when the unit runs a process, then the lines of the journal of its current
    start (systemd's InvocationID: a restart begins a new one) that ``grep`` (the rest of the
    pipeline, ending in ";") lets through; nothing when it runs none."""
    u = QuoteString(unit)
    return StringCommand(
        "id=$(timeout 20 systemctl show -p InvocationID --value",
        u,
        "2>/dev/null); pid=$(timeout 20 systemctl show -p MainPID --value",
        u,
        '2>/dev/null); if [ -n "$id" ] && [ -n "$pid" ] && [ "$pid" != 0 ]; then echo started;'
        # UTC ISO times with microseconds
        " timeout 30 journalctl -q --no-pager --utc -o short-iso-precise"
        ' "_SYSTEMD_INVOCATION_ID=$id" |',
        *grep,
        "fi; true",
    )


class S3Disabled(FactBase):
    """
    Whether LMCache's stock S3 connector turned S3 off in the unit's current start: its
    ``remote_tier.S3_DISABLED`` line in the journal of this start only (systemd's
    ``InvocationID``: a restart begins a new one), through ``journalctl
    _SYSTEMD_INVOCATION_ID=``.

    + unit: the engine's systemd unit

    Returns ``{"started": True, "at": "2026-12-04T13:50:16.124250+0000", "line": "... S3
    connection disabled after 3 consecutive failures. ..."}``, ``at`` and ``line`` None when
    not logged; ``started`` False when the unit runs no process (nothing to read).
    """

    def default(self):
        return {"started": False, "at": None, "line": None}

    def command(self, unit: str = "vllm.service"):
        # -m 1: the first worker's line is the moment.
        return _this_start_journal(unit, "grep -F -m 1", QuoteString(remote_tier.S3_DISABLED), ";")

    def process(self, output):
        lines = _started_lines(output)
        if lines is None:
            return self.default()
        if not lines:
            return {"started": True, "at": None, "line": None}
        # "<time> <host> <ident>[<pid>]: <message>"; the message may carry LMCache's colours.
        at, _, rest = lines[0].strip().partition(" ")
        message = rest.split(": ", 1)[-1]
        return {"started": True, "at": at, "line": _ANSI.sub("", message).strip()[:300]}


#: kvceph's connector's running count of skipped puts (kvceph_connector/admission.py), logged at
#: most once a minute while puts are skipped.
PUTS_SKIPPED = "kvceph: skip_short_puts since start: skipped"
_PUTS = re.compile(r"skip_short_puts since start: skipped (\d+), stored (\d+)")


class PutsSkipped(FactBase):
    """
    The latest count kvceph's connector logged of puts it skipped (``kvceph.skip_short_puts``)
    in the unit's current start (systemd's ``InvocationID``), each worker's line alike: the
    lab engine logs one for all workers, vLLM one per worker process (the last one read).

    + unit: the engine's systemd unit

    Returns ``{"started": True, "at": "2026-12-04T16:40:01.123456+0000", "skipped": 4,
    "stored": 10}``; ``at``, ``skipped`` and ``stored`` None when nothing was skipped yet;
    ``started`` False when the unit runs no process (nothing to read).
    """

    def default(self):
        return {"started": False, "at": None, "skipped": None, "stored": None}

    def command(self, unit: str = "vllm.service"):
        return _this_start_journal(unit, "grep -F", QuoteString(PUTS_SKIPPED), "| tail -n 1;")

    def process(self, output):
        lines = _started_lines(output)
        if lines is None:
            return self.default()
        found = _PUTS.search(lines[-1]) if lines else None
        if found is None:
            return {"started": True, "at": None, "skipped": None, "stored": None}
        at = lines[-1].strip().partition(" ")[0]
        return {
            "started": True,
            "at": at,
            "skipped": int(found.group(1)),
            "stored": int(found.group(2)),
        }


#: kvceph's connector's running count of GET bodies refused on their crc32c
#: (kvceph_connector/s3core.py ``REFUSED_LINE``), logged at most once a minute while it refuses.
CRC32C_REFUSED = "kvceph: crc32c since start: refused"
_CRC32C = re.compile(r"crc32c since start: refused (\d+) GET bodies of (\d+) checked")


class Crc32cRefused(FactBase):
    """
    The latest count kvceph's connector logged of GET bodies it refused on their crc32c (each a
    miss: ``kvceph.verify_crc32c``, the default) in the unit's current start (systemd's
    ``InvocationID``): the lab engine logs one count for all workers, vLLM one per worker
    process (the last one read).

    + unit: the engine's systemd unit

    Returns ``{"started": True, "at": "2026-12-07T05:21:40.512000+0000", "refused": 3,
    "checked": 9}``; ``at``, ``refused`` and ``checked`` None when none was refused yet;
    ``started`` False when the unit runs no process (nothing to read).
    """

    def default(self):
        return {"started": False, "at": None, "refused": None, "checked": None}

    def command(self, unit: str = "vllm.service"):
        return _this_start_journal(unit, "grep -F", QuoteString(CRC32C_REFUSED), "| tail -n 1;")

    def process(self, output):
        lines = _started_lines(output)
        if lines is None:
            return self.default()
        found = _CRC32C.search(lines[-1]) if lines else None
        if found is None:
            return {"started": True, "at": None, "refused": None, "checked": None}
        return {
            "started": True,
            "at": lines[-1].strip().partition(" ")[0],
            "refused": int(found.group(1)),
            "checked": int(found.group(2)),
        }
