"""Least privilege on the lab's RGW (issue 36): each cache group's key reads and writes only its
own object names; RGW refuses (403) everything else, the bucket's own configuration included.

The engines still get hits with these keys: test_02_verify / test_13_status / test_18_capacity.
"""

from __future__ import annotations

import json
import uuid

import pytest
from botocore.exceptions import ClientError
from conftest import (
    GROUP_PREFIX,
    S3_ADMIN_URL,
    path_style_client,
    pyinfra,
    s3_client,
    secrets,
    ssh,
)

BUCKET = "lmcache"
# deploys/cluster/bucket_policy.py: each group's grant is its namespace folder
# (settings/namespace.py).
PREFIX = GROUP_PREFIX


def group_client(group: str):
    keys = secrets()
    suffix = group.upper()
    return path_style_client(
        S3_ADMIN_URL,
        keys[f"KVCEPH_S3_ACCESS_KEY_{suffix}"],
        keys[f"KVCEPH_S3_SECRET_KEY_{suffix}"],
        read_timeout=10,
        attempts=1,
    )


def refused(call, **kwargs) -> str:
    """RGW's error code for a call it must refuse (the test fails when it is let through).

    ``call`` is a method name of a fresh client, or a bound method: after RGW refuses a PUT
    before reading its body, a reused connection's next request reaches haproxy mid-body (400).
    """
    if isinstance(call, tuple):
        group, name = call
        call = getattr(group_client(group), name)
    with pytest.raises(ClientError) as err:
        call(**kwargs)
    status = err.value.response.get("ResponseMetadata", {}).get("HTTPStatusCode")
    assert status == 403, (call.__name__, err.value.response)
    return err.value.response.get("Error", {}).get("Code", "")


def test_a_group_key_reaches_its_own_names_only(converged):
    gpu, admin = group_client("gpu"), s3_client()
    own = f"{PREFIX['gpu']}kvceph-privilege-{uuid.uuid4().hex[:8]}"
    other = f"{PREFIX['gaudi']}kvceph-privilege-{uuid.uuid4().hex[:8]}"
    admin.put_object(Bucket=BUCKET, Key=other, Body=b"gaudi's KV")
    try:
        # Its own names: put, get, head; a miss is a 404 (it may list under its prefix).
        gpu.put_object(Bucket=BUCKET, Key=own, Body=b"gpu's KV")
        assert gpu.get_object(Bucket=BUCKET, Key=own)["Body"].read() == b"gpu's KV"
        assert gpu.head_object(Bucket=BUCKET, Key=own)["ContentLength"] == 8
        with pytest.raises(ClientError) as miss:
            gpu.head_object(Bucket=BUCKET, Key=own + "-missing")
        assert miss.value.response["ResponseMetadata"]["HTTPStatusCode"] == 404
        # A listing under its own names (the object itself as the prefix: the session's
        # earlier tests leave more than one page of the group's chunks before it).
        assert own.startswith(PREFIX["gpu"])
        listed = gpu.list_objects_v2(Bucket=BUCKET, Prefix=own)
        assert own in [o["Key"] for o in listed.get("Contents", [])]

        # Another group's names: neither read, nor written, nor listed.
        refused(("gpu", "get_object"), Bucket=BUCKET, Key=other)
        refused(("gpu", "put_object"), Bucket=BUCKET, Key=other, Body=b"poisoned")
        refused(("gpu", "list_objects_v2"), Bucket=BUCKET, Prefix=PREFIX["gaudi"])
        # A listing with no prefix is allowed (names only): deploys/cluster/bucket_policy.py says
        # why.
        refused(("gpu", "put_object"), Bucket=BUCKET, Key="outside-any-group", Body=b"x")
        assert admin.get_object(Bucket=BUCKET, Key=other)["Body"].read() == b"gaudi's KV"

        # No delete, not even of its own objects; no bucket configuration; no new bucket.
        refused(("gpu", "delete_object"), Bucket=BUCKET, Key=own)
        policy = json.dumps({"Version": "2012-10-17", "Statement": []})
        refused(("gpu", "put_bucket_policy"), Bucket=BUCKET, Policy=policy)
        refused(("gpu", "delete_bucket_policy"), Bucket=BUCKET)
        rule = {"ID": "x", "Status": "Enabled", "Filter": {"Prefix": ""}, "Expiration": {"Days": 1}}
        rules = {"Rules": [rule]}
        refused(
            ("gpu", "put_bucket_lifecycle_configuration"),
            Bucket=BUCKET,
            LifecycleConfiguration=rules,
        )
        refused(("gpu", "create_bucket"), Bucket=f"kvceph-extra-{uuid.uuid4().hex[:8]}")
        # gaudi's key, the other way round.
        refused(("gaudi", "get_object"), Bucket=BUCKET, Key=own)
    finally:
        admin.delete_objects(
            Bucket=BUCKET, Delete={"Objects": [{"Key": own}, {"Key": other}], "Quiet": True}
        )
    # The owner is the admin user; no inference host holds its key.
    stats = json.loads(ssh("ceph1", f"radosgw-admin bucket stats --bucket={BUCKET}").stdout)
    assert stats["owner"] == "kvceph-s3-admin"
    admin_secret = secrets()["KVCEPH_S3_ADMIN_SECRET_KEY"]
    for host in ("gpu1", "gpu2", "gaudi1"):
        found = ssh(host, f"grep -rlF -- {admin_secret} /var/lib/vllm /etc/kvceph || true").stdout
        assert found.strip() == "", (host, found)


