"""The one-run opt-ins an operator passes on the command line (``--data kvceph_allow_...=true``).

Each lets one run do something kvceph refuses by default; none belongs in group_data. pyinfra
turns ``true``/``false`` into bools and ``1``/``0`` into ints and leaves other words as
strings, so every opt-in accepts exactly these, read one way: True, False, unset/None, 1, 0 and
the strings true/false/yes/no/1/0 (any case). Anything else is a one-line error.
"""

from __future__ import annotations

from dataclasses import dataclass, fields
from typing import Any

from deploys.settings.reader import Reader

_TRUE = ("1", "true", "yes")
_FALSE = ("", "0", "false", "no")


@dataclass(frozen=True)
class RunControl:
    """The opt-ins of this run (all False unless the operator passed them)."""

    #: ``kvceph_break_lock``: take the run lock from a holder (deploys/lock.py)
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


def key(name: str) -> str:
    """The ``--data`` key of a :class:`RunControl` field."""
    return f"kvceph_{name}"


KEYS = tuple(key(f.name) for f in fields(RunControl))


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


def load(r: Reader) -> RunControl:
    """The run's opt-ins from one host's data (``--data`` reaches every host)."""
    return RunControl(**{f.name: flag(r, f.name) for f in fields(RunControl)})
