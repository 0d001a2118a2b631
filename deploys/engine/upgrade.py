"""Engine upgrades across a cache group: which hash seed each key scheme's engines use.

A change of ``kvceph_engine_profile`` rolls like any change, in the usual batches. Before
anything restarts, the deploy compares, for every running engine, the versions it started with
(the ``KVCEPH_ENGINE_VERSIONS`` variable kvceph puts in its environment; for an engine started
before kvceph recorded it, the venv's installed vLLM/LMCache) with the profile's, through
``versions.KEY_SCHEMES``:

- same key scheme (a patch release of one vLLM minor): the keys stay valid; old and new
  engines of the group share the bucket's cache during the roll;
- another key scheme: the new engines hash with another seed, so old and new object names
  cannot collide (an old engine never loads a chunk a new one wrote, nor the reverse) and the
  group rolls one batch at a time like any change. The cost: the new scheme starts with an
  empty tier (every prompt is a miss until a new engine has written it once), the old engines'
  hits shrink as the roll takes them, and the old objects age out through the lifecycle rule.

The seed (``PYTHONHASHSEED``) is where the scheme enters the names: vLLM's ``init_none_hash``
sets the chain's first hash to ``hash_fn(PYTHONHASHSEED)`` and LMCache 0.5.6
(``v1/token_database.py``) chains every chunk hash from it, for ``sha256_cbor`` and ``sha256``
as for ``builtin`` (whose ``hash()`` also depends on it); every object name carries the chunk
hash. Which seed: ``group_seed`` (one per cache group, decided from every host's env files).
"""

from __future__ import annotations

import hashlib
import hmac
from dataclasses import dataclass

from deploys.engine import versions

VERSIONS_VAR = "KVCEPH_ENGINE_VERSIONS"
# Retired with the stop-the-group upgrade; refused in one line (deploys/settings/engine.py).
RETIRED_OPT_IN = "kvceph_upgrade_cold_cache"
RETIRED_WHY = (
    "is retired: an upgrade that changes the object keys rolls like any change, each key "
    'scheme hashing with its own seed (docs/design.md "Engine upgrades across a cache group")'
)
# PYTHONHASHSEED accepts 0..4294967295 (Python refuses more): 32 bits of the HMAC.
SEED_BITS = 32


def versions_value(vllm: str, lmcache: str, mode: str = "inprocess") -> str:
    """The ``KVCEPH_ENGINE_VERSIONS`` value: ``vllm=0.33.0 lmcache=0.5.6`` (`` mode=mp`` added
    in MP mode only, so in-process engines keep the value they run with)."""
    return f"vllm={vllm} lmcache={lmcache}" + (" mode=mp" if mode == "mp" else "")


def parse_mode(label: str) -> str:
    """The engine mode of a ``KVCEPH_ENGINE_VERSIONS`` value: ``mp`` or ``inprocess``."""
    words = dict(w.split("=", 1) for w in str(label or "").split() if "=" in w)
    return "mp" if words.get("mode") == "mp" else "inprocess"


def parse_versions(label: str) -> tuple[str, str] | None:
    """(vLLM, LMCache) from a ``KVCEPH_ENGINE_VERSIONS`` value; None when it names neither."""
    words = dict(w.split("=", 1) for w in str(label or "").split() if "=" in w)
    if "vllm" in words and "lmcache" in words:
        return words["vllm"], words["lmcache"]
    return None


def running_pair(current: dict, installed=None) -> tuple[str, str] | None:
    """(vLLM, LMCache) the running engine started with; None when not running or unknown.

    + current: the engine's ServiceDrift fact (its ``env`` read from the process)
    + installed: the venv's distributions (EngineVersions ``packages``, or a callable that
      reads them, called only when needed), read before this run installs anything: the
      fallback for an engine started before kvceph recorded its versions (the lab engine
      installs no ``vllm``: unknown there)
    """
    if current.get("active") != "active" or not current.get("main_pid"):
        return None
    pair = parse_versions((current.get("env") or {}).get(VERSIONS_VAR, ""))
    if pair is not None:
        return pair
    packages = (installed() if callable(installed) else installed) or {}
    if "vllm" in packages and "lmcache" in packages:
        return packages["vllm"], packages["lmcache"]
    return None


# --- The seed of each key scheme ---------------------------------------------------------------


