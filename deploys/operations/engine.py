"""Install the pinned engine packages into a dedicated venv."""

from __future__ import annotations

import re
from urllib.parse import urlsplit

from pyinfra import host, inventory, logger
from pyinfra.api import QuoteString, StringCommand, operation
from pyinfra.api.exceptions import OperationError
from pyinfra.api.hiddenvalue import HiddenValue

from deploys import paths
from deploys.engine import engine_lock
from deploys.facts import memo
from deploys.facts.engine import EngineVenvs, EngineVersions, ServiceAccount, _norm


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
    source = _pip_source(find_links, index_url)
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
    yield marker_command(venv)


def marker_command(venv: str) -> StringCommand:
    """Write kvceph's marker into a venv it installed, with the venv's KiB: the prune removes
    only venvs holding it, and the disk check counts what their removal frees.

    + venv: the venv directory
    """
    marker = f"{venv.rstrip('/')}/{paths.VENV_MARKER}"
    return StringCommand(
        "du -sk --one-file-system",
        QuoteString(venv),
        "| awk '{print \"kvceph-venv kib\", $1}' >",
        QuoteString(marker),
    )


def missing_locked(lock: dict, installed: dict[str, str]) -> list[str]:
    """The lock's distributions the venv does not have at their version (``name==version``)."""
    return [f"{n}=={item.version}" for n, item in lock.items() if installed.get(n) != item.version]


@operation()
def locked_venv(
    venv: str,
    lock_path: str,
    lock_text: str,
    index_url: str | None = None,
    find_links: str | None = None,
    timeout: int = 3600,
):
    """
    Create ``venv`` and install exactly the lock's distributions in it, each checked against
    its sha256 (``pip install --no-deps --require-hashes -r``): no resolver runs on the host,
    so every host of a cache group gets the same tree.

    + venv: the venv directory (``<kvceph_venv>-<digest>``: a new profile never touches the
      venv the engines run)
    + lock_path: the lock file on the host (written before this operation)
    + lock_text: its content (decides whether pip runs)
    + index_url: a package index (else pip's configured default)
    + find_links: a directory of wheels on the host; installs with ``--no-index``
    + timeout: seconds pip may take

    Nothing runs when the venv has every locked distribution at its version (``EngineVersions``).

    .. code:: python

        engine.locked_venv("/opt/kvceph/venv-3f2a9c1b7d0e", "/var/cache/kvceph/locks/x.txt", text)
    """
    lock = engine_lock.parse(lock_text, lock_path)
    fact = memo.read(host, EngineVersions, venv=venv)
    todo = missing_locked(lock, fact.get("packages", {}))
    if not todo and fact.get("python"):
        host.noop(f"{venv} has the {len(lock)} locked distributions")
        return
    if fact.get("python") is None:
        yield StringCommand("timeout 300 python3 -m venv", QuoteString(venv))
    source = _pip_source(find_links, index_url)
    yield StringCommand(
        "timeout",
        str(timeout),
        QuoteString(f"{venv}/bin/python"),
        "-m pip install --disable-pip-version-check --no-input --quiet --no-deps --require-hashes",
        *source,
        "-r",
        QuoteString(lock_path),
    )
    yield marker_command(venv)


@operation(is_idempotent=True)
def same_packages(group: str, venvs: dict[str, str], ignore: tuple[str, ...] = ()):
    """
    Refuse, in one line, a cache group whose hosts run different engine packages.

    + group: the cache group, as the line names it
    + venvs: every host of the group -> its profile venv
    + ignore: distributions left out of the comparison (a connector the group does not load:
      the venv of a digest may have been made while it was chosen, and is kept as it is)

    Read when it executes, after every host's install (one call site: every host's install
    precedes it), so the installed sets are what the engines will run. Every host of the group
    reads all of them and fails alike, so none of them goes on to the roll. A host whose venv
    is absent (the plan, before the install) is left out.
    """
    installed = {}
    for name, venv in sorted(venvs.items()):
        other = host if name == host.name else inventory.get_host(name)
        if other is None:
            continue
        installed[name] = memo.read(other, EngineVersions, venv=venv).get("packages", {})
    error = engine_lock.group_difference(group, installed, ignore)
    if error:
        raise OperationError(error)
    host.noop(f"{len([p for p in installed.values() if p])} hosts run identical packages")
    yield from ()


