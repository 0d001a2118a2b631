"""Manage who may do what on the KV bucket: its owner (RGW ``bucket link``) and its policy.

kvceph's statements (Sid ``kvceph-*``, deploys/cluster/bucket_policy.py) are merged into the
bucket's policy, everyone else's kept; the owner moves to the admin user only from the single engine
user of a deploy before issue 36 (any other owner is refused by the S3 tier's preflight).
"""

from __future__ import annotations

from pyinfra import host, logger
from pyinfra.api import QuoteString, StringCommand, operation

from deploys import paths
from deploys.cluster import bucket_policy
from deploys.facts import memo
from deploys.facts.rgw import BucketPolicy, RgwBucket


@operation()
def bucket_policy_statements(
    bucket: str,
    statements: list[dict],
    config: str | None = None,
    admin_script: str | None = None,
    timeout: int = 60,
):
    """
    Merge kvceph's statements into the bucket's policy (by Sid), keeping everyone else's.

    + bucket: the KV bucket
    + statements: ``bucket_policy.statements(...)``
    + config: private INI of the bucket owner's keys (default: the admin user's)
    + admin_script: s3admin.py on the host
    + timeout: seconds for the remote command

    A put replaces the whole document, so foreign statements are read first and written back.

    .. code:: python

        bucket_policy_statements(bucket="lmcache", statements=bucket_policy.statements(...))
    """
    config = config or paths.ADMIN_CONFIG
    script = admin_script or paths.ADMIN_SCRIPT
    current = memo.read(host, BucketPolicy, bucket=bucket, admin_script=script, config=config)
    merged = bucket_policy.merge(current, statements)
    if not merged.changed:
        host.noop(f"policy of {bucket} holds kvceph's {len(statements)} statements")
        return
    logger.info("S3 tier: policy of %s: %s", bucket, merged.summary())
    yield StringCommand(
        "timeout", str(timeout), "python3", QuoteString(script), "--config", QuoteString(config),
        "put-policy", QuoteString(bucket),
        "--policy-json", QuoteString(bucket_policy.dump(merged.document)),
    )  # fmt: skip


def owner_plan(current: dict | None, owner: str, previous: str) -> str | None:
    """``"link"`` when the bucket must move from ``previous`` to ``owner``, else None.

    + current: the RgwBucket fact (None: no bucket yet, created by its owner)
    """
    if current is None or current.get("owner") == owner:
        return None
    if current.get("owner") == previous:
        return "link"
    return None  # someone else's: the S3 tier's refusal names it


@operation()
def bucket_owner(bucket: str, owner: str, previous: str, timeout: int = 60):
    """
    Move the bucket from the engines' former user to the admin user (``radosgw-admin bucket
    link``: the bucket's record only; objects keep their writer as owner, which the policy and
    the owner's rights cover).

    + bucket: the KV bucket
    + owner: the admin user that must own it
    + previous: the only owner kvceph moves it from (``kvceph_s3_user``, before issue 36)
    + timeout: seconds for ``radosgw-admin``
    """
    current = memo.read(host, RgwBucket, bucket=bucket, timeout=timeout)
    if owner_plan(current, owner, previous) is None:
        host.noop(f"bucket {bucket} is owned by {owner}" if current else f"no bucket {bucket} yet")
        return
    yield StringCommand(
        "timeout", str(timeout), "radosgw-admin", "bucket", "link",
        QuoteString(f"--bucket={bucket}"), QuoteString(f"--uid={owner}"),
    )  # fmt: skip
