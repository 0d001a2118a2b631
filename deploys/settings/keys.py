"""The group_data keys kvceph knows, and the check that refuses the others before any host is
touched: a misspelled ``kvceph_*`` key (it would be ignored and the default deployed) and a key
that looks like a secret, whatever its prefix.

The registry is the code itself: every ``"kvceph_..."`` string literal in the ``deploys``
package, and the one-run opt-ins named from ``run_control.RunControl``'s fields. The docs'
group_data reference is tested against the same set (tests/unit/test_readme.py), so a setting
is known, and must be documented, as soon as the code reads it; no list is kept by hand.
"""

from __future__ import annotations

import difflib
import re
from collections.abc import Mapping
from functools import cache
from pathlib import Path
from typing import Any

import deploys
from deploys.settings import run_control, secret_names
from deploys.settings.secrets import MECHANISM

PREFIX = "kvceph_"
_LITERAL = re.compile(r"""["'](kvceph_[a-z0-9_]+)["']""")
# kvceph_* literals that name no setting: the marker of an untranslatable lifecycle rule
# (deploys/facts/rgw.py), the engine gate's module name (paths.GUARD_MODULE) and the
# connector package's import name (deploys/remote/s3probe.py).
NOT_SETTINGS = frozenset({"kvceph_untranslatable", "kvceph_engine_guard", "kvceph_connector"})


@cache
def known() -> frozenset[str]:
    """Every key the code reads, the refused secret names (secret_names.GROUP_DATA_SECRETS)
    included: the literals, and the run's ``--data`` opt-ins (named from RunControl's fields)."""
    root = Path(deploys.__file__).resolve().parent
    found: set[str] = set(run_control.KEYS)
    for path in sorted(root.rglob("*.py")):
        found.update(_LITERAL.findall(path.read_text()))
    return frozenset(found - NOT_SETTINGS)


def documented() -> frozenset[str]:
    """The settings the group_data reference lists (the refused secret names are not settings)."""
    return known() - set(secret_names.GROUP_DATA_SECRETS)


def data_keys(data: Any) -> list[str]:
    """The keys of one host's data: a mapping, or pyinfra's ``host.data`` (``.dict()``)."""
    if isinstance(data, Mapping):
        keys = data.keys()
    else:
        merged = getattr(data, "dict", None)
        keys = merged().keys() if callable(merged) else ()
    return sorted(str(k) for k in keys)


def closest(key: str) -> str | None:
    """The known setting nearest to a misspelled ``kvceph_*`` key, or None."""
    tail = key.lower().removeprefix(PREFIX)
    tails = {k.removeprefix(PREFIX): k for k in documented()}
    match = difflib.get_close_matches(tail, sorted(tails), n=1, cutoff=0.6)
    return tails[match[0]] if match else None


def refusal(key: str) -> tuple[str, str] | None:
    """(why, fix) when a group_data / inventory key is refused, else None: a secret-looking key
    or an unknown ``kvceph_*`` key.

    pyinfra's own keys (``ssh_*``, ``_sudo*``, ``_su_*``) and names whose secret word is only a
    unit (``LAB_KV_BYTES_PER_TOKEN``) pass; other keys without the prefix are the operator's.
    """
    if key in known():
        return None
    if secret_names.looks_secret_key(key):
        return (
            "looks like a secret (KEY/TOKEN/SECRET/PASSWORD/CREDENTIALS in its name), and "
            "group_data and the inventory are committed",
            f"remove it; {MECHANISM}",
        )
    if key.lower().startswith(PREFIX):
        match = closest(key)
        return (
            "is not a kvceph setting (it would be ignored and the default deployed)",
            f"did you mean {match}?"
            if match
            else "remove it, or use a key of the group_data reference",
        )
    return None


def refuse_unknown(r) -> None:
    """Refuse a secret-looking or an unknown ``kvceph_*`` key of one host's data (:func:`refusal`).

    + r: the host's settings reader (deploys/settings/reader.py ``Reader``)
    """
    for key in data_keys(r.data):
        refused = refusal(key)
        if refused is not None:
            value = "***" if secret_names.looks_secret_key(key) else r.raw(key)
            raise r.fail(key, value, *refused)
