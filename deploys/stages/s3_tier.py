"""Stage 2b "S3 tier": rgw_dns_name, the RGW user and its quota, the bucket, its lifecycle.

Runs on the single ``ceph_admin`` host. Reads go through ``radosgw-admin``/``ceph`` facts;
the writes that need S3 keys go through ``deploys/remote/s3admin.py`` on that host, which
reads the keys from a private file (``paths.ADMIN_CONFIG``) so they never appear on a command line.
"""

from __future__ import annotations

from pyinfra import host, logger
from pyinfra.api import OperationError, deploy

from deploys import paths
from deploys.cluster import bucket_policy, capacity, ceph_cli, ownership
from deploys.facts import memo
from deploys.facts.ceph import CephFsid, CephOwnershipMarkers, CephServiceSpec
from deploys.facts.rgw import RgwBucket, RgwLifecycle, RgwUser
from deploys.operations import ceph as ceph_ops
from deploys.operations import files as kvfiles
from deploys.operations import s3, s3_policy, s3_quota, tls
from deploys.preflight import Preflight
from deploys.settings import HostSettings
from deploys.settings.secrets import Secret
from deploys.stages import cache_trim, rgw_service

# RGW reachability: seconds per HTTP try, tries, seconds between them (about 20 s at most).
RGW_PROBE_TIMEOUT = 5
RGW_PROBE_TRIES = 3
RGW_PROBE_DELAY = 2
RGW_PROBE_TRIES_DEPLOYING = 20  # about 2.5 min for cephadm to (re)start RGW


def unreachable_fix(me: HostSettings) -> str:
    """What to start when RGW does not answer: behind cephadm's ingress, its daemons too."""
    rgw = me.rgw
    if rgw.managed_by != "cephadm":
        return s3.DEFAULT_UNREACHABLE_FIX
    ps = f"`ceph orch ps --service_name {rgw.service_name}`"
    if rgw.ingress_virtual_ips:
        ps += f" and `ceph orch ps --service_name ingress.{rgw.service_name}` (haproxy, keepalived)"
    return (
        f"on {me.host} {ps} name the daemons not running: "
        "`ceph orch daemon start <name>` for each, then run again"
    )


def s3_ini(what: str, endpoint: str, region: str, access_key, secret_key) -> str:
    """The INI s3admin.py and model_mirror.py read (``[s3]`` endpoint, region and one key
    pair, ``what`` in its first line); the only place the keys are revealed."""
    return (
        f"# {what} (written by pyinfra; 0600)\n"
        "[s3]\n"
        f"endpoint = {endpoint}\n"
        f"region = {region}\n"
        f"access_key = {access_key.reveal()}\n"
        f"secret_key = {secret_key.reveal()}\n"
    )


def admin_config(
    me: HostSettings, access_key, secret_key, what: str = "keys of the bucket's owner"
) -> str:
    """INI text for s3admin.py on the admin host (RGW's admin endpoint)."""
    return s3_ini(
        f"kvceph S3 tier: {what}", me.s3.admin_endpoint, me.s3.region, access_key, secret_key
    )


def group_config(me: HostSettings, group: str, access_key, secret_key) -> str:
    """INI text of one cache group's engine keys (its user is created and rotated from it)."""
    return admin_config(me, access_key, secret_key, f"keys of cache group {group}'s engines")


def _ceph_t(me: HostSettings, timeout: int) -> dict:
    return ceph_cli.timeouts(me.ceph) if me.ceph else {"command_timeout": timeout}


def s3_objects(me: HostSettings, timeout: int, users=()) -> list[tuple[str, str, bool]]:
    """The RGW users and buckets this stage creates and then changes (quotas, keys, lifecycle,
    policy), as ``(marker kind, name, exists now)``: the admin user, each cache group's user and
    the bucket; the one list the ownership check and the markers read. The former single engine
    user is only read (its keys keep working through the migration), so it is not listed."""
    uids = [me.s3.admin_user, *(u.uid for u in users)]
    bucket = memo.read(host, RgwBucket, bucket=me.s3.bucket, timeout=timeout)
    return [
        *(
            (ownership.S3_USER, uid, memo.read(host, RgwUser, uid=uid, timeout=timeout) is not None)
            for uid in uids
        ),
        (ownership.BUCKET, me.s3.bucket, bucket is not None),
    ]


