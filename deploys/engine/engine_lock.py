"""The engine's whole dependency tree, locked with hashes, and the venvs named by it.

A profile installs into ``<kvceph_venv>-<digest>``, a new venv beside the one the engines run,
from a lock that pins every distribution with its sha256 (``pip install --no-deps
--require-hashes -r``): hosts installed weeks apart get the same bytes. The digest covers the
lock and the profile's pins and versions, so a profile change is a new venv and the running
engines keep theirs until the roll restarts them (``engine_link``: each engine's ExecStart
goes through a per-engine symlink that only its restart switches).

Where the lock comes from (``deploys/settings/engine.py`` ``_lock`` picks, in this order):
- ``kvceph_engine_lock``: a requirements file with ``--hash`` lines the operator keeps, or
  False: no lock (pip resolves on each host);
- a wheelhouse profile (the lab, Gaudi's): rendered from the wheels kvceph uploads (every
  wheel there is part of the tree: ``pip download`` put it there);
- the built-in NVIDIA profile from the index: the lock kvceph ships (``locks/nvidia.txt``,
  ``make locks`` compiles it from the profile with ``locks/compile.py``: one ``uv pip
  compile`` per CPython minor, merged here by :func:`merge` into one tree for all of them).
"""

from __future__ import annotations

import functools
import hashlib
import re
from collections.abc import Iterable, Mapping
from dataclasses import dataclass
from pathlib import Path

# A wheel's file name (PEP 427): name-version(-build)?-python-abi-platform.whl
_WHEEL = re.compile(
    r"(?P<name>[A-Za-z0-9_.]+)-(?P<version>[A-Za-z0-9_.+!]+)(-\d[^-]*)?-[^-]+-[^-]+-[^-]+\.whl"
)
# A lock line: name==version followed by one or more --hash=sha256:<hex>.
_LINE = re.compile(r"([A-Za-z0-9][A-Za-z0-9_.\-]*)==([A-Za-z0-9_.+!\-]+)((?:\s+--hash=\S+)+)")
_HASH = re.compile(r"--hash=sha256:([0-9a-f]{64})")
# A shipped lock's header fields, ``# kvceph-lock-<field>: <value>``: what it was compiled for,
# read back by preflight (``python``) and the tests (``profile``).
_FIELD = re.compile(r"#\s*kvceph-lock-([a-z]+):\s*(.*?)\s*")
# A compiled lock's ``# via a, b`` line (uv's --annotation-style line) under a distribution.
_VIA = re.compile(r"\s+#\s*via\s+(.*)")
# ``<kvceph_venv>-<12 hex>``: only these are venvs kvceph made (and may prune).
DIGEST_LEN = 12
# Distributions ``python3 -m venv`` puts in every venv: never compared (a wheelhouse lock leaves
# them out; a compiled one holds setuptools where the tree needs a newer one).
VENV_SEEDS = frozenset({"pip", "setuptools", "wheel"})


def norm(name: str) -> str:
    """PEP 503 normalised distribution name."""
    return re.sub(r"[-_.]+", "-", name).lower()


@dataclass(frozen=True)
class Locked:
    """One distribution of the lock: its version and every acceptable wheel's sha256."""

    version: str
    hashes: tuple[str, ...]


def wheel_name(path: str | Path) -> tuple[str, str]:
    """(normalised name, version) of a wheel file; ValueError for anything else."""
    m = _WHEEL.fullmatch(Path(path).name)
    if not m:
        raise ValueError(f"{Path(path).name}: not a wheel file name (PEP 427)")
    return norm(m.group("name")), m.group("version")


def from_wheels(wheels: Mapping[str, str]) -> dict[str, Locked]:
    """The lock of a wheelhouse: wheel file name -> its sha256 hex.

    Two versions of one distribution cannot both be installed: refused (ValueError)."""
    found: dict[str, tuple[str, set[str]]] = {}
    for file, sha in wheels.items():
        name, version = wheel_name(file)
        have = found.setdefault(name, (version, set()))
        if have[0] != version:
            raise ValueError(f"the wheelhouse holds {name} {have[0]} and {version}: keep one")
        have[1].add(sha)
    return {n: Locked(v, tuple(sorted(h))) for n, (v, h) in sorted(found.items())}


def hash_wheelhouse(directory: str | Path) -> dict[str, str]:
    """Wheel file name -> sha256 hex, for every ``*.whl`` of a controller directory."""
    out = {}
    for path in sorted(Path(directory).glob("*.whl")):
        digest = hashlib.sha256()
        with path.open("rb") as f:
            for block in iter(lambda: f.read(1 << 20), b""):
                digest.update(block)
        out[path.name] = digest.hexdigest()
    return out


