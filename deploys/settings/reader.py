"""Typed access to one host's ``kvceph_*`` keys: defaults, types, ranges, one-line errors.

Pure: it reads a mapping (pyinfra's ``host.data`` or a plain dict). Every subject module of
this package reads its keys through a :class:`Reader`; every error is one line naming the
host, the key, the bad value and the fix.
"""

from __future__ import annotations

import ipaddress
import re
from collections.abc import Iterable, Mapping
from typing import Any

from deploys.settings import kinds

INFERENCE_GROUPS = ("gpu", "gaudi")
ACCELERATOR_OF_GROUP = {"gpu": "nvidia", "gaudi": "gaudi"}
_MISSING = object()


class SettingsError(ValueError):
    """A setting is wrong; the message is one line: host, key, value, fix."""


def _fail(host: str, key: str, value: Any, problem: str, fix: str) -> SettingsError:
    return SettingsError(f"{host}: {key} = {value!r}: {problem}; fix: {fix}")


class Reader:
    """Typed access to ``kvceph_*`` keys of one host's data, with defaults and checks."""

    def __init__(self, data: Any, host: str):
        self.data, self.host = data, host
        # Every key looked up, set or not: the keys that act on this host (settings/placement.py).
        self.read: set[str] = set()

    def raw(self, key: str, default: Any = _MISSING) -> Any:
        self.read.add(key)
        return self.peek(key, default)

    def peek(self, key: str, default: Any = _MISSING) -> Any:
        """:meth:`raw` for checks that look at every key (file formats, secrets): the key does
        not count as acting on this host."""
        getter = getattr(self.data, "get", None)
        value = getter(key, _MISSING) if getter else _MISSING
        if value is _MISSING:
            if default is _MISSING:
                raise _fail(
                    self.host, key, None, "required setting is missing", "set it in group_data"
                )
            return default
        return value

    def fail(self, key: str, value: Any, problem: str, fix: str) -> SettingsError:
        return _fail(self.host, key, value, problem, fix)

    def str(self, key: str, default: Any = _MISSING, pattern: str | None = None) -> str:
        value = self.raw(key, default)
        if not isinstance(value, str) or not value.strip():
            raise self.fail(key, value, "must be a non-empty string", "set a string value")
        if value != value.strip():
            # Stray whitespace is the seed's "API returns 401" failure mode.
            raise self.fail(key, value, "has leading/trailing whitespace", "remove the spaces")
        if re.search(r"[\x00-\x1f\x7f]", value):
            # A uid, a rule id, a display name: each lands in one argv word or one line.
            raise self.fail(
                key, value, "holds a control character (a newline?)", "write it on one line"
            )
        if pattern and not re.fullmatch(pattern, value):
            raise self.fail(key, value, f"does not match {pattern}", "use an allowed value")
        return value

    def opt_str(self, key: str) -> str | None:
        value = self.raw(key, None)
        return None if value is None else self.str(key)

    def bool(self, key: str, default: Any = _MISSING) -> bool:
        value = self.raw(key, default)
        if not isinstance(value, bool):
            raise self.fail(key, value, "must be True or False", "use a Python bool")
        return value

    def int(
        self, key: str, default: Any = _MISSING, lo: int | None = None, hi: int | None = None
    ) -> int:
        value = self.raw(key, default)
        if isinstance(value, bool) or not isinstance(value, int):
            raise self.fail(key, value, "must be an integer", "use a whole number")
        if lo is not None and value < lo:
            raise self.fail(key, value, f"must be >= {lo}", f"use a value of at least {lo}")
        if hi is not None and value > hi:
            raise self.fail(key, value, f"must be <= {hi}", f"use a value of at most {hi}")
        return value

    def opt_int(self, key: str, lo: int | None = None, hi: int | None = None) -> int | None:
        return None if self.raw(key, None) is None else self.int(key, lo=lo, hi=hi)

    def float(self, key: str, default: Any = _MISSING, lo: float = 0.0, hi: float = 1.0) -> float:
        value = self.raw(key, default)
        if isinstance(value, bool) or not isinstance(value, (int, float)) or not lo < value <= hi:
            raise self.fail(key, value, f"must be a number in ({lo}, {hi}]", "use e.g. 0.55")
        return float(value)

    def port(self, key: str, default: Any = _MISSING) -> int:
        return self.int(key, default, lo=1, hi=65535)

    def choice(self, key: str, default: Any, choices: Iterable[str]) -> str:
        choices = tuple(choices)
        value = self.raw(key, default)
        if value not in choices:
            raise self.fail(key, value, f"must be one of {', '.join(choices)}", "pick one of those")
        return value

    def list(self, key: str, default: Any = _MISSING) -> list:
        value = self.raw(key, default)
        if not isinstance(value, (list, tuple)):
            raise self.fail(key, value, "must be a list", "use a Python list")
        return list(value)

    def dict(self, key: str, default: Any = _MISSING) -> dict:
        value = self.raw(key, default)
        if not isinstance(value, Mapping):
            raise self.fail(key, value, "must be a dict", "use a Python dict")
        return dict(value)

    def ip(self, key: str, value: str, example: str, prefix: bool = False) -> str:
        """``value`` (read from ``key``) as an IP address (with ``prefix``: an IP/prefix, an
        interface address), or the one-line error with ``example`` as the fix."""
        parse, what = (
            (ipaddress.ip_interface, "IP/prefix")
            if prefix
            else (ipaddress.ip_address, "IP address")
        )
        try:
            parse(value)
        except ValueError:
            raise self.fail(key, value, f"is not an {what}", f"use {example}") from None
        return value

    def cidrs(self, key: str, default: Any) -> tuple[str, ...]:
        """A list of CIDRs (host bits allowed), or the one-line error naming the first bad one."""
        networks = tuple(self.list(key, default))
        for net in networks:
            try:
                ipaddress.ip_network(net, strict=False)
            except (ValueError, TypeError):
                raise self.fail(key, net, "is not a CIDR", "use e.g. 10.67.67.0/24") from None
        return networks

    def path(self, key: str, default: Any = _MISSING) -> str:
        """An absolute path on the hosts (letters, digits, ``_ . / -``), no ``..`` in it, and
        no place kvceph's use of it (``kinds.PATH_USE``: every path key is listed there) makes
        a system directory of the engine's."""
        if key not in kinds.PATH_USE:
            raise KeyError(f"{key}: a path setting missing from deploys/settings/kinds.py PATH_USE")
        value = self.str(key, default, pattern=ABSOLUTE_PATH)
        if ".." in value.split("/"):
            # /dev/shm/../../etc/kvceph: the directory is not where the setting says.
            raise self.fail(key, value, "has a '..' part", "give the directory without '..'")
        problem = kinds.path_problem(key, value)
        if problem:
            raise self.fail(key, value, *problem)
        return value

    def uid(self, key: str, default: Any = _MISSING) -> str:
        """An RGW uid kvceph creates or uses (``kinds.RGW_UID``); distinctness across the
        fleet is settings/inventory.py's."""
        value = self.str(key, default)
        problem = kinds.rgw_uid_problem(value)
        if problem:
            raise self.fail(key, value, *problem)
        return value

    def size(
        self, key: str, default: Any, lo: float, hi: tuple[float, str], example: str,
        unit: str = "GiB",
    ) -> float | None:  # fmt: skip
        """A size in ``unit`` (finite, in [lo, hi[0]]: hi[1] says why), or None where the
        value is None."""
        value = self.raw(key, default)
        if value is None:
            return None
        problem = kinds.size_problem(value, lo, hi[0], unit, hi[1])
        if problem:
            raise self.fail(key, value, problem, f"use e.g. {example}")
        return float(value)

    def duration(self, key: str, default: Any, lo_ms: int, example: str) -> str | None:
        """A Prometheus duration of at least ``lo_ms`` and within promtool's range, or None."""
        value = self.raw(key, default)
        if value is None:
            return None
        value = self.str(key, default)
        problem = kinds.duration_problem(value, lo_ms)
        if problem:
            raise self.fail(key, value, problem, f"use e.g. {example}")
        return value

    def url(self, key: str) -> str | None:
        """An http(s) URL given as one argument (a package index), or None when unset."""
        value = self.opt_str(key)
        problem = None if value is None else kinds.url_problem(value)
        if problem:
            raise self.fail(key, value, problem, "use e.g. https://pypi.org/simple")
        return value


# A host name as the orchestrator lists it (`ceph orch host ls`).
HOSTNAME = r"[A-Za-z0-9][A-Za-z0-9.\-]{0,252}"
# An absolute path on the hosts: no spaces or shell characters (it lands in units and argv).
ABSOLUTE_PATH = r"/[A-Za-z0-9_./\-]+"