def scheme_seed(fleet_seed: int, scheme: str) -> int:
    """The ``PYTHONHASHSEED`` of one key scheme's engines: HMAC-SHA256 keyed with the fleet's
    seed over the scheme's name, its first 32 bits (what PYTHONHASHSEED takes); never the
    fleet seed itself (the next 32 bits then, a 1 in 2^32 case).

    + fleet_seed: KVCEPH_PYTHON_HASH_SEED (else ``kvceph_python_hash_seed``)
    + scheme: ``versions.scheme_name`` of the engines' vLLM/LMCache pair

    As secret as the fleet's seed: without it nobody computes a scheme's object names.
    """
    mac = hmac.new(str(fleet_seed).encode(), f"kvceph key scheme {scheme}".encode(), "sha256")
    digest = mac.digest()
    seed = int.from_bytes(digest[:4], "big")
    return seed if seed != fleet_seed else int.from_bytes(digest[4:8], "big")


def seed_sha256(seed: int | str) -> str:
    """sha256 of a seed's text, as ``KeySeedsInUse`` reads an env file's (never the value)."""
    return hashlib.sha256(str(seed).encode()).hexdigest()


@dataclass(frozen=True)
class GroupSeed:
    """The seed a cache group's engines get this run, and why (the plan's line)."""

    seed: int
    scheme: str
    derived: bool  # False: the fleet's seed itself
    why: str


def group_seed(fleet_seed: int, pair: tuple[str, str], env_files: list[dict]) -> GroupSeed:
    """Which ``PYTHONHASHSEED`` a cache group's engines run the profile's key scheme with.

    + fleet_seed: the fleet's seed
    + pair: the profile's (vLLM, LMCache)
    + env_files: every engine env file on the group's hosts (``KeySeedsInUse`` values:
      ``{"versions": "vllm=.. lmcache=..", "seed_sha256": ".."}``, either may be None)

    - an env file records this scheme: its seed stays (the fleet's where it carries the
      fleet's, else this scheme's own): a deploy without a scheme change changes nothing;
    - else an env file records another scheme with the fleet's seed or that scheme's own:
      this scheme gets its own (``scheme_seed``), so its names cannot meet the other's;
    - else (a new group; files from before kvceph recorded versions; a seed from elsewhere,
      e.g. an older group_data value): the fleet's seed, as before schemes had seeds.
    """
    scheme = versions.scheme_name(*pair)
    fleet, own = seed_sha256(fleet_seed), seed_sha256(scheme_seed(fleet_seed, scheme))
    same: set[str] = set()
    moved = []
    for f in env_files:
        recorded = parse_versions(f.get("versions") or "")
        if recorded is None:
            continue  # no scheme on record: says nothing about which seed names what
        other = versions.scheme_name(*recorded)
        seed = f.get("seed_sha256")
        if other == scheme:
            same.add(seed)
        elif seed in (fleet, seed_sha256(scheme_seed(fleet_seed, other))):
            moved.append(other)
    if fleet in same:
        return GroupSeed(fleet_seed, scheme, False, "the fleet's seed, as its engines run it")
    if own in same:
        return GroupSeed(
            scheme_seed(fleet_seed, scheme), scheme, True, "its own seed, as its engines run it"
        )
    if moved:
        return GroupSeed(
            scheme_seed(fleet_seed, scheme),
            scheme,
            True,
            f"its own seed (derived from the fleet's), not {moved[0]}'s: old and new object "
            "names cannot collide",
        )
    return GroupSeed(fleet_seed, scheme, False, "the fleet's seed")


# --- What the plan says about an engine's move -------------------------------------------------


@dataclass(frozen=True)
class Upgrade:
    """One engine's move from the versions it runs to the profile's."""

    running: tuple[str, str]
    desired: tuple[str, str]
    # LMCache in vLLM (inprocess) or its MP server (mp): each names its objects its own way.
    running_mode: str = "inprocess"
    desired_mode: str = "inprocess"

    @property
    def changes(self) -> bool:
        return self.running != self.desired or self.running_mode != self.desired_mode

    @property
    def keeps_keys(self) -> bool:
        if self.running_mode != self.desired_mode:
            return False
        old, new = versions.key_scheme(*self.running), versions.key_scheme(*self.desired)
        return old is not None and old == new

    def what(self) -> str:
        (ov, ol), (nv, nl) = self.running, self.desired
        lmcache = f"LMCache {ol}" if ol == nl else f"LMCache {ol} -> {nl}"
        modes = {"inprocess": "in-process", "mp": "MP"}
        mode = (
            f", {modes[self.running_mode]} -> {modes[self.desired_mode]}"
            if self.running_mode != self.desired_mode
            else ""
        )
        return f"vLLM {ov} -> {nv}, {lmcache}{mode}"