def render(lock: Mapping[str, Locked]) -> str:
    """The lock as a pip requirements file (``--require-hashes`` reads it)."""
    lines = ["# Managed by kvceph (deploys/engine_lock.py): pip install --no-deps --require-hashes"]
    for name, item in sorted(lock.items()):
        hashes = " \\\n".join(f"    --hash=sha256:{h}" for h in item.hashes)
        lines.append(f"{name}=={item.version} \\\n{hashes}")
    return "\n".join(lines) + "\n"


@functools.lru_cache(maxsize=8)
def parse(text: str, source: str = "lock") -> dict[str, Locked]:
    """A requirements file with hashes -> the lock; ValueError naming the line otherwise.
    Cached (the shipped lock takes ~40 ms, and settings, the stage and the operation read it
    for every host): the caller must not change the result.

    + text: the file (``pip-compile --generate-hashes`` / ``uv pip compile --generate-hashes``
      output, or ``render``'s)
    + source: the file's name, for the errors
    """
    logical = re.sub(r"\\\n", " ", text)
    lock: dict[str, Locked] = {}
    for raw in logical.splitlines():
        line = raw.split(" #", 1)[0].strip()
        if not line or line.startswith("#"):
            continue
        if ";" in line:
            # One lock serves one platform: a marker would install a different tree elsewhere.
            raise ValueError(f"{source}: {line[:60]!r}: environment markers are not locked")
        m = _LINE.fullmatch(line)
        if not m:
            raise ValueError(
                f"{source}: {line[:60]!r} is not name==version with --hash=sha256: lines"
            )
        hashes = tuple(sorted(_HASH.findall(m.group(3))))
        if not hashes:
            raise ValueError(f"{source}: {m.group(1)} has no sha256 hash")
        lock[norm(m.group(1))] = Locked(m.group(2), hashes)
    if not lock:
        raise ValueError(f"{source}: locks nothing")
    return lock


def pins(packages: Iterable[str]) -> dict[str, str]:
    """A profile's ``name==version`` pins by normalised name (anything else left out: the
    engine-software stage refuses it)."""
    found = {}
    for spec in packages:
        m = re.fullmatch(r"\s*([A-Za-z0-9][A-Za-z0-9_.\-]*)\s*==\s*([A-Za-z0-9_.+!\-]+)\s*", spec)
        if m:
            found[norm(m.group(1))] = m.group(2)
    return found


def missing_from_lock(pins: Mapping[str, str], lock: Mapping[str, Locked]) -> list[str]:
    """The profile's pins the lock does not hold at the pinned version (``name==version``)."""
    return [
        f"{n}=={v}" for n, v in sorted(pins.items()) if lock.get(n, Locked("", ())).version != v
    ]


def digest(pins: Mapping[str, str], vllm: str, lmcache: str, lock_text: str) -> str:
    """The venv's name: 12 hex of what decides its content (the lock, the pins, the versions
    the profile declares: the lab engine emulates its vLLM version)."""
    material = "\n".join(
        [*(f"{n}=={v}" for n, v in sorted(pins.items())), f"vllm {vllm}", f"lmcache {lmcache}"]
    )
    return hashlib.sha256(f"{material}\n--\n{lock_text}".encode()).hexdigest()[:DIGEST_LEN]


def venv_path(base: str, name: str) -> str:
    """``/opt/kvceph/venv`` + digest -> ``/opt/kvceph/venv-<digest>``."""
    return f"{base.rstrip('/')}-{name}"


def link_path(base: str, unit: str) -> str:
    """The engine's venv link (its ExecStart goes through it): ``/opt/kvceph/engines/vllm``."""
    parent = base.rstrip("/").rsplit("/", 1)[0] or "/"
    return f"{parent.rstrip('/')}/engines/{unit.removesuffix('.service')}"


def is_digest_venv(base: str, path: str) -> bool:
    """A venv kvceph named by a digest (and so may prune); the legacy ``base`` itself is not."""
    prefix = f"{base.rstrip('/')}-"
    rest = path.rstrip("/")[len(prefix) :] if path.startswith(prefix) else ""
    return bool(re.fullmatch(rf"[0-9a-f]{{{DIGEST_LEN}}}", rest))


def to_prune(
    base: str,
    venvs: Mapping[str, float],
    in_use: Iterable[str],
    owned: Iterable[str],
    keep: int = 1,
):
    """The venvs to remove, oldest first.

    + base: ``kvceph_venv``
    + venvs: venv path -> modification time (the ``EngineVenvs`` fact)
    + in_use: the desired venv and every engine link's target (never removed)
    + owned: the venvs kvceph made (its marker in them, or its lock record beside them)
    + keep: how many other venvs stay for a rollback, the newest first

    Only ``<base>-<digest>`` venvs kvceph made are candidates: the legacy ``base`` venv, a
    same-named directory an operator made and anything else kvceph did not name stay.
    """
    used = {p.rstrip("/") for p in in_use}
    mine = {p.rstrip("/") for p in owned}
    spare = sorted(
        (
            p
            for p in venvs
            if is_digest_venv(base, p) and p.rstrip("/") in mine and p.rstrip("/") not in used
        ),
        key=lambda p: (venvs[p], p),
        reverse=True,
    )
    return sorted(spare[keep:], key=lambda p: (venvs[p], p))