@operation()
def engine_link(link: str, base: str, venv: str):
    """
    The engine's venv link, made once: its ExecStart runs ``<link>/bin/...``, and only the
    engine's restart in the roll switches it (``service.rolling_restart``), so a crash-restart
    before the roll reaches the engine starts the code it ran before.

    + link: ``<parent of kvceph_venv>/engines/<unit>``
    + base: ``kvceph_venv``: a venv there (made before venvs had digests) is what a running
      engine runs, so a new link points there first
    + venv: the profile's venv, for a host with neither

    A symlink rather than a per-unit drop-in: switching it is one rename, with no
    daemon-reload that would also load every other unit file this run wrote.
    """
    fact = memo.first(host, EngineVenvs, base=base)
    if link in fact["links"]:
        host.noop(f"{link} -> {fact['links'][link]}")
        return
    target = base if fact["legacy"] else venv
    yield StringCommand("ln -sfn", QuoteString(target), QuoteString(link))


@operation()
def pruned_venvs(
    base: str,
    venv: str,
    links: list[str],
    when: str = "roll",
    upload: list[str] | None = None,
    lock_text: str | None = None,
):
    """
    Remove kvceph's own venvs and host wheelhouse files that no engine and no rollback needs
    (``engine_lock.prune_plan``).

    + base: ``kvceph_venv``
    + venv: the profile's venv (never removed)
    + links: the venv links of the engines the inventory lists (their targets are kept; a
      link of an engine removed since counts for nothing)
    + when: ``install`` (before the install: only what is beyond the rollback target) or
      ``roll`` (after the host's roll: the venv the engines ran before stays, the rest goes)
    + upload: the wheel files this run uploads (kept)
    + lock_text: the profile's lock (the wheels it names are kept)

    Called after the host's roll: an engine whose restart failed stops the host before this.
    A venv's lock file in /var/cache/kvceph/locks goes with it.

    Both calls plan from the run's first ``EngineVenvs`` answer (``memo.first``): read after
    the roll, the links name the profile's venv and the venv the engines ran before would
    look like any other, so the roll's prune kept one venv too many and the next run's prune
    before the install removed it (a change on a converged host).
    """
    fact = memo.first(host, EngineVenvs, base=base)
    before, after = engine_lock.prune_plan(base, fact, venv, links, upload or (), lock_text)
    gone = before if when == "install" else after
    if not gone.venvs and not gone.wheels:
        host.noop(f"nothing of kvceph's to prune beside {venv}")
        return
    # --dry says what goes, not only that something changes.
    logger.info(
        "kvceph: %s: prune (%s) removes %s",
        host.name,
        when,
        ", ".join([*gone.venvs, *(f"{paths.WHEELHOUSE}/{w}" for w in gone.wheels)]),
    )
    for path in gone.venvs:
        name = path.rsplit("/", 1)[-1]
        yield StringCommand(
            "rm -rf --one-file-system --",
            QuoteString(path),
            QuoteString(f"{paths.ENGINE_LOCK_DIR}/{name}.txt"),
        )
    if gone.wheels:
        yield StringCommand(
            "rm -f --", *(QuoteString(f"{paths.WHEELHOUSE}/{w}") for w in gone.wheels)
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


def _pip_source(find_links: str | None, index_url: str | None) -> list:
    """pip's package source: the wheelhouse offline, else the index (None: pip's default)."""
    if find_links:
        return ["--no-index", "--find-links", QuoteString(find_links)]
    if index_url:
        # An index URL may carry a token (https://user:token@host/...): masked in output.
        url = HiddenValue(index_url) if urlsplit(index_url).password else index_url
        return ["--index-url", QuoteString(url)]
    return []
