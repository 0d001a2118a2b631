"""Install the pinned engine packages into a dedicated venv."""

from __future__ import annotations

import re
from urllib.parse import urlsplit

from pyinfra import host
from pyinfra.api import QuoteString, StringCommand, operation
from pyinfra.api.exceptions import OperationError
from pyinfra.api.hiddenvalue import HiddenValue

from deploys.facts import memo
from deploys.facts.engine import EngineVersions, ServiceAccount, _norm


def parse_pins(packages) -> dict[str, str]:
    """``["vllm==0.33.0", ...]`` -> ``{"vllm": "0.33.0"}``; anything but ``==`` pins is refused."""
    pins = {}
    for spec in packages:
        m = re.fullmatch(r"\s*([A-Za-z0-9][A-Za-z0-9_.\-]*)\s*==\s*([A-Za-z0-9_.+!\-]+)\s*", spec)
        if not m:
            raise ValueError(f"package {spec!r} is not pinned as name==version")
        pins[_norm(m.group(1))] = m.group(2)
    return pins


def missing_pins(pins: dict[str, str], installed: dict[str, str]) -> list[str]:
    """The pins the venv does not satisfy, as ``name==version`` (installed version noted)."""
    out = []
    for name, version in pins.items():
        have = installed.get(name)
        if have != version:
            out.append(f"{name}=={version} (installed: {have or 'none'})")
    return out


@operation()
def venv_packages(
    venv: str,
    packages: list[str],
    index_url: str | None = None,
    find_links: str | None = None,
    no_deps: list[str] | None = None,
    timeout: int = 3600,
):
    """
    Create ``venv`` (``python3 -m venv``) and install exactly the pinned ``packages`` in it.

    + venv: the venv directory
    + packages: ``name==version`` pins
    + index_url: a package index to install from (else pip's configured default)
    + find_links: a directory of wheels on the host; installs with ``--no-index``
    + no_deps: names among ``packages`` installed with ``--no-deps`` (a second pip call)
    + timeout: seconds pip may take

    Nothing runs when the venv already has every pin (fact ``EngineVersions``).

    .. code:: python

        engine.venv_packages("/opt/kvceph/venv", ["vllm==0.33.0", "lmcache==0.5.6"])
    """
    pins = parse_pins(packages)
    fact = memo.read(host, EngineVersions, venv=venv)
    todo = missing_pins(pins, fact.get("packages", {}))
    if not todo:
        host.noop(f"{venv} has {', '.join(f'{k}=={v}' for k, v in pins.items())}")
        return
    if fact.get("python") is None:
        yield StringCommand("timeout 300 python3 -m venv", QuoteString(venv))
    source: list = []
    if find_links:
        source = ["--no-index", "--find-links", QuoteString(find_links)]
    elif index_url:
        # An index URL may carry a token (https://user:token@host/...): masked in output.
        url = HiddenValue(index_url) if urlsplit(index_url).password else index_url
        source = ["--index-url", QuoteString(url)]
    bare = {_norm(n) for n in (no_deps or [])}
    unknown = bare - set(pins)
    if unknown:
        raise ValueError(f"no_deps names {sorted(unknown)} are not among the pinned packages")
    missing = {item.split("==", 1)[0] for item in todo}
    for group, flags in (
        ([n for n in pins if n not in bare], []),
        ([n for n in pins if n in bare], ["--no-deps"]),
    ):
        if not missing & set(group):
            continue
        yield StringCommand(
            "timeout",
            str(timeout),
            QuoteString(f"{venv}/bin/python"),
            "-m pip install --disable-pip-version-check --no-input --quiet",
            *source,
            *flags,
            *(QuoteString(f"{n}=={pins[n]}") for n in group),
        )


@operation()
def service_account(user: str, home: str, shell: str = "/usr/sbin/nologin"):
    """
    A system user and its own group for the engine (home directory made separately).

    + user: account and group name
    + home: its home directory (``HOME`` of the unit; holds ``.aws``)
    + shell: login shell

    pyinfra's ``server.user``/``server.group`` read the ``Os`` fact and crash on ``None`` when
    a host drops mid-run, which aborts the whole run; this fails only the lost host.
    """
    account = memo.read(host, ServiceAccount, user=user)
    if account is None:
        raise OperationError(f"cannot read the account {user} on {host.name} (host unreachable?)")
    if not account["group"]:
        yield StringCommand("groupadd", "--system", QuoteString(user))
    current = account["user"]
    if current is None:
        yield StringCommand(
            "useradd", "--system", "--gid", QuoteString(user), "--home-dir", QuoteString(home),
            "--no-create-home", "--shell", QuoteString(shell), QuoteString(user),
        )  # fmt: skip
    elif (current.get("group"), current.get("home"), current.get("shell")) != (user, home, shell):
        yield StringCommand(
            "usermod", "--gid", QuoteString(user), "--home", QuoteString(home),
            "--shell", QuoteString(shell), QuoteString(user),
        )  # fmt: skip
    elif account["group"]:
        host.noop(f"service account {user} exists")
