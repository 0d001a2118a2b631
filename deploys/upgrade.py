"""Engine upgrades across a cache group: whether the new versions keep the group's objects.

A change of ``kvceph_engine_profile`` rolls like any change. Before anything restarts, the
deploy compares, for every running engine, the versions it started with (the
``KVCEPH_ENGINE_VERSIONS`` variable kvceph puts in its environment; for an engine started
before kvceph recorded it, the venv's installed vLLM/LMCache) with the profile's, through
``versions.KEY_SCHEMES``:

- same key scheme (a patch release of one vLLM minor): the keys stay valid; old and new
  engines of the group share the bucket's cache during the roll;
- another key scheme: the bucket's cache would be orphaned. Refused in one line unless
  ``kvceph_upgrade_cold_cache`` is true; then every old engine of the group is drained and
  stopped before any new one starts (old and new never serve one group with keys that
  disagree), the new engines start in the usual batches, and the cache starts cold.
"""

from __future__ import annotations

from dataclasses import dataclass

from deploys import versions

VERSIONS_VAR = "KVCEPH_ENGINE_VERSIONS"
OPT_IN = "kvceph_upgrade_cold_cache"


def versions_value(vllm: str, lmcache: str) -> str:
    """The ``KVCEPH_ENGINE_VERSIONS`` value: ``vllm=0.33.0 lmcache=0.5.6``."""
    return f"vllm={vllm} lmcache={lmcache}"


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
    label = (current.get("env") or {}).get(VERSIONS_VAR, "")
    words = dict(w.split("=", 1) for w in label.split() if "=" in w)
    if "vllm" in words and "lmcache" in words:
        return words["vllm"], words["lmcache"]
    packages = (installed() if callable(installed) else installed) or {}
    if "vllm" in packages and "lmcache" in packages:
        return packages["vllm"], packages["lmcache"]
    return None


@dataclass(frozen=True)
class Upgrade:
    """One engine's move from the versions it runs to the profile's."""

    running: tuple[str, str]
    desired: tuple[str, str]

    @property
    def changes(self) -> bool:
        return self.running != self.desired

    @property
    def keeps_keys(self) -> bool:
        old, new = versions.key_scheme(*self.running), versions.key_scheme(*self.desired)
        return old is not None and old == new

    def what(self) -> str:
        (ov, ol), (nv, nl) = self.running, self.desired
        lmcache = f"LMCache {ol}" if ol == nl else f"LMCache {ol} -> {nl}"
        return f"vLLM {ov} -> {nv}, {lmcache}"


def plan_line(upgrade: Upgrade, opted_in: bool) -> str:
    """What the plan says about the keys before anything restarts."""
    if upgrade.keeps_keys:
        return (
            f"{upgrade.what()}: the object keys stay valid (same key format and chunk hash, "
            "deploys/versions.py KEY_SCHEMES): old and new engines share the cache during the roll"
        )
    old = versions.key_scheme(*upgrade.running)
    new = versions.key_scheme(*upgrade.desired)
    why = (
        f"chunk hash {old.chunk_hash} -> {new.chunk_hash}"
        if old and new and old.key_format == new.key_format
        else "key format differs"
    )
    if opted_in:
        return (
            f"{upgrade.what()}: the object keys change ({why}): {OPT_IN} accepts it, the cache "
            "restarts cold; the group's old engines stop (drained) before any new one starts"
        )
    return f"{upgrade.what()}: the object keys change ({why})"


def refusal(host: str, bucket: str, upgrade: Upgrade) -> str:
    """The one-line refusal of an orphaning upgrade without the opt-in."""
    return (
        f"{host}: kvceph_engine_profile: {plan_line(upgrade, False)}, so the "
        f"cache in bucket {bucket} would be orphaned; fix: keep vLLM {upgrade.running[0]}'s "
        f"minor, or pass --data {OPT_IN}=true to accept a cold cache"
    )