def spec_digest(me: HostSettings, kind: str, name: str, owner: str | None = None) -> str | None:
    """:func:`ownership.digest` of what kvceph asks of a bucket (its name and owner: a
    same-named bucket someone else makes later has another owner); None for a user, whose
    ``user info`` carries nothing that tells one creation from the next.

    + owner: the owner found (None: the one kvceph sets); the former engine user a bucket is
      moved from reads as kvceph's own (the move is kvceph's)
    """
    if kind != ownership.BUCKET:
        return None
    if owner in (None, me.s3.user):
        owner = me.s3.admin_user
    return ownership.digest({"bucket": name, "owner": owner})


def ownership_plans(me: HostSettings, timeout: int, users=()) -> dict | None:
    """:func:`ownership.plan_object` for every object of :func:`s3_objects`; None when the
    markers cannot be read."""
    t = _ceph_t(me, timeout)
    markers = memo.read(host, CephOwnershipMarkers, **t)
    if markers is None:
        return None
    fsid = memo.read(host, CephFsid, **t)
    bucket = memo.read(host, RgwBucket, bucket=me.s3.bucket, timeout=timeout) or {}
    return {
        (kind, name): ownership.plan_object(
            kind,
            name,
            exists,
            markers,
            me.run.adopt,
            fsid,
            spec_digest(me, kind, name, bucket.get("owner")) if exists else None,
        )
        for kind, name, exists in s3_objects(me, timeout, users)
    }


def mark_owned(me: HostSettings, kind: str, name: str, plans: dict, timeout: int) -> None:
    """The marker of one object :func:`ownership_plans` planned, right after its operation
    (called on every run, so a fresh and a converged cluster plan the same operations)."""
    plan = plans.get((kind, name))
    value = plan.marker if plan and plan.marker else ownership.CREATED
    t = _ceph_t(me, timeout)
    ceph_ops.ownership_marker(
        name=f"Mark {kind} {name} as kvceph's",
        kind=kind,
        object_name=name,
        value=value,
        fsid=memo.read(host, CephFsid, **t),
        spec_digest=spec_digest(me, kind, name),
        **t,
    )


def refusals(
    me: HostSettings, creds, rules: list[dict], allow_removal: bool, timeout: int, users=()
):
    """Every reason to stop before touching anything, read from the cluster's current state.

    pyinfra runs operations as they are called (with ``-y``), so a refusal found only by the
    user operation would come after rgw_dns_name was already set; this reads the same facts
    first. The operations repeat the checks, so they stay safe when used on their own.
    A user or bucket kvceph did not create (no marker, deploys/cluster/ownership.py) comes first.
    """
    plans = ownership_plans(me, timeout, users)
    if plans is None:
        return [f"{host.name}: cannot read kvceph's markers (`ceph config-key dump kvceph/owned/`)"]
    owned = [p.refusal for p in plans.values() if p.refusal]
    if owned:
        return owned
    admin = memo.read(host, RgwUser, uid=me.s3.admin_user, timeout=timeout)
    bucket = memo.read(host, RgwBucket, bucket=me.s3.bucket, timeout=timeout)
    problems = [
        s3.user_refusal(admin, me.s3.admin_user, creds.admin_access_key, creds.admin_secret_key),
        # Owned by the engines' user of a deploy before issue 36: moved to the admin user.
        None
        if bucket and bucket.get("owner") == me.s3.user
        else s3.bucket_refusal(bucket, me.s3.bucket, me.s3.admin_user),
    ]
    for user in users:
        pair = creds.group(user.group)
        current = memo.read(host, RgwUser, uid=user.uid, timeout=timeout)
        problems.append(s3.user_refusal(current, user.uid, *pair))
    if bucket is not None:
        current = memo.read(host, RgwLifecycle, bucket=me.s3.bucket, timeout=timeout)
        merge = s3.merge_lifecycle(current, rules, allow_removal=allow_removal)
        problems.append(s3.lifecycle_refusal(merge, me.s3.bucket, rules))
    return [p for p in problems if p]


