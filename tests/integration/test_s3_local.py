"""The real "S3 tier" stage through pyinfra's @local connector against a local Ceph Pacific.

The cluster is conftest.py's ``local_ceph`` (a throwaway single-node Pacific on this machine,
shared with test_ceph_local.py). The RGW user and bucket get a per-run name (``kvceph-it-``),
distinct from that file's ``kvit-`` pools and from the recipe's ``test`` user; this file
creates no pools of its own (RGW creates its default ones).
"""

from __future__ import annotations

import json
import os
import secrets
import subprocess
import sys
from pathlib import Path

import pytest
from conftest import path_style_client

pytestmark = pytest.mark.integration

REPO = Path(__file__).resolve().parents[2]
PYINFRA = str(Path(sys.executable).parent / "pyinfra")
DEPLOY = str(Path(__file__).resolve().parent / "s3_local_deploy.py")


@pytest.fixture(scope="module")
def world(local_ceph, tmp_path_factory):
    """Inventory, keys and names for this test (unique, so a kept cluster can be reused)."""
    root = tmp_path_factory.mktemp("s3tier")
    name = f"kvceph-it-{secrets.token_hex(3)}"
    port = local_ceph.rgw_port
    inventory = root / "inventory.py"
    data = {
        "kvceph_ceph_pools": [],
        "kvceph_ceph_connect_timeout": 5,
        "kvceph_ceph_command_timeout": 60,
        "kvceph_rgw_managed_by": "external",
        "kvceph_rgw_dns_name": "s3.kvceph-test",
        # the throwaway local cluster serves plain http: a lab, as kvceph judges http (issue 52)
        "kvceph_lab": True,
        "kvceph_s3_endpoint": f"http://s3.kvceph-test:{port}",
        "kvceph_s3_admin_endpoint": f"http://127.0.0.1:{port}",
        "kvceph_s3_endpoint_ip": "127.0.0.1",
        "kvceph_s3_bucket": name,
        "kvceph_s3_user": name,
        # No inference host, so no cache group: the bucket's owner (issue 36) is the one user.
        "kvceph_s3_admin_user": name,
        "kvceph_s3_expiration_days": 3,
        "kvceph_s3_quota_max_size_gb": 1,
    }
    inventory.write_text(f"ceph_admin = [('@local', {data!r})]\n")
    return {
        "root": root,
        "inventory": str(inventory),
        "name": name,
        "access": "KVIT" + secrets.token_hex(8).upper(),
        "secret": secrets.token_urlsafe(24),
        "ceph_conf": local_ceph.conf,
        "rgw_port": port,
    }


def run_stage(world, secret=None):
    env = {
        **os.environ,
        "CEPH_CONF": world["ceph_conf"],
        "PYTHONPATH": str(REPO),
        "KVCEPH_S3_TEST_ROOT": str(world["root"]),
        # The bucket owner's keys, and no lab's secrets file (make exports the lab's).
        "KVCEPH_SECRETS_FILE": str(world["root"] / "no-secrets.env"),
        "KVCEPH_S3_ADMIN_ACCESS_KEY": world["access"],
        "KVCEPH_S3_ADMIN_SECRET_KEY": secret or world["secret"],
    }
    proc = subprocess.run(
        [PYINFRA, "-y", "-vv", "--json", world["inventory"], DEPLOY],
        cwd=world["root"],
        env=env,
        capture_output=True,
        text=True,
        timeout=300,
    )
    start = proc.stdout.find("{")
    results = json.loads(proc.stdout[start:]) if start >= 0 else {}
    ops = results.get("results", {}).get("operations", [])
    changed = [op["name"] for op in ops if op["success"]]
    return proc.returncode, changed, proc.stdout + proc.stderr


def s3(world):
    return path_style_client(
        f"http://127.0.0.1:{world['rgw_port']}", world["access"], world["secret"]
    )


def rules_by_id(client, bucket):
    rules = client.get_bucket_lifecycle_configuration(Bucket=bucket)["Rules"]
    return {r["ID"]: r for r in rules}


def test_converges_then_no_change_then_keeps_foreign_rules(world):
    rc, changed, output = run_stage(world)
    assert rc == 0, output[-4000:]
    assert any("RGW user" in name for name in changed), changed
    assert any("Lifecycle" in name for name in changed), changed
    assert world["secret"] not in output
    if any("rgw_dns_name" in name for name in changed):
        assert "RGW is managed externally" in output

    rc, changed, output = run_stage(world)
    assert rc == 0, output[-4000:]
    assert changed == [], f"second run changed {changed}"

    client, bucket = s3(world), world["name"]
    assert bucket in [b["Name"] for b in client.list_buckets()["Buckets"]]
    rules = rules_by_id(client, bucket)
    assert rules["kvceph-expire"]["Expiration"] == {"Days": 3}
    assert rules["kvceph-expire-abort-multipart"]["AbortIncompleteMultipartUpload"] == {
        "DaysAfterInitiation": 1
    }

    # Someone else adds a rule: the stage neither removes nor rewrites it.
    foreign = {
        "ID": "team-logs",
        "Filter": {"Prefix": "logs/"},
        "Status": "Enabled",
        "Expiration": {"Days": 30},
    }
    client.put_bucket_lifecycle_configuration(
        Bucket=bucket, LifecycleConfiguration={"Rules": [*rules.values(), foreign]}
    )
    rc, changed, output = run_stage(world)
    assert rc == 0 and changed == [], (changed, output[-4000:])
    assert set(rules_by_id(client, bucket)) == {
        "kvceph-expire",
        "kvceph-expire-abort-multipart",
        "team-logs",
    }

    env = {**os.environ, "CEPH_CONF": world["ceph_conf"]}
    info = subprocess.run(
        ["timeout", "60", "radosgw-admin", "user", "info", f"--uid={bucket}"],
        env=env,
        capture_output=True,
        text=True,
        check=True,
    )
    # The bucket owner's own quota (issue 36: user scope, always set).
    quota = json.loads(info.stdout)["user_quota"]
    assert quota["enabled"] and quota["max_size"] == 1024**3
    dns = subprocess.run(
        [
            "timeout",
            "30",
            "ceph",
            "--connect-timeout=10",
            "config",
            "get",
            "client.rgw",
            "rgw_dns_name",
        ],
        env=env,
        capture_output=True,
        text=True,
        check=True,
    )
    assert dns.stdout.strip() == "s3.kvceph-test"
    ini = world["root"] / "admin" / "s3-admin.ini"
    assert oct(ini.stat().st_mode & 0o777) == "0o600"
    assert oct(ini.parent.stat().st_mode & 0o777) == "0o700"


def test_different_secret_is_refused_not_replaced(world):
    wrong = secrets.token_urlsafe(24)
    rc, changed, output = run_stage(world, secret=wrong)
    assert rc != 0
    assert changed == [], f"refusal came after {changed}"
    assert f"RGW user {world['name']} exists but holds the configured access key" in output
    assert "rotate with rotate.py" in output
    assert wrong not in output and world["secret"] not in output
    # The user's key is untouched: the original secret still works.
    s3(world).head_bucket(Bucket=world["name"])
