"""Manage the S3 side of Ceph RGW: rgw_dns_name, the RGW user, a bucket, its lifecycle.

Reads come from ``deploys.facts.rgw`` (``ceph``/``radosgw-admin`` on the Ceph admin host);
writes that need S3 credentials go through ``deploys/remote/s3admin.py`` on that host, which
reads the keys from a private file. Nothing here decides at execution time: every command is
planned from facts, so ``--dry`` shows what a real run does.
"""

from __future__ import annotations

import hashlib
import json
from dataclasses import dataclass, field

from pyinfra import host, logger
from pyinfra.api import OperationError, QuoteString, StringCommand, operation

from deploys import paths
from deploys.facts import memo
from deploys.facts.rgw import RgwBucket, RgwLifecycle, RgwReachable, RgwUser
from deploys.operations import ceph as ceph_ops
from deploys.operations import orch_readback, s3_quota

ROTATION_HINT = "rotate with rotate.py (docs/security.md, 'S3 key rotation')"
# The operator's command for the last rotation step (an access key is an identifier).
RETIRE_COMMAND = (
    "pyinfra -y <inventory> rotate.py --data kvceph_rotation=retire "
    "--data kvceph_retire_access_key={access_key}"
)


def _radosgw_admin(timeout: int, *args) -> StringCommand:
    return StringCommand("timeout", str(timeout), "radosgw-admin", *args)


def _s3admin(script: str | None, config: str | None, timeout: int, *args) -> StringCommand:
    # None = the paths module's value when the operation runs, not when this module was
    # imported (tests/integration/s3_local_deploy.py moves them into a temp directory).
    script = script or paths.ADMIN_SCRIPT
    config = config or paths.ADMIN_CONFIG
    return StringCommand(
        "timeout",
        str(timeout),
        "python3",
        QuoteString(script),
        "--config",
        QuoteString(config),
        *args,
    )


def _fail(message: str) -> StringCommand:
    # A refusal is a failed operation with the reason on stderr: visible in the run's
    # summary and in --dry's plan, and it stops this host before later S3 steps.
    logger.warning(message)
    return StringCommand("echo", QuoteString(message), ">&2", "&&", "exit", "1")


DEFAULT_UNREACHABLE_FIX = "start RGW / check the endpoint"


def unreachable_message(
    endpoint: str, host_name: str, probe: dict | None, fix: str = DEFAULT_UNREACHABLE_FIX
) -> str | None:
    """The one line that stops the S3 tier when RGW does not answer HTTP, or None.

    + fix: what to do, as the caller knows who serves the endpoint (e.g. cephadm's ingress)
    """
    if probe and probe.get("reachable"):
        return None
    attempts = (probe or {}).get("attempts") or []
    reason = attempts[-1].split(": ", 1)[-1] if attempts else "no answer from the probe"
    return f"S3 tier: cannot reach RGW at {endpoint} from {host_name}: {reason}; fix: {fix}"


@operation(is_idempotent=True)
def rgw_reachable(
    endpoint: str,
    timeout: int = 5,
    tries: int = 3,
    delay: int = 2,
    deploying: bool = False,
    fix: str = DEFAULT_UNREACHABLE_FIX,
):
    """
    Check that RGW answers HTTP at ``endpoint`` from this host; fail the run if it does not.

    + endpoint: S3 endpoint URL as this host reaches it (``kvceph_s3_admin_endpoint``)
    + timeout: seconds per HTTP try
    + tries: HTTP tries before giving up
    + delay: seconds between tries
    + deploying: this run applies the RGW service spec first, so while planning (before it
      is applied) RGW may not answer yet; the check then only fails when the run executes
    + fix: the failure line's fix (who serves the endpoint decides what to start)

    Only reads. ``radosgw-admin`` reads go through RADOS and succeed with RGW stopped, so
    without this a converged tier would report no change while the engines' S3 path is down.
    Every failed try is logged; the failure raises OperationError with one line.

    .. code:: python

        s3.rgw_reachable(endpoint="http://127.0.0.1:80")
    """
    probe = host.get_fact(
        RgwReachable, endpoint=endpoint, timeout=timeout, tries=tries, delay=delay
    )
    for attempt in (probe or {}).get("attempts") or []:
        logger.warning("S3 tier: RGW at %s from %s: %s", endpoint, host.name, attempt)
    problem = unreachable_message(endpoint, host.name, probe, fix)
    if problem and deploying and not host.state.is_executing:
        host.noop(
            f"RGW does not answer at {endpoint} yet; this run applies its service spec first, "
            "so it is checked again when the run executes"
        )
    elif problem:
        raise OperationError(problem)
    else:
        host.noop(f"RGW answers at {endpoint} (HTTP {probe['status']})")
    yield from ()  # a check: reads a fact, never changes anything