def owned_venvs(fact: Mapping) -> list[str]:
    """The venvs of an ``EngineVenvs`` answer kvceph made: its marker (``paths.VENV_MARKER``)
    in them, or (venvs made before the marker) its lock record of the same name."""
    marks, locks = fact.get("marks", {}), fact.get("locks", {})
    return sorted(p for p in fact.get("venvs", {}) if p in marks or Path(p).name in locks)


@dataclass(frozen=True)
class Prune:
    """What one prune removes: venv paths (oldest first) and wheel file names."""

    venvs: tuple[str, ...]
    wheels: tuple[str, ...]


def prune_plan(
    base: str,
    fact: Mapping,
    venv: str,
    links: Iterable[str],
    upload: Iterable[str] = (),
    lock_text: str | None = None,
) -> tuple[Prune, Prune]:
    """(before the install, after the roll): what kvceph removes of its own venvs and host
    wheelhouse, from one ``EngineVenvs`` answer read before anything changed.

    + base: ``kvceph_venv``
    + fact: the ``EngineVenvs`` answer
    + venv: the profile's venv (the current one: never removed)
    + links: the venv links of the engines the inventory lists (a link of an engine removed
      since keeps nothing)
    + upload: the wheel files this run uploads (the current wheelhouse: never removed)
    + lock_text: the profile's lock (its wheels stay)

    Before the install only what no rollback needs goes: every venv but the current one, the
    ones the engines run and the newest other. After the roll (every listed engine then runs
    ``venv``), the one the engines ran before stays as the rollback target; where they ran
    ``venv`` already, the newest other does. Wheels stay while a kept venv's lock names them;
    where a kept venv has no lock record (no lock, or the venv before digests) none goes.
    """
    links = set(links)
    venvs = fact.get("venvs", {})
    running = {t.rstrip("/") for lk, t in fact.get("links", {}).items() if lk in links}
    owned = owned_venvs(fact)
    rolled = bool(running - {venv})
    before = to_prune(base, venvs, [venv, *running], owned, keep=1)
    after = to_prune(base, venvs, [venv, *running], owned, keep=0 if rolled else 1)
    every = {p.rstrip("/") for p in venvs} | running
    pre_kept = every - set(before)
    post_kept = pre_kept - set(after)
    pre_wheels = _spare_wheels(fact, venv, pre_kept, running, upload, lock_text)
    post_wheels = _spare_wheels(fact, venv, post_kept, running, upload, lock_text)
    return (
        Prune(tuple(before), tuple(pre_wheels)),
        Prune(
            tuple(p for p in after if p not in before),
            tuple(w for w in post_wheels if w not in pre_wheels),
        ),
    )


def _spare_wheels(fact, venv, kept, running, upload, lock_text) -> list[str]:
    """The host's wheel files that neither this run's upload nor a kept venv's lock names;
    none where a kept venv kvceph made, or one an engine runs, has no lock record (its
    wheels unknown). A directory kvceph did not make installed nothing from them."""
    locks = fact.get("locks", {})
    needed = [{n: i.version for n, i in parse(lock_text).items()}] if lock_text else []
    for path in sorted(set(kept) - {venv}):
        if Path(path).name in locks:
            needed.append(locks[Path(path).name])
        elif path in fact.get("marks", {}) or path in running:
            return []
    spare = []
    for file in sorted(fact.get("wheels", {})):
        try:
            name, version = wheel_name(file)
        except ValueError:
            continue  # not a wheel: not kvceph's upload
        if file in set(upload) or any(lock.get(name) == version for lock in needed):
            continue
        spare.append(file)
    return spare


def installed_set(packages: Mapping[str, str]) -> dict[str, str]:
    """What is compared across a cache group: every distribution but venv's own seeds."""
    return {norm(n): v for n, v in sorted(packages.items()) if norm(n) not in VENV_SEEDS}