def plan_line(upgrade: Upgrade, bucket: str = "", expiration_days: int | None = None) -> str:
    """What the plan says about the keys before anything restarts."""
    where = f" in bucket {bucket}" if bucket else ""
    age = f" ({expiration_days} days)" if expiration_days else ""
    if upgrade.running_mode != upgrade.desired_mode or upgrade.desired_mode == "mp":
        if upgrade.keeps_keys:
            return f"{upgrade.what()}: the object names stay (MP names them by its own hash)"
        return (
            f"{upgrade.what()}: the object names change (LMCache's MP server names objects "
            "<prefix><model>@<kv_rank>@<group>@<blake3 hash>, in-process engines "
            "<model>@<world size>@<worker>@<hash>@<dtype>, and kvceph's MP prefix carries the "
            "vLLM minor): the group rolls in its batches; the new engines start with an empty "
            f"tier, the old objects{where} age out through the lifecycle rule{age}"
        )
    if upgrade.keeps_keys:
        return (
            f"{upgrade.what()}: the object keys stay valid (same key format and chunk hash, "
            "deploys/engine/versions.py KEY_SCHEMES): old and new engines share the cache during "
            "the roll"
        )
    old = versions.key_scheme(*upgrade.running)
    new = versions.key_scheme(*upgrade.desired)
    why = (
        f"chunk hash {old.chunk_hash} -> {new.chunk_hash}"
        if old and new and old.key_format == new.key_format
        else "key format differs"
    )
    return (
        f"{upgrade.what()}: the object keys change ({why}): the new engines hash with key "
        f"scheme {versions.scheme_name(*upgrade.desired)}'s own seed, old and new names cannot "
        "collide, the group rolls in its batches; the new scheme starts with an empty tier "
        f"(misses until its engines wrote each prefix once), the old objects{where} age out "
        f"through the lifecycle rule{age}"
    )


# --- A move between in-process and MP: LMCache's server on the host (docs/design.md "MP mode") -


def server_lines(
    host: str,
    unit: str,
    desired_mode: str,
    server_present: bool,
    moves: list[Upgrade],
    batch: int,
    namespace: str = "",
) -> list[str]:
    """What the plan says, per host and before anything restarts, about LMCache's MP server
    when the host moves between in-process and MP (nothing when it stays in its mode).

    + host: the host's name. + unit: the server's unit (``lmcache-server.service``).
    + desired_mode: the profile's mode. + server_present: the unit is on the host now.
    + moves: the host's engine moves (``Upgrade``) this run makes. + batch: engines per batch.
    + namespace: the MP engines' object-name prefix (``render.mp_prefix``), in MP mode.
    """
    crossing = [m for m in moves if m.running_mode != m.desired_mode]
    roll = (
        f"restart {batch} at a time in the run's roll, each drained first "
        "(kvceph_restart_batch, kvceph_drain_timeout)"
    )
    lines = []
    if desired_mode == "mp" and not server_present:
        lines.append(
            f"{host}: {unit} is written and started before any engine restarts; its engines "
            f"then {roll}; an engine not yet restarted keeps serving in process meanwhile"
        )
    if desired_mode != "mp" and server_present:
        lines.append(
            f"{host}: {unit} stays until the host's engines are back in process (they {roll}; "
            "an MP engine needs the server until its turn), then it is removed; the MP objects "
            "(names ending @mp-lmcache<version>/) are not read again and age out through the "
            "lifecycle rule"
        )
    if crossing:
        mp_names = f" ({namespace}...)" if namespace else " (names ending @mp-lmcache<version>/)"
        lines.append(
            f"{host}: until the cache group's last engine rolled, in-process and MP engines "
            f"serve side by side: both namespaces are live, the in-process names and the MP "
            f"names{mp_names}; neither side reads the other's objects, so each starts a "
            "prompt cold the first time it sees it"
        )
    return lines
