"""The operator's checklist on the lab: converge, converge again, look at what landed."""

from __future__ import annotations

import json

import pytest
import yaml
from conftest import (
    CEPHADM,
    GPU_KEY_PREFIX,
    HOSTS,
    INFERENCE,
    S3_PORT,
    S3_SCHEME,
    pyinfra,
    s3_client,
    secrets,
    ssh,
)
from lab_client import completion, external_hits, long_prompt, wait_health

POOLS = {"default.rgw.buckets.data": (32, 1, 1), "default.rgw.buckets.index": (8, 1, 1)}


def test_converge_from_empty_succeeds(lab, converged):
    assert converged.errors() == []
    if not lab["fresh"]:
        pytest.skip("KVCEPH_KEEP_LAB reused a running lab: nothing was empty")
    changed_hosts = {h for _, h in converged.changed()}
    assert changed_hosts == set(HOSTS), converged.changed()


@pytest.mark.skipif(not CEPHADM, reason="the cephadm lab's RGW line and health")
def test_a_fresh_cephadm_lab_deploys_without_alarming_lines(lab, converged):
    # issue 53: what kvceph does instead of the refused concentrator, in words, not the
    # orchestrator's Python error; and no "stray daemon" warning from cephadm's bootstrap
    # check (lab.sh up clears it)
    assert "takes no RGW concentrator" in converged.output
    assert "unexpected keyword argument" not in converged.output
    health = ssh("ceph1", "ceph health detail").stdout
    assert "CEPHADM_STRAY" not in health, health


def test_second_run_reports_no_change(converged):
    again = pyinfra()
    assert again.rc == 0, again.output[-4000:]
    assert again.ops(), "no operations were reported"
    assert again.changed() == []
    assert again.errors() == []


@pytest.mark.parametrize("host", INFERENCE)
def test_files_content_owner_and_mode(converged, host):
    stat = ssh(
        host,
        "stat -c '%n %U:%G %a' /etc/kvceph/lmcache.yaml /etc/kvceph/vllm.env /var/lib/vllm/.aws "
        "/var/lib/vllm/.aws/credentials /var/lib/vllm/.aws/config /etc/systemd/system/vllm.service",
    ).stdout.split("\n")
    assert stat[:6] == [
        "/etc/kvceph/lmcache.yaml root:vllm 640",
        "/etc/kvceph/vllm.env root:vllm 640",
        "/var/lib/vllm/.aws vllm:vllm 700",
        "/var/lib/vllm/.aws/credentials vllm:vllm 600",
        "/var/lib/vllm/.aws/config vllm:vllm 600",
        "/etc/systemd/system/vllm.service root:root 644",
    ]
    config = yaml.safe_load(ssh(host, "cat /etc/kvceph/lmcache.yaml").stdout)
    # kvceph's connector, the default (issue 37 item 2): LMCache's plugin, never remote_url.
    assert config["remote_storage_plugins"] == ["kvceph"] and "remote_url" not in config
    assert config["chunk_size"] == 256
    assert config["local_cpu"] is True  # the DRAM tier in front of S3 (issue 37)
    extra = config["extra_config"]
    assert extra["kvceph.endpoint"] == f"lmcache.s3.kvlab:{S3_PORT}"
    assert extra["kvceph.region"] == "default"
    assert extra["kvceph.tls"] is (S3_SCHEME == "https")  # follows the endpoint's scheme
    assert extra["kvceph.connections"] == 16
    assert not [k for k in extra if k.startswith("s3_") or k == "disable_tls"]  # stock keys
    creds = ssh(host, "cat /var/lib/vllm/.aws/credentials").stdout
    # Its cache group's key (inventories/lab.py: gaudi1 is group gaudi), no other; booleans, so
    # a failure never prints a key.
    group = "GAUDI" if host == "gaudi1" else "GPU"
    own = secrets()[f"KVCEPH_S3_SECRET_KEY_{group}"] in creds
    admin = secrets()["KVCEPH_S3_ADMIN_SECRET_KEY"] in creds
    assert (own, admin) == (True, False), group
    assert "lmcache.s3.kvlab" in ssh(host, "grep kvceph /etc/hosts").stdout
    # No temp file of the atomic writes is left behind.
    assert (
        ssh(
            host, "ls -a /etc/kvceph /var/lib/vllm/.aws | grep -c kvceph-tmp", check=False
        ).stdout.strip()
        == "0"
    )