@operation()
def rgw_dns_name(
    dns_name: str,
    managed_by: str = "cephadm",
    service_name: str = "rgw.standard",
    section: str | None = None,
    adopt: tuple[str, ...] = (),
    connect_timeout: int = 10,
    command_timeout: int = 60,
):
    """
    Set ``rgw_dns_name`` for virtual-hosted addressing; restart RGW when cephadm owns it.

    + dns_name: the name clients put after the bucket (``<bucket>.<dns_name>``)
    + managed_by: ``cephadm`` (restart the service) or ``external`` (warn: its owner restarts)
    + service_name: cephadm service to restart, e.g. ``rgw.standard``
    + section: config section of kvceph's RGW daemons (None: ``client.<service_name>``)
    + adopt: objects the operator handed over for this run (``kvceph_adopt``)
    + connect_timeout: ``ceph --connect-timeout`` seconds
    + command_timeout: overall seconds per ``ceph`` command

    Only kvceph's section is written, and only where kvceph owns the value
    (``ceph.config_option``'s rules, deploys/cluster/ownership.py): another RGW keeps its name.

    .. code:: python

        rgw_dns_name(dns_name="s3.cephlab.com", service_name="rgw.standard")
    """
    t = {"connect_timeout": connect_timeout, "command_timeout": command_timeout}
    section = section or f"client.{service_name}"
    plan = ceph_ops.read_option_plan(section, "rgw_dns_name", dns_name, adopt, t)
    for note in plan.notes:
        logger.warning("kvceph: %s", note)
    if plan.refusal:
        raise OperationError(plan.refusal)
    if not plan.set:
        host.noop(f"{section} rgw_dns_name is already {dns_name}")
        return
    current = plan.was
    yield from ceph_ops.option_commands(section, "rgw_dns_name", dns_name, t)
    # RGW reads rgw_dns_name only at start: restart through the orchestrator, wait for the daemons.
    if managed_by == "cephadm":
        logger.info(
            "%sS3 tier: rgw_dns_name %r -> %r: %s's daemons restart one at a time "
            "(`ceph orch daemon restart`, each running again before the next)",
            host.print_prefix,
            current,
            dns_name,
            service_name,
        )
        yield orch_readback.restart_command(service_name, t)
    else:
        logger.warning(
            "S3 tier: rgw_dns_name changes from %r to %r; RGW is managed externally, so its "
            "owner must restart every RGW daemon before virtual-hosted requests work",
            current,
            dns_name,
        )


def secret_sha256(secret: str) -> str:
    """SHA-256 of a secret key, as the RgwUser fact reports it."""
    return hashlib.sha256(str.__str__(secret).encode()).hexdigest()


@operation()
def user(
    uid: str,
    display_name: str,
    access_key: str,
    secret_key: str,
    admin_script: str | None = None,
    admin_config: str | None = None,
    timeout: int = 60,
):
    """
    Create the RGW user with the operator's keys; never replace a key of an existing user.

    + uid: RGW user id
    + display_name: display name for a new user
    + access_key: the operator's access key (a ``Secret``; only compared, never printed)
    + secret_key: the operator's secret key (a ``Secret``; compared by SHA-256)
    + admin_script: path of s3admin.py on the host (creates the user from ``admin_config``)
    + admin_config: private INI file holding the same keys
    + timeout: seconds per remote command

    An existing user whose key differs is reported and the operation fails: replacing the
    key in place gives every engine 403s and LMCache silently stops using S3.
    """
    current = memo.read(host, RgwUser, uid=uid, timeout=timeout)
    if current is None:
        yield _s3admin(
            admin_script,
            admin_config,
            timeout,
            "create-user",
            QuoteString(uid),
            "--display-name",
            QuoteString(display_name),
        )
        return
    problem = user_refusal(current, uid, access_key, secret_key)
    if problem:
        yield _fail(problem)
        return
    notice = other_keys_notice(current, uid, access_key)
    if notice:
        logger.warning(notice)
    host.noop(f"RGW user {uid} exists with the configured keys")