def test_a_bucket_of_the_former_engine_user_moves_once(converged):
    """Migration: the bucket owned by today's single engine user converges to the admin user;
    the former user keeps its engines' access while its key is configured; a second run and
    its --dry report no change."""
    legacy = {
        "KVCEPH_S3_ACCESS_KEY": "LABLEGACY" + uuid.uuid4().hex[:12].upper(),
        "KVCEPH_S3_SECRET_KEY": uuid.uuid4().hex,
    }
    uid = "lmcache"
    ssh(
        "ceph1",
        f"radosgw-admin user create --uid={uid} --display-name=legacy >/dev/null 2>&1 || true; "
        f"radosgw-admin key create --uid={uid} --key-type=s3 "
        f"--access-key={legacy['KVCEPH_S3_ACCESS_KEY']} "
        f"--secret-key={legacy['KVCEPH_S3_SECRET_KEY']} >/dev/null && "
        f"radosgw-admin bucket link --bucket={BUCKET} --uid={uid}",
    )
    try:
        moved = pyinfra("--limit", "ceph1", env=legacy)
        assert moved.rc == 0, moved.output[-4000:]
        names = [name for name, _ in moved.changed()]
        assert any("moves from lmcache to kvceph-s3-admin" in n for n in names), names
        assert "still configured" in moved.output  # the plan's warning about the legacy key
        stats = json.loads(ssh("ceph1", f"radosgw-admin bucket stats --bucket={BUCKET}").stdout)
        assert stats["owner"] == "kvceph-s3-admin"
        old = path_style_client(
            S3_ADMIN_URL, legacy["KVCEPH_S3_ACCESS_KEY"], legacy["KVCEPH_S3_SECRET_KEY"]
        )
        key = f"{PREFIX['gpu']}kvceph-legacy-{uuid.uuid4().hex[:8]}"
        old.put_object(Bucket=BUCKET, Key=key, Body=b"legacy")  # its engines keep working
        assert old.get_object(Bucket=BUCKET, Key=key)["Body"].read() == b"legacy"
        old = path_style_client(
            S3_ADMIN_URL, legacy["KVCEPH_S3_ACCESS_KEY"], legacy["KVCEPH_S3_SECRET_KEY"]
        )
        refused(old.delete_object, Bucket=BUCKET, Key=key)  # ... with no more than they need
        s3_client().delete_object(Bucket=BUCKET, Key=key)
        plan = pyinfra("--limit", "ceph1", "--dry", env=legacy)
        assert plan.rc == 0 and plan.planned() == [], plan.planned()
    finally:
        # The legacy key gone from the secrets: its statement goes with it.
        after = pyinfra("--limit", "ceph1")
        ssh("ceph1", f"radosgw-admin user rm --uid={uid} || true")
    assert after.rc == 0, after.output[-4000:]
    policy = json.loads(s3_client().get_bucket_policy(Bucket=BUCKET)["Policy"])
    assert "kvceph-legacy-engines" not in [s.get("Sid") for s in policy["Statement"]]
