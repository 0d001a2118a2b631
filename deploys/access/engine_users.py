"""The cache groups' RGW users and the fleet's hash seed, checked before any host is touched.

Each cache group runs as its own RGW user (``<kvceph_s3_user>-<kvceph_cache_group>``) whose key
only its hosts hold; the bucket belongs to the admin user (``kvceph_s3_admin_user``), whose key
stays on the controller and the Ceph admin host. deploys/cluster/bucket_policy.py says what each
may do.

The hash seed (PYTHONHASHSEED) salts LMCache's ``builtin`` prefix hash and every ``str`` hash of
the engine's Python process, the API server's included: a public seed lets anyone who knows
it compute which object names a prompt maps to, and craft requests whose strings collide in
the server's dicts. It is one value per fleet, kept with the secrets.
"""

from __future__ import annotations

import dataclasses

from deploys.cluster import bucket_policy
from deploys.settings import namespace, secrets
from deploys.settings.reader import SettingsError

# group_data/all.py's public seed: accepted (labs; fleets whose cache predates issue 36),
# with a warning, because changing it orphans every cached object.
PUBLIC_SEED = 67


def group_users(hosts: dict, groups) -> list[bucket_policy.GroupUser]:
    """Every cache group's engine user and object-name prefix."""
    users = []
    for g in groups:
        me = hosts[g.hosts[0]]
        try:
            prefix = namespace.object_prefix(me)
        except bucket_policy.PolicyError as exc:
            raise SettingsError(f"{me.host}: cache group {g.name}: {exc}") from None
        users.append(
            bucket_policy.GroupUser(g.name, bucket_policy.group_uid(me.s3.user, g.name), prefix)
        )
    return users


def check_keys(groups, creds: secrets.Secrets) -> None:
    """The admin key and every cache group's key pair are configured, and all differ: one
    line naming the missing variable and the hosts that need it, else nothing."""
    if not (creds.admin_access_key and creds.admin_secret_key):
        raise SettingsError(
            f"controller: {secrets.ADMIN_ACCESS_ENV} / {secrets.ADMIN_SECRET_ENV} missing: the "
            "bucket owner's keys (controller and Ceph admin host only); fix: "
            f"{secrets.MECHANISM}"
        )
    seen = {str.__str__(creds.admin_access_key): secrets.ADMIN_ACCESS_ENV}
    if creds.legacy:
        seen.setdefault(str.__str__(creds.access_key), secrets.ACCESS_ENV)
    if creds.models_access_key:
        seen.setdefault(str.__str__(creds.models_access_key), secrets.MODELS_ACCESS_ENV)
    for g in groups:
        pair = creds.group(g.name)
        access_env = secrets.group_access_env(g.name)
        if pair is None:
            raise SettingsError(
                f"controller: {access_env} / {secrets.group_secret_env(g.name)} missing: the "
                f"keys of cache group {g.name} ({', '.join(g.hosts)}); fix: {secrets.MECHANISM}"
            )
        other = seen.get(str.__str__(pair[0]))
        if other:
            raise SettingsError(
                f"controller: {access_env} equals {other}: an access key names one RGW user; "
                "fix: give each cache group its own key pair"
            )
        seen[str.__str__(pair[0])] = access_env


def apply_hash_seed(hosts: dict, creds: secrets.Secrets) -> tuple[dict, str]:
    """Every inference host's settings with the fleet's seed, and the plan's line about it.

    KVCEPH_PYTHON_HASH_SEED, when set, is every engine's seed (one value: identical across
    each cache group by construction). Else group_data's ``kvceph_python_hash_seed`` stays;
    the public default is refused outside a lab (``kvceph_lab``), named in a warning in one.
    """
    if creds.hash_seed is not None:
        seed = int(creds.hash_seed.reveal())
        out = {
            name: me
            if not me.is_inference
            else dataclasses.replace(
                me, engine=dataclasses.replace(me.engine, python_hash_seed=seed)
            )
            for name, me in hosts.items()
        }
        return (
            out,
            f"kvceph: hash seed: the fleet's own ({secrets.HASH_SEED_ENV}, with the secrets)",
        )
    seeds = {me.engine.python_hash_seed for me in hosts.values() if me.is_inference}
    public = sorted(
        n
        for n, me in hosts.items()
        if me.is_inference
        and not getattr(me, "lab", False)
        and me.engine.python_hash_seed == PUBLIC_SEED
    )
    if public:
        raise SettingsError(
            f"{public[0]}: kvceph_python_hash_seed = {PUBLIC_SEED}: the public default: anyone "
            "with write access to a prefix can compute which object names a prompt maps to and "
            f"plant objects under them; fix: put {secrets.HASH_SEED_ENV}=<one random integer "
            "0..4294967295 per fleet> in the secrets (`od -An -N4 -tu4 /dev/urandom`; a new "
            "seed leaves today's cached objects to the lifecycle), or a lab: kvceph_lab = True"
        )
    if PUBLIC_SEED in seeds:
        return hosts, (
            f"kvceph: WARNING: hash seed: the public default {PUBLIC_SEED} (group_data): anyone "
            "can compute which object names a prompt maps to and craft colliding strings for "
            f"the API server; fix: put {secrets.HASH_SEED_ENV} (one random integer per fleet) "
            "in the secrets (a new seed leaves today's cached objects to the lifecycle)"
        )
    return hosts, "kvceph: hash seed: from group_data (kvceph_python_hash_seed)"


def plan_lines(users: list[bucket_policy.GroupUser], creds: secrets.Secrets, me) -> list[str]:
    """The plan's lines: which user each cache group runs as, on which names; the legacy user."""
    lines = [
        f"kvceph: cache group {u.group}: RGW user {u.uid}, get/put/list only under "
        f"s3://{me.s3.bucket}/{u.prefix}*"
        for u in users
    ]
    lines.append(
        f"kvceph: bucket {me.s3.bucket} owned by RGW user {me.s3.admin_user} (its key stays on "
        "the controller and the Ceph admin host)"
    )
    if creds.legacy:
        lines.append(
            f"kvceph: WARNING: {secrets.ACCESS_ENV} is still configured: RGW user {me.s3.user} "
            "(engines before issue 36) keeps get/put/list on the whole bucket until you remove "
            "it from the secrets, once every engine runs its group's key (docs/security.md)"
        )
    return lines