def user_refusal(current: dict | None, uid: str, access_key: str, secret_key: str) -> str | None:
    """Why an existing user cannot be used with the configured keys (one line), or None."""
    if current is None:
        return None
    wanted = str.__str__(access_key)
    keys = {k["access_key"]: k["secret_sha256"] for k in current.get("keys", [])}
    if wanted not in keys:
        problem = "does not hold the configured access key"
    elif keys[wanted] != secret_sha256(secret_key):
        problem = "holds the configured access key with a different secret key"
    else:
        return None
    return (
        f"S3 tier: RGW user {uid} exists but {problem}; kvceph does not replace keys in "
        f"place (engines would get 403 and LMCache silently turns S3 off); fix: give kvceph "
        f"the keys the user has, or rotate them - {ROTATION_HINT}"
    )


def other_keys(current: dict | None, access_key: str) -> list[str]:
    """Access keys of the user other than the configured one (left there by a rotation)."""
    wanted = str.__str__(access_key)
    return [k["access_key"] for k in (current or {}).get("keys", []) if k["access_key"] != wanted]


def other_keys_notice(current: dict | None, uid: str, access_key: str) -> str | None:
    """The visible notice for keys a rotation added and has not retired yet, or None."""
    others = other_keys(current, access_key)
    if not others:
        return None
    retire = "; ".join(RETIRE_COMMAND.format(access_key=k) for k in others)
    return (
        f"S3 tier: RGW user {uid} also holds key(s) {', '.join(others)} besides the configured "
        f"one; retire each once every engine runs the configured key: {retire}"
    )


@operation()
def bucket(
    bucket_name: str,
    owner: str,
    admin_script: str | None = None,
    admin_config: str | None = None,
    timeout: int = 60,
):
    """
    Create a bucket (owned by the keys in ``admin_config``) unless it exists.

    + bucket_name: bucket name
    + owner: RGW user id that must own it (the one whose keys the engines use)
    + admin_script: path of s3admin.py on the host
    + admin_config: private INI file with that user's keys
    + timeout: seconds for the remote command
    """
    current = memo.read(host, RgwBucket, bucket=bucket_name, timeout=timeout)
    if current is None:
        # The owner may create no bucket (s3_quota.user_no_new_buckets): lift that around
        # the one creation kvceph makes, never for longer than it takes.
        locked = (memo.read(host, RgwUser, uid=owner, timeout=timeout) or {}).get("max_buckets")
        if locked is not None and locked < 0:
            yield s3_quota.max_buckets_command(owner, 1, timeout)
        yield _s3admin(
            admin_script, admin_config, timeout, "create-bucket", QuoteString(bucket_name)
        )
        if locked is not None and locked < 0:
            yield s3_quota.max_buckets_command(owner, locked, timeout)
        return
    problem = bucket_refusal(current, bucket_name, owner)
    if problem:
        yield _fail(problem)
        return
    host.noop(f"bucket {bucket_name} exists, owned by {owner}")


def bucket_refusal(current: dict | None, bucket_name: str, owner: str) -> str | None:
    """Why an existing bucket cannot serve the engines (one line), or None."""
    if current is None or current.get("owner") == owner:
        return None
    return (
        f"S3 tier: bucket {bucket_name} exists but is owned by RGW user "
        f"{current.get('owner')}, not {owner}; engines would get 403; "
        f"fix: choose another kvceph_s3_bucket or move the bucket to {owner} "
        f"(radosgw-admin bucket link)"
    )


def lifecycle_rules(rule_id: str, expiration_days: int, abort_multipart_days: int) -> list[dict]:
    """kvceph's lifecycle rules, in the shape the RgwLifecycle fact reports them."""
    return [
        {
            "ID": rule_id,
            "Status": "Enabled",
            "Filter": {"Prefix": ""},
            "Expiration": {"Days": expiration_days},
        },
        {
            "ID": f"{rule_id}-abort-multipart",
            "Status": "Enabled",
            "Filter": {"Prefix": ""},
            "AbortIncompleteMultipartUpload": {"DaysAfterInitiation": abort_multipart_days},
        },
    ]


@dataclass
class LifecycleMerge:
    """Result of merging kvceph's rules into a bucket's current lifecycle."""

    rules: list[dict]
    added: list[str] = field(default_factory=list)
    updated: list[str] = field(default_factory=list)
    removed: list[str] = field(default_factory=list)
    kept_stale: list[str] = field(default_factory=list)  # ours, unwanted, removal not allowed
    untranslatable: list[str] = field(default_factory=list)  # foreign rules we cannot rewrite

    @property
    def changed(self) -> bool:
        return bool(self.added or self.updated or self.removed)


