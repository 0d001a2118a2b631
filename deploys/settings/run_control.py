"""The one-run opt-ins an operator passes on the command line (``--data kvceph_allow_...=true``).

Each lets one run do something kvceph refuses by default; none belongs in group_data. pyinfra
turns ``true``/``false`` into bools and ``1``/``0`` into ints and leaves other words as
strings, so every opt-in accepts exactly these, read one way: True, False, unset/None, 1, 0 and
the strings true/false/yes/no/1/0 (any case). Anything else is a one-line error. The other
run keys (status.py's output paths, rotate.py's phase and old key) are checked here too, so
every entry point refuses a bad one before any host is contacted.
"""

from __future__ import annotations

import re
from dataclasses import dataclass, fields
from typing import Any

from deploys.settings.reader import Reader

_TRUE = ("1", "true", "yes")
_FALSE = ("", "0", "false", "no")


@dataclass(frozen=True)
class RunControl:
    """The opt-ins of this run (all False unless the operator passed them)."""

    #: ``kvceph_break_lock``: take the run lock from a holder (deploys/access/lock.py)
    break_lock: bool = False
    #: ``kvceph_allow_data_movement``: pool size changes and PG increases (they backfill data)
    allow_data_movement: bool = False
    #: ``kvceph_allow_pg_decrease``: PG merges
    allow_pg_decrease: bool = False
    #: ``kvceph_allow_lifecycle_removal``: remove kvceph's own stale lifecycle rules
    allow_lifecycle_removal: bool = False
    #: ``kvceph_allow_unprobed_concentrator``: apply the RGW concentrator spec the orchestrator
    #: refused in its dry run
    allow_unprobed_concentrator: bool = False
    #: ``kvceph_status_json`` / ``kvceph_status_png``: where status.py writes (None: the report
    #: directory)
    status_json: str | None = None
    status_png: str | None = None
    #: ``kvceph_rotation`` (add | retire) and ``kvceph_retire_access_key``: rotate.py's phase
    rotation: str | None = None
    retire_access_key: str | None = None
    #: ``kvceph_adopt``: objects kvceph did not create that it may change in this run, by name
    #: (``rgw.tenant``, ``client.rgw.tenant/rgw_dns_name``; deploys/cluster/ownership.py)
    adopt: tuple[str, ...] = ()


PATHS = ("status_json", "status_png")
ROTATION_PHASES = ("add", "retire")
# RGW access keys are letters and digits; anything else is a typo (or a secret pasted).
ACCESS_KEY = re.compile(r"[A-Za-z0-9]{1,128}")
SECRET_KEY_LEN = 40
#: An AWS/RGW secret key's shape: 40 characters of base64's alphabet, mixed case (or with / or
#: +). Access key ids are upper case and digits (AKIA..., RGW's 20), whatever their length.
SECRET_KEY = re.compile(r"(?=.*[a-z/+])[A-Za-z0-9/+]{40}")


def key(name: str) -> str:
    """The ``--data`` key of a :class:`RunControl` field."""
    return f"kvceph_{name}"


# The opt-ins (bools); the other run keys are read by their own functions below.
_OPT_INS = tuple(f.name for f in fields(RunControl) if f.type == "bool")
KEYS = tuple(key(name) for name in _OPT_INS)


def flag(r: Reader, name: str) -> bool:
    """One opt-in, read as the module docstring says."""
    k = key(name)
    value: Any = r.raw(k, None)
    if value is None or isinstance(value, bool):
        return bool(value)
    if isinstance(value, int) and value in (0, 1):
        return bool(value)
    if isinstance(value, str) and value.strip().lower() in _TRUE + _FALSE:
        return value.strip().lower() in _TRUE
    raise r.fail(k, value, "must be true or false", f"pass --data {k}=true, or leave it out")


def names(r: Reader, name: str) -> tuple[str, ...]:
    """An opt-in that names objects: a comma-separated string or a list of names."""
    k = key(name)
    value: Any = r.raw(k, None)
    if value is None or value == "":
        return ()
    items = value.split(",") if isinstance(value, str) else value
    if not isinstance(items, list | tuple) or not all(isinstance(i, str) for i in items):
        raise r.fail(k, value, "must name objects", f"pass --data {k}=rgw.tenant,...")
    return tuple(sorted({i.strip() for i in items if i.strip()}))


def _path(r: Reader, name: str) -> str | None:
    k = key(name)
    value: Any = r.raw(k, None)
    if value is None:
        return None
    if not isinstance(value, str) or not value.strip() or "\0" in value:
        raise r.fail(k, value, "must be a file path", f"pass --data {k}=PATH, or leave it out")
    return value


def _rotation(r: Reader) -> tuple[str | None, str | None]:
    phase = r.raw(key("rotation"), None)
    if phase is not None and phase not in ROTATION_PHASES:
        raise r.fail(
            key("rotation"),
            phase,
            f"must be one of {', '.join(ROTATION_PHASES)}",
            f"pass --data {key('rotation')}=add (then deploy.py, then retire)",
        )
    old = r.raw(key("retire_access_key"), None)
    if isinstance(old, str) and SECRET_KEY.fullmatch(old):
        # Never shown: a secret pasted by mistake must not reach the output.
        raise r.fail(
            key("retire_access_key"),
            "***",
            f"has the shape of a secret key ({SECRET_KEY_LEN} characters, mixed case), not of "
            "an access key id (upper case and digits)",
            f"pass --data {key('retire_access_key')}=<old access key> (never its secret)",
        )
    if old is not None and not (isinstance(old, str) and ACCESS_KEY.fullmatch(old)):
        # Never shown: a secret pasted by mistake must not reach the output.
        raise r.fail(
            key("retire_access_key"),
            "***",
            "is not an access key (letters and digits)",
            f"pass --data {key('retire_access_key')}=<old access key> (never its secret)",
        )
    return phase, old


def load(r: Reader) -> RunControl:
    """The run's opt-ins from one host's data (``--data`` reaches every host), every one
    checked here, so a bad one stops any entry point before a host is contacted."""
    flags = {name: flag(r, name) for name in _OPT_INS}
    phase, old = _rotation(r)
    return RunControl(
        **flags,
        **{name: _path(r, name) for name in PATHS},
        rotation=phase,
        retire_access_key=old,
        adopt=names(r, "adopt"),
    )
