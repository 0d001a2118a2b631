"""The inventory-wide checks: one Ceph admin, cache groups whose keys agree, one roll."""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass
from typing import TYPE_CHECKING

from deploys.settings import cache_key, engine_list, kinds, namespace, placement, ports
from deploys.settings.reader import SettingsError

if TYPE_CHECKING:
    from deploys.settings import HostSettings


@dataclass(frozen=True)
class CacheGroup:
    """Hosts whose object names coincide: same model, TP and PP (the namespace's fields that
    name a group; its other fields must agree inside one, GROUP_INVARIANTS)."""

    model: str
    tensor_parallel_size: int
    hosts: tuple[str, ...]
    name: str = ""  # kvceph_cache_group: its RGW user and keys (deploys/cluster/bucket_policy.py)
    pipeline_parallel_size: int = 1


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
    placement.check(hosts)
    ports.check_fleet(hosts)
    _agree(
        hosts,
        [("kvceph_rgw_ingress_virtual_ips", lambda h: h.rgw.ingress_virtual_ips)],
        ": the cluster has one ingress (its spec on the admin host, the engines' addresses); "
        "fix: set the VIPs once, in group_data/all.py",
    )
    groups: dict[tuple[str, int], list[HostSettings]] = {}
    for h in inference:
        groups.setdefault(group_key(h), []).append(h)
    for (model, tp, _pp), members in groups.items():
        _agree(
            members,
            [(s.key, s.get) for s in cache_key.GROUP_INVARIANTS],
            f"in cache group {model} TP={tp}: their cache keys would differ and the nodes would "
            "never reuse each other's cache; fix: use one value across the group",
        )
    _check_roll(inference, groups)
    _check_names(groups)
    check_rgw_identities(hosts, groups)
    return [
        CacheGroup(model, tp, tuple(h.host for h in members), members[0].engine.cache_group, pp)
        for (model, tp, pp), members in groups.items()
    ]


def group_key(h: HostSettings) -> tuple[str, int, int]:
    """(model, TP, PP): what tells one cache group from another (monitoring's label too)."""
    return (h.engine.model, h.engine.tensor_parallel_size, namespace.pipeline_parallel_size(h))


def _check_names(groups) -> None:
    """One ``kvceph_cache_group`` per cache group, and a different one for each: the name picks
    the RGW user whose policy allows only that group's object names."""
    owner: dict[str, tuple[str, int, str]] = {}
    for (model, tp, pp), members in groups.items():
        _agree(
            members,
            [("kvceph_cache_group", lambda h: h.engine.cache_group)],
            f": one cache group ({model} TP={tp}{_pp(pp)}) runs as one RGW user; "
            "fix: give its hosts one kvceph_cache_group",
        )
        name, first = members[0].engine.cache_group, members[0].host
        if name in owner:
            m, t, h = owner[name]
            raise SettingsError(
                f"{first}: kvceph_cache_group = {name!r} also names {h}'s cache group {m} TP={t}, "
                f"not {model} TP={tp}{_pp(pp)}: each group's user may touch only its own object "
                "names; "
                "fix: give each cache group its own kvceph_cache_group"
            )
        owner[name] = (model, f"{tp}{_pp(pp)}", first)


def _pp(pp: int) -> str:
    return f" PP={pp}" if pp != 1 else ""


def _identities(h: HostSettings, groups) -> list[tuple[str, str, str]]:
    """(uid, the key that makes it, its role) of every RGW user this host's settings name."""
    s3 = h.s3
    found = [
        (s3.admin_user, "kvceph_s3_admin_user", "the admin (bucket owner)"),
        (s3.user, "kvceph_s3_user", "the legacy engine user"),
    ]
    if h.is_inference:
        group = h.engine.cache_group
        found.append((
            f"{s3.user}-{group}",
            "kvceph_s3_user + kvceph_cache_group",
            f"cache group {group}'s user",
        ))  # fmt: skip
        if h.engine.source.source == "mirror":
            src = h.engine.source
            found += [
                (src.mirror_owner, "kvceph_model_mirror_owner", "the model mirror's owner"),
                (src.mirror_reader, "kvceph_model_mirror_reader", "the model mirror's reader"),
            ]
    return found


def check_rgw_identities(hosts: list[HostSettings], groups=None) -> None:
    """Every RGW identity kvceph creates or uses is a valid uid (composed ones included) and
    names one role only: the admin's key stays on the controller, each group's user holds its
    own prefix, the mirror's reader only reads. One user in two roles undoes that split."""
    roles: dict[str, tuple[str, str, str]] = {}
    for h in hosts:
        for uid, key, role in _identities(h, groups):
            problem = kinds.rgw_uid_problem(uid)
            if problem:
                raise SettingsError(f"{h.host}: {key} = {uid!r}: {problem[0]}; fix: {problem[1]}")
            seen = roles.setdefault(uid, (h.host, key, role))
            if seen[2] != role:
                raise SettingsError(
                    f"{h.host}: {key} = {uid!r}: is also {seen[2]} on {seen[0]} ({seen[1]}), "
                    f"here {role}: one RGW user in two roles holds both keys and undoes the "
                    "least-privilege split; fix: give each RGW identity its own uid"
                )


def _agree(hosts: list[HostSettings], settings, why: str) -> None:
    """Each (key, getter) gives every host the first host's value, or one line: who differs,
    with what, and ``why`` (how it ends, fix included)."""
    first = hosts[0]
    for key, get in settings:
        for other in hosts[1:]:
            if get(other) != get(first):
                sep = "" if why.startswith(":") else " "
                raise SettingsError(
                    f"{other.host}: {key} = {get(other)!r} differs from {first.host}'s "
                    f"{get(first)!r}{sep}{why}"
                )


def _check_roll(inference: list[HostSettings], groups) -> None:
    """One restart batch for the whole inventory, never a whole cache group at once."""
    first = inference[0]
    _agree(
        inference,
        [
            ("kvceph_restart_batch", lambda h: h.engine.restart_batch),
            (engine_list.WHOLE_GROUP_OPT_IN, lambda h: h.engine.restart_whole_group),
        ],
        ": the roll is one for the whole run; fix: set it once, in group_data/all.py",
    )
    refusal = engine_list.roll_refusal(
        first.engine.restart_batch,
        first.engine.restart_whole_group,
        {
            f"{model} TP={tp}{_pp(pp)}": sum(len(h.engine.engines) for h in members)
            for (model, tp, pp), members in groups.items()
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
