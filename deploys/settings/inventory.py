"""The inventory-wide checks: one Ceph admin, cache groups whose keys agree, one roll."""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass
from typing import TYPE_CHECKING

from deploys.settings import engine_list
from deploys.settings.reader import SettingsError

if TYPE_CHECKING:
    from deploys.settings import HostSettings


@dataclass(frozen=True)
class CacheGroup:
    """Hosts whose object keys coincide (same model string and TP)."""

    model: str
    tensor_parallel_size: int
    hosts: tuple[str, ...]


# What must agree inside a cache group, or keys differ and nodes never reuse each other's cache.
# Not kvceph_lmcache_connector: kvceph's connector names objects exactly as LMCache's stock one
# (CacheEngineKey.to_string() at the bucket root) and reads stock-written objects (accepted on
# size alone), so a group may mix the two and move between them without losing its cache.
_KEY_INVARIANTS = (
    ("kvceph_kv_dtype", lambda h: h.engine.kv_dtype),
    ("kvceph_lmcache_chunk_size", lambda h: h.lmcache.chunk_size),
    ("kvceph_lmcache_hash_algorithm", lambda h: h.lmcache.hash_algorithm),
    ("kvceph_python_hash_seed", lambda h: h.engine.python_hash_seed),
    ("kvceph_lmcache_remote_serde", lambda h: h.lmcache.remote_serde),
    ("kvceph_s3_bucket", lambda h: h.s3.bucket),
    ("kvceph_s3_endpoint", lambda h: h.s3.endpoint),
    ("kvceph_engine_profile.vllm_version", lambda h: h.engine.profile.vllm_minor),
    # The serve argument is in every key; the source and revision decide which weights it is.
    ("kvceph_model_source", lambda h: h.engine.source.source),
    ("kvceph_model_revision", lambda h: h.engine.source.revision),
    ("kvceph_model_path", lambda h: h.engine.serve_model),
)


def check_inventory(hosts: list[HostSettings]) -> list[CacheGroup]:
    """Cross-host checks; return the cache groups. Raises SettingsError (one line)."""
    admins = [h.host for h in hosts if h.is_ceph_admin]
    if len(admins) != 1:
        raise SettingsError(
            f"inventory: ceph_admin = {admins!r}: exactly one Ceph admin host is needed; "
            "fix: put one host in the ceph_admin group"
        )
    inference = [h for h in hosts if h.is_inference]
    if not inference:
        raise SettingsError(
            "inventory: gpu + gaudi = []: no inference hosts; fix: add hosts to gpu or gaudi"
        )
    groups: dict[tuple[str, int], list[HostSettings]] = {}
    for h in inference:
        groups.setdefault((h.engine.model, h.engine.tensor_parallel_size), []).append(h)
    for (model, tp), members in groups.items():
        first = members[0]
        for key, get in _KEY_INVARIANTS:
            for other in members[1:]:
                if get(other) != get(first):
                    raise SettingsError(
                        f"{other.host}: {key} = {get(other)!r} differs from {first.host}'s "
                        f"{get(first)!r} in cache group {model} TP={tp}: their cache keys would "
                        "differ and the nodes would never reuse each other's cache; "
                        "fix: use one value across the group"
                    )
    _check_roll(inference, groups)
    return [
        CacheGroup(model, tp, tuple(h.host for h in members))
        for (model, tp), members in groups.items()
    ]


def _check_roll(inference: list[HostSettings], groups) -> None:
    """One restart batch for the whole inventory, never a whole cache group at once."""
    first = inference[0]
    for key, get in (
        ("kvceph_restart_batch", lambda h: h.engine.restart_batch),
        (engine_list.WHOLE_GROUP_OPT_IN, lambda h: h.engine.restart_whole_group),
    ):
        for other in inference[1:]:
            if get(other) != get(first):
                raise SettingsError(
                    f"{other.host}: {key} = {get(other)!r} differs from {first.host}'s "
                    f"{get(first)!r}: the roll is one for the whole run; "
                    "fix: set it once, in group_data/all.py"
                )
    refusal = engine_list.roll_refusal(
        first.engine.restart_batch,
        first.engine.restart_whole_group,
        {
            f"{model} TP={tp}": sum(len(h.engine.engines) for h in members)
            for (model, tp), members in groups.items()
        },
    )
    if refusal:
        raise SettingsError(refusal)


def python_minor_mismatch(group: CacheGroup, hash_algorithm: str, pythons: Mapping[str, str]):
    """With LMCache's builtin hash, nodes on different Python minors make different keys.

    Returns an error line, or None. ``pythons`` maps host -> "3.11" (from the engine fact).
    """
    if hash_algorithm != "builtin":
        return None
    seen = {pythons[h] for h in group.hosts if h in pythons}
    if len(seen) > 1:
        detail = ", ".join(f"{h}={pythons[h]}" for h in group.hosts if h in pythons)
        return (
            f"cache group {group.model} TP={group.tensor_parallel_size}: Python minors differ "
            f"({detail}) with pre_caching_hash_algorithm builtin: keys differ across nodes; "
            "fix: use kvceph_lmcache_hash_algorithm sha256_cbor or one Python version"
        )
    return None