def group_difference(
    group: str, installed: Mapping[str, Mapping[str, str]], ignore: tuple[str, ...] = ()
) -> str | None:
    """One line when the hosts of a cache group do not run identical packages, else None.

    + group: the cache group's name (its bucket)
    + installed: host -> its venv's distributions (``EngineVersions`` packages); a host whose
      venv is absent is left out (it installs in this run, from the same lock)
    + ignore: distributions the engines do not load (kvceph's connector when another is chosen)
    """
    skip = {norm(n) for n in ignore}
    sets = {
        h: {n: v for n, v in installed_set(p).items() if n not in skip}
        for h, p in sorted(installed.items())
        if p
    }
    if len(set(map(lambda s: tuple(s.items()), sets.values()))) <= 1:
        return None
    first, *others = sets
    for other in others:
        a, b = sets[first], sets[other]
        diff = sorted(n for n in set(a) | set(b) if a.get(n) != b.get(n))
        if diff:
            shown = ", ".join(
                f"{n} {a.get(n, 'absent')} on {first} vs {b.get(n, 'absent')} on {other}"
                for n in diff[:3]
            )
            more = f" (+{len(diff) - 3} more)" if len(diff) > 3 else ""
            return (
                f"cache group {group}: hosts run different engine packages: {shown}{more}; "
                "fix: install every host from the profile's lock (kvceph_engine_lock), or "
                "remove what was installed by hand"
            )
    return None


def header(text: str) -> dict[str, str]:
    """A lock's ``# kvceph-lock-<field>: <value>`` lines (``{}`` for a lock without them)."""
    found = {}
    for line in text.splitlines():
        m = _FIELD.fullmatch(line)
        if m:
            found[m.group(1)] = m.group(2)
    return found


def pythons(text: str | None) -> tuple[str, ...] | None:
    """The CPython minors a lock was compiled for (``("3.11", "3.12")``), None when it does
    not say (a wheelhouse's lock, an operator's own)."""
    value = header(text or "").get("python")
    return tuple(value.split()) if value else None


def platform(text: str | None) -> tuple[str, tuple[int, int]] | None:
    """(machine, oldest glibc) a lock's wheels were chosen for, from its ``platform`` field
    (``x86_64-manylinux_2_31`` -> ``("x86_64", (2, 31))``); None when it does not say."""
    m = re.fullmatch(r"(\w+)-manylinux_(\d+)_(\d+)", header(text or "").get("platform", ""))
    return (m.group(1), (int(m.group(2)), int(m.group(3)))) if m else None


def via(text: str) -> dict[str, tuple[str, ...]]:
    """What pulled each distribution into a compiled lock (its ``# via`` line), by name."""
    found: dict[str, set[str]] = {}
    current = None
    for line in text.splitlines():
        m = re.match(r"([A-Za-z0-9][A-Za-z0-9_.\-]*)==", line)
        if m:
            current = norm(m.group(1))
            continue
        v = _VIA.fullmatch(line)
        if v and current:
            found.setdefault(current, set()).update(
                w.strip() for w in v.group(1).split(",") if w.strip()
            )
    return {n: tuple(sorted(s)) for n, s in found.items()}


def merge(compiled: Mapping[str, str]) -> dict[str, Locked]:
    """One lock for every CPython minor from one compiled lock per minor.

    + compiled: minor (``"3.11"``) -> ``uv pip compile --generate-hashes`` output for it

    Every distribution any minor needs is kept (a backport one minor needs is harmless on the
    others), with the hashes of all: the hosts of a cache group install the same set whatever
    their minor. A distribution two minors resolved to different versions is refused
    (ValueError naming both): ``locks/compile.py`` compiles each minor preferring the versions
    of the one before, so this only happens where no version serves both.
    """
    merged: dict[str, tuple[str, str, set[str]]] = {}
    for minor, text in compiled.items():
        for name, item in parse(text, f"CPython {minor}'s lock").items():
            have = merged.setdefault(name, (item.version, minor, set()))
            if have[0] != item.version:
                raise ValueError(
                    f"{name} resolves to {have[0]} on CPython {have[1]} but {item.version} on "
                    f"{minor}: one lock cannot serve both; fix: pin {name} in the profile's "
                    "packages to a version both can install, or drop a minor"
                )
            have[2].update(item.hashes)
    return {n: Locked(v, tuple(sorted(h))) for n, (v, _, h) in sorted(merged.items())}


def render_shipped(
    lock: Mapping[str, Locked],
    fields: Mapping[str, str],
    notes: Iterable[str] = (),
    annotations: Mapping[str, tuple[str, ...]] | None = None,
) -> str:
    """A lock kvceph ships: comment lines, ``# kvceph-lock-<field>:`` lines, then
    :func:`render`'s body with each distribution's ``# via`` line (for a reviewer's diff).

    + lock: the distributions
    + fields: header fields (``profile``, ``python``, ``platform``)
    + notes: comment lines above them
    + annotations: name -> what pulled it in
    """
    lines = [f"# {n}" for n in notes] + [f"# kvceph-lock-{k}: {v}" for k, v in fields.items()]
    for name, item in sorted(lock.items()):
        hashes = " \\\n".join(f"    --hash=sha256:{h}" for h in item.hashes)
        lines.append(f"{name}=={item.version} \\\n{hashes}")
        if (annotations or {}).get(name):
            lines.append(f"    # via {', '.join(annotations[name])}")
    return "\n".join(lines) + "\n"