def rgw_spec_changes(me: HostSettings, timeouts: dict) -> bool:
    """Whether the RGW service stage applies a spec in this run (read from the same facts)."""
    if me.rgw.managed_by != "cephadm":
        return False
    try:
        specs, _ = rgw_service.wanted_specs(me, timeouts)
    except rgw_service.SpecError:
        return False  # the RGW service stage stops the run first
    for wanted in specs:
        current = memo.read(host, CephServiceSpec, service_name=wanted["service_name"], **timeouts)
        if current is None or ceph_ops.spec_differences(wanted, current):
            return True
    return False


def install_admin_tools(me: HostSettings, creds) -> None:
    """The S3 admin helper and its private key file on the admin host (S3 tier, rotate.py)."""
    kvfiles.helper_script("S3 admin helper", paths.ADMIN_SCRIPT, paths.ADMIN_SOURCE.read_text())
    kvfiles.named_directory("Private directory", paths.ADMIN_DIR, "700")
    kvfiles.private_file(
        name=f"S3 admin credentials {paths.ADMIN_CONFIG}",
        path=paths.ADMIN_CONFIG,
        content=admin_config(me, creds.access_key, creds.secret_key),
    )


@deploy("S3 tier")
def apply(me: HostSettings, checked: Preflight):
    """Give LMCache its bucket: virtual-host name, user with the operator's keys, lifecycle."""
    ceph = me.ceph
    timeout = ceph_cli.command_timeout(ceph)
    connect_timeout = ceph.connect_timeout if ceph else 10
    creds = checked.credentials
    allow_removal = me.run.allow_lifecycle_removal
    rules = s3.lifecycle_rules(
        me.s3.lifecycle_rule_id, me.s3.expiration_days, me.s3.abort_multipart_days
    )
    if me.security.s3_ca_pem:
        # The admin helper's boto3 verifies RGW's certificate against the system store.
        tls.ca_trusted(name="S3 CA in the system trust store", pem=me.security.s3_ca_pem)
    # First, before any refusal read or write: RGW must answer HTTP (RADOS reads do not tell).
    # When this run (re)applies the RGW spec, cephadm (re)starts the daemons just before:
    # give them longer.
    deploying = rgw_spec_changes(me, ceph_cli.timeouts(ceph)) if ceph else False
    s3.rgw_reachable(
        name=f"RGW answers at {me.s3.admin_endpoint}",
        endpoint=me.s3.admin_endpoint,
        timeout=RGW_PROBE_TIMEOUT,
        tries=RGW_PROBE_TRIES_DEPLOYING if deploying else RGW_PROBE_TRIES,
        delay=RGW_PROBE_DELAY,
        deploying=deploying,
        fix=unreachable_fix(me),
    )
    problems = refusals(me, creds, rules, allow_removal, timeout, checked.users)
    if problems:
        for problem in problems[1:]:
            logger.error(problem)
        raise OperationError(problems[0])

    s3.rgw_dns_name(
        name=f"rgw_dns_name {me.rgw.dns_name} (virtual-hosted buckets)"
        + (
            f"; a change restarts {me.rgw.service_name}'s daemons one at a time (each back first)"
            if me.rgw.managed_by == "cephadm"
            else ""
        ),
        dns_name=me.rgw.dns_name,
        managed_by=me.rgw.managed_by,
        service_name=me.rgw.service_name,
        section=me.rgw.config_section,
        adopt=me.run.adopt,
        connect_timeout=connect_timeout,
        command_timeout=timeout,
    )

    install_admin_tools(me, creds.admin())

    plans = ownership_plans(me, timeout, checked.users) or {}
    s3.user(
        name=f"RGW user {me.s3.admin_user} (owns bucket {me.s3.bucket})",
        uid=me.s3.admin_user,
        display_name=f"{me.s3.user_display_name}, bucket owner",
        access_key=creds.admin_access_key,
        secret_key=creds.admin_secret_key,
        timeout=timeout,
    )
    mark_owned(me, ownership.S3_USER, me.s3.admin_user, plans, timeout)
    engine_users(me, checked, timeout, plans)
    quota = checked.quota
    if quota is not None and quota.max_size is not None:
        # RGW charges a bucket's objects to its owner, whoever wrote them.
        s3_quota.user_quota(
            name=f"User quota {capacity.size(quota.max_size)} for {me.s3.admin_user} "
            f"({quota.source})",
            uid=me.s3.admin_user,
            max_size=quota.max_size,
            timeout=timeout,
        )
        s3_quota.user_bucket_quota(
            name=f"Bucket quota {capacity.size(quota.max_size)} for {me.s3.admin_user} "
            "(live stats)",
            uid=me.s3.admin_user,
            max_size=quota.max_size,
            timeout=timeout,
        )
    legacy = creds.legacy and memo.read(host, RgwUser, uid=me.s3.user, timeout=timeout)
    statements = bucket_policy.statements(
        me.s3.bucket, list(checked.users), me.s3.user if legacy else None
    )
    current = memo.read(host, RgwBucket, bucket=me.s3.bucket, timeout=timeout)
    if s3_policy.owner_plan(current, me.s3.admin_user, me.s3.user) == "link":
        # Migration: the policy first, put by the bucket's current owner (the former engine
        # user), so its engines keep working through the move and the roll; then the move.
        kvfiles.private_file(
            name=f"S3 credentials of RGW user {me.s3.user} {paths.LEGACY_CONFIG}",
            path=paths.LEGACY_CONFIG,
            content=Secret(
                admin_config(me, creds.access_key, creds.secret_key, "keys of the former owner")
            ),
        )
        s3_policy.bucket_policy_statements(
            name=f"Policy of bucket {me.s3.bucket} (put by its former owner {me.s3.user})",
            bucket=me.s3.bucket,
            statements=statements,
            config=paths.LEGACY_CONFIG,
            timeout=timeout,
        )
        s3_policy.bucket_owner(
            name=f"Bucket {me.s3.bucket} moves from {me.s3.user} to {me.s3.admin_user}",
            bucket=me.s3.bucket,
            owner=me.s3.admin_user,
            previous=me.s3.user,
            timeout=timeout,
        )
        mark_owned(me, ownership.BUCKET, me.s3.bucket, plans, timeout)
    else:
        s3.bucket(
            name=f"Bucket {me.s3.bucket}",
            bucket_name=me.s3.bucket,
            owner=me.s3.admin_user,
            timeout=timeout,
        )
        mark_owned(me, ownership.BUCKET, me.s3.bucket, plans, timeout)
        s3_policy.bucket_policy_statements(
            name=f"Policy of bucket {me.s3.bucket}: each cache group on its own names",
            bucket=me.s3.bucket,
            statements=statements,
            timeout=timeout,
        )
    s3.bucket_lifecycle(
        name=f"Lifecycle of bucket {me.s3.bucket}",
        bucket_name=me.s3.bucket,
        rules=rules,
        allow_removal=allow_removal,
        timeout=timeout,
    )
    cache_trim.apply(me, checked)


def engine_users(me: HostSettings, checked: Preflight, timeout: int, plans: dict) -> None:
    """Each cache group's RGW user, with the operator's keys for it, unable to create buckets."""
    creds = checked.credentials
    for user in checked.users:
        access, secret = creds.group(user.group)
        config = paths.GROUP_CONFIG.format(group=user.group)
        kvfiles.private_file(
            name=f"S3 credentials of cache group {user.group} {config}",
            path=config,
            content=Secret(group_config(me, user.group, access, secret)),
        )
        s3.user(
            name=f"RGW user {user.uid} (cache group {user.group}'s engines)",
            uid=user.uid,
            display_name=f"{me.s3.user_display_name}, cache group {user.group}",
            access_key=access,
            secret_key=secret,
            admin_config=config,
            timeout=timeout,
        )
        mark_owned(me, ownership.S3_USER, user.uid, plans, timeout)
        s3_quota.user_no_new_buckets(
            name=f"RGW user {user.uid} creates no buckets (max_buckets -1)",
            uid=user.uid,
            timeout=timeout,
        )