@pytest.mark.parametrize("host", INFERENCE)
def test_units_active_with_the_deployed_digest(converged, host):
    assert ssh(host, "systemctl is-active vllm.service").stdout.strip() == "active"
    pid = ssh(host, "systemctl show -p MainPID --value vllm.service").stdout.strip()
    environ = ssh(host, f"tr '\\0' '\\n' < /proc/{pid}/environ").stdout
    assert "KVCEPH_DIGEST=" in environ
    assert f"PYTHONHASHSEED={secrets()['KVCEPH_PYTHON_HASH_SEED']}" in environ
    assert "LMCACHE_CONFIG_FILE=/etc/kvceph/lmcache.yaml" in environ


@pytest.mark.parametrize("pool", sorted(POOLS))
def test_ceph_pools_have_the_configured_parameters(converged, pool):
    got = json.loads(ssh("ceph1", f"ceph osd pool get {pool} all -f json").stdout)
    assert (got["pg_num"], got["size"], got["min_size"]) == POOLS[pool]
    apps = json.loads(ssh("ceph1", f"ceph osd pool application get {pool} -f json").stdout)
    assert "rgw" in apps


def test_s3_user_bucket_and_lifecycle(converged):
    info = json.loads(ssh("ceph1", "radosgw-admin user info --uid=kvceph-s3-admin").stdout)
    assert [k["access_key"] for k in info["keys"]] == [secrets()["KVCEPH_S3_ADMIN_ACCESS_KEY"]]
    s3 = s3_client()
    s3.head_bucket(Bucket="lmcache")
    rules = {r["ID"]: r for r in s3.get_bucket_lifecycle_configuration(Bucket="lmcache")["Rules"]}
    assert rules["kvceph-expire"]["Expiration"]["Days"] == 7
    assert any("AbortIncompleteMultipartUpload" in r for r in rules.values())


def _restart_window(host: str) -> tuple[int, int]:
    """(when the old engine stopped, when the new one started), kernel-monotonic µs.

    The lab's hosts share one kernel, so these clocks compare across hosts.
    """
    out = ssh(
        host,
        "systemctl show vllm.service -p InactiveEnterTimestampMonotonic "
        "-p ExecMainStartTimestampMonotonic",
    ).stdout
    # By name: systemctl prints properties in its own order, not the order of the -p flags.
    props = dict(line.split("=", 1) for line in out.splitlines() if "=" in line)
    return int(props["InactiveEnterTimestampMonotonic"]), int(
        props["ExecMainStartTimestampMonotonic"]
    )


def _main_pids() -> dict[str, str]:
    return {
        h: ssh(h, "systemctl show -p MainPID --value vllm.service").stdout.strip()
        for h in INFERENCE
    }


def test_restarts_only_after_a_config_change_one_host_at_a_time(converged):
    before = _main_pids()
    assert pyinfra().changed() == []
    assert _main_pids() == before, "a converged run restarted an engine"

    changed = pyinfra("--data", "kvceph_lmcache_blocking_timeout_secs=101")
    assert changed.rc == 0, changed.output[-4000:]
    after = _main_pids()
    assert all(after[h] != before[h] for h in INFERENCE), (before, after)
    windows = sorted(_restart_window(h) for h in INFERENCE)
    for (_, started), (next_stopped, _) in zip(windows, windows[1:], strict=False):
        assert next_stopped > started, f"two engines were down at once: {windows}"

    back = pyinfra()  # back to the committed settings: restarts again, then converged
    assert back.rc == 0
    assert pyinfra().changed() == []


def test_cache_survives_restart_and_crosses_nodes(converged):
    s3 = s3_client()
    before = {o["Key"] for o in s3.list_objects_v2(Bucket="lmcache").get("Contents", [])}
    prompt = long_prompt(2048)  # 8 full chunks of 256 tokens
    completion(HOSTS["gpu1"], prompt)
    after = {o["Key"] for o in s3.list_objects_v2(Bucket="lmcache").get("Contents", [])}
    new = after - before
    assert len(new) == 8 * 2, sorted(new)  # TP=2: one object per worker and chunk
    # In the group's namespace folder, LMCache keys name the `vllm serve` argument: the staged
    # directory (mirror source)
    assert all(k.startswith(GPU_KEY_PREFIX) for k in new), sorted(new)

    ssh("gpu1", "systemctl restart vllm.service")
    wait_health(HOSTS["gpu1"])
    hits = external_hits(HOSTS["gpu1"])
    completion(HOSTS["gpu1"], prompt)
    assert external_hits(HOSTS["gpu1"]) - hits >= 2047  # all but the last token

    hits = external_hits(HOSTS["gpu2"])
    completion(HOSTS["gpu2"], prompt)
    assert external_hits(HOSTS["gpu2"]) - hits >= 2047
