"""Bound the engines' RGW user: a size quota, and no buckets of its own making.

Reads come from ``RgwUser`` (``radosgw-admin user info`` on the Ceph admin host); writes are
``radosgw-admin`` calls with no secret in them. The quota figure is decided by
``deploys/cluster/capacity.py`` (explicit, derived from MAX AVAIL, or kept).
"""

from __future__ import annotations

from pyinfra import host
from pyinfra.api import QuoteString, StringCommand, operation

from deploys.cluster.capacity import size
from deploys.facts import memo
from deploys.facts.rgw import RgwUser


def _radosgw_admin(timeout: int, *args) -> StringCommand:
    return StringCommand("timeout", str(timeout), "radosgw-admin", *args)


@operation()
def user_quota(uid: str, max_size: int, timeout: int = 60):
    """
    Enable a user-scope size quota: every bucket of the user together stays below it.

    + uid: RGW user id
    + max_size: bytes (RGW counts the objects' own bytes)
    + timeout: seconds per ``radosgw-admin`` command

    A user scope, not a bucket scope: a bucket quota bounds each bucket, and a user that may
    create buckets multiplies it. Pyinfra has no RGW operations; this is two idempotent calls.

    .. code:: python

        s3_quota.user_quota(uid="lmcache", max_size=2 * 1024**4)
    """
    yield from _quota(uid, "user", max_size, timeout)


@operation()
def user_bucket_quota(uid: str, max_size: int, timeout: int = 60):
    """
    Enable a per-bucket size quota for all buckets of a user, so a cache cannot fill Ceph.

    + uid: RGW user id (the user's ``bucket_quota``; buckets without their own quota use it)
    + max_size: size limit in bytes per bucket
    + timeout: seconds per ``radosgw-admin`` command

    Beside the user-scope quota (``s3_quota.user_quota``), with the same size: RGW checks a
    bucket quota against the bucket index's own stats, current with every write, while a user's
    stats reach RGW's quota cache only every ``rgw_user_quota_bucket_sync_interval`` (180 s).
    The user owns one bucket (it may create none), so the two bound the same bytes.
    """
    yield from _quota(uid, "bucket", max_size, timeout)


def _quota(uid: str, scope: str, max_size: int, timeout: int):
    """The commands that give a user's ``<scope>_quota`` this size, enabled (none: a noop)."""
    quota = (memo.read(host, RgwUser, uid=uid, timeout=timeout) or {}).get(f"{scope}_quota") or {}
    flags = (f"--quota-scope={scope}", QuoteString(f"--uid={uid}"))
    if quota.get("enabled") and quota.get("max_size") == max_size:
        host.noop(f"{scope} quota of {uid} is {size(max_size)}")
        return
    if quota.get("max_size") != max_size:
        yield _radosgw_admin(timeout, "quota", "set", *flags, f"--max-size={max_size}")
    if not quota.get("enabled"):
        yield _radosgw_admin(timeout, "quota", "enable", *flags)


# RGW refuses CreateBucket to a user whose max_buckets is negative (ceph/ceph 626d795, Jewel).
NO_NEW_BUCKETS = -1


@operation()
def user_no_new_buckets(uid: str, timeout: int = 60):
    """
    Stop an RGW user from creating buckets (``max_buckets`` -1); its buckets stay its own.

    + uid: RGW user id (run after its bucket exists: ``s3.bucket`` lifts this for a moment
      when it has to create that bucket)
    + timeout: seconds for ``radosgw-admin``
    """
    current = memo.read(host, RgwUser, uid=uid, timeout=timeout) or {}
    if current.get("max_buckets") == NO_NEW_BUCKETS:
        host.noop(f"RGW user {uid} cannot create buckets")
        return
    yield max_buckets_command(uid, NO_NEW_BUCKETS, timeout)


def max_buckets_command(uid: str, count: int, timeout: int) -> StringCommand:
    """``radosgw-admin user modify --max-buckets``; negative values disable creation."""
    return _radosgw_admin(
        timeout, "user", "modify", QuoteString(f"--uid={uid}"), f"--max-buckets={count}"
    )