def merge_lifecycle(
    current: list[dict] | None,
    desired: list[dict],
    managed_prefix: str = "kvceph-",
    allow_removal: bool = False,
) -> LifecycleMerge:
    """
    Merge ``desired`` rules into ``current`` by rule ID (a lifecycle PUT replaces all rules).

    Rules of others are kept unchanged, in place. A rule is ours when its ID is desired or
    starts with ``managed_prefix``; ours that are no longer desired (e.g. after renaming
    ``kvceph_s3_lifecycle_rule_id``) are removed only when ``allow_removal`` is set.
    """
    wanted = {r["ID"]: r for r in desired}
    merge = LifecycleMerge(rules=[])
    for rule in current or []:
        rid = rule.get("ID", "")
        if rid in wanted:
            new = wanted.pop(rid)
            if new != rule:
                merge.updated.append(rid)
            merge.rules.append(new)
        elif managed_prefix and rid.startswith(managed_prefix):
            if allow_removal:
                merge.removed.append(rid)
            else:
                merge.kept_stale.append(rid)
                merge.rules.append(rule)
        else:
            merge.rules.append(rule)
    for rid, new in wanted.items():
        merge.added.append(rid)
        merge.rules.append(new)
    merge.untranslatable = [r["ID"] for r in merge.rules if "kvceph_untranslatable" in r]
    return merge


def lifecycle_refusal(merge: LifecycleMerge, bucket_name: str, rules: list[dict]) -> str | None:
    """Why the merged lifecycle cannot be written without altering others' rules, or None."""
    if not merge.changed or not merge.untranslatable:
        return None
    return (
        f"S3 tier: bucket {bucket_name} has lifecycle rule(s) "
        f"{', '.join(merge.untranslatable)} with fields kvceph cannot reproduce; "
        f"writing the merged configuration would alter them; "
        f"fix: add kvceph's rules {', '.join(r['ID'] for r in rules)} by hand"
    )


@operation()
def bucket_lifecycle(
    bucket_name: str,
    rules: list[dict],
    admin_script: str | None = None,
    admin_config: str | None = None,
    managed_prefix: str = "kvceph-",
    allow_removal: bool = False,
    timeout: int = 60,
):
    """
    Merge lifecycle rules into a bucket's configuration by rule ID, keeping everyone else's.

    + bucket_name: bucket name
    + rules: desired rules in S3 API shape (see ``lifecycle_rules``)
    + admin_script: path of s3admin.py on the host (it PUTs the merged configuration)
    + admin_config: private INI file with the bucket owner's keys
    + managed_prefix: rule IDs with this prefix are kvceph's own
    + allow_removal: remove kvceph rules that are no longer desired (operator opt-in:
      ``--data kvceph_allow_lifecycle_removal=true``)
    + timeout: seconds per remote command
    """
    current = memo.read(host, RgwLifecycle, bucket=bucket_name, timeout=timeout)
    merge = merge_lifecycle(current, rules, managed_prefix, allow_removal)
    if merge.kept_stale:
        logger.warning(
            "S3 tier: bucket %s keeps kvceph lifecycle rule(s) %s that are no longer "
            "configured; they still expire objects; remove them with "
            "--data kvceph_allow_lifecycle_removal=true",
            bucket_name,
            ", ".join(merge.kept_stale),
        )
    if not merge.changed:
        host.noop(f"lifecycle of {bucket_name} has rules {', '.join(r['ID'] for r in rules)}")
        return
    problem = lifecycle_refusal(merge, bucket_name, rules)
    if problem:
        yield _fail(problem)
        return
    what = [
        f"{verb} {', '.join(ids)}"
        for verb, ids in (
            ("add", merge.added),
            ("update", merge.updated),
            ("remove", merge.removed),
        )
        if ids
    ]
    logger.info("S3 tier: lifecycle of %s: %s", bucket_name, "; ".join(what))
    yield _s3admin(
        admin_script,
        admin_config,
        timeout,
        "put-lifecycle",
        QuoteString(bucket_name),
        "--rules-json",
        QuoteString(json.dumps(merge.rules, sort_keys=True, separators=(",", ":"))),
    )
