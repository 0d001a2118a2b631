"""A bounded cache (issue 36, docs/capacity.md): the engines' user creates no bucket; a small
quota filled by cold requests: the engines keep answering, the bucket stops growing, status.py
says "quota full"; then one trim (issue 52) frees the oldest and the next prefix is stored."""

from __future__ import annotations

import json
import time

from conftest import HOSTS, pyinfra, restore_needed, s3_client, ssh
from lab_client import completion, long_prompt

from deploys.cluster import cache_trim
from deploys.cluster.capacity import size

# The lab engine's objects on gpu1: 256 tokens x 64 bytes (TP 2, group_data/lab.py) per worker.
CHUNK = 256 * 64
# One cold 2048-word prompt: 8 chunks on each of gpu1's two workers.
PER_PROMPT = 16 * CHUNK


def bucket() -> tuple[int, int]:
    """(objects, bytes) of the lab's bucket, listed with the lab's key."""
    objects, size, token = 0, 0, None
    client = s3_client()
    while True:
        page = client.list_objects_v2(
            Bucket="lmcache", **({"ContinuationToken": token} if token else {})
        )  # noqa: E501
        objects += page.get("KeyCount", 0)
        size += sum(o["Size"] for o in page.get("Contents", []))
        if not page.get("IsTruncated"):
            return objects, size
        token = page["NextContinuationToken"]


def cold_requests(n: int) -> None:
    for _ in range(n):
        assert completion(HOSTS["gpu1"], long_prompt())["choices"], "an engine stopped answering"
    time.sleep(3)  # LMCache's stores finish after the answer


def fill(limit: int) -> tuple[int, int]:
    """Cold requests until two in a row store nothing: the bucket then. Which gateway a worker's
    PUTs reach is haproxy's choice, and a store may land after the sleep on a loaded machine, so
    a fixed number of prompts leaves one gateway's view short of full now and then (CI,
    2026-12-07: 8 objects, one worker's half prompt, stored by the two requests after it)."""
    last, still = bucket(), 0
    for _ in range(limit):
        cold_requests(1)
        now = bucket()
        still = still + 1 if now[0] == last[0] else 0
        if still == 2:
            return now
        last = now
    raise AssertionError(f"the bucket still grew after {limit} more cold requests: no quota")


# The engines' users create no bucket: tests/integration/test_20_privilege.py.


def test_a_full_quota_keeps_engines_serving_and_status_says_so(converged, request, lab, tmp_path):
    objects, used = bucket()
    # room for two and a half cold prompts, and at least the 1 MiB kvceph takes (a smaller
    # quota holds nothing: refused); a run on a fresh bucket starts below it
    quota = max(used + 2 * PER_PROMPT + PER_PROMPT // 2, (1 << 20) + PER_PROMPT // 2)
    # each gateway admits up to the quota (below): enough prompts to fill both views
    prompts = max(8, 2 * (quota - used) // PER_PROMPT + 3)
    gib = quota / 1024**3
    run = pyinfra("--limit", "ceph1", "--data", f"kvceph_s3_quota_max_size_gb={gib!r}")
    try:
        assert run.rc == 0, run.output[-4000:]
        assert f"S3 quota {size(int(gib * 1024**3))} (kvceph_s3_quota_max_size_gb)" in run.output
        assert "full in" in run.output or "never full" in run.output
        # The trim timer runs once below, by hand: until then the bucket must stay full.
        ssh("ceph1", f"timeout 60 systemctl stop {cache_trim.UNIT}.timer")
        # RGW checks a quota on each gateway's cached bucket stats (plus its own writes since;
        # rgw_bucket_quota_ttl 600 s): each of the lab's two gateways admits up to the quota
        # before its view is full, so the bucket holds at most twice it; `prompts` offer more.
        cold_requests(prompts)  # fills it: every request still answers
        full_objects, full_bytes = fill(prompts)  # and stops storing
        gateways = 2
        assert objects < full_objects, (objects, full_objects)
        assert full_bytes <= gateways * quota + gateways * CHUNK, (full_bytes, quota)
        path = tmp_path / "status.json"
        st = pyinfra("--data", f"kvceph_status_json={path}", deploy="status.py", json_out=False)
        assert st.rc == 0, st.output[-4000:]
        cluster = json.loads(path.read_text())["cluster"]
        assert cluster["quota_full"] and cluster["quota_source"] == "user quota", cluster
        assert "quota full" in st.output
        # Issue 52: one trim deletes each group's oldest objects past 90 % of its share (both
        # groups' shares add up to the quota, so one is past it); the next new prefix is stored.
        trimmed = ssh("ceph1", f"timeout 300 systemctl start {cache_trim.UNIT}.service && "
                      f"cat {cache_trim.STATE_PATH}", timeout=320).stdout  # fmt: skip
        state = json.loads(trimmed)
        assert sum(g["deleted"] for g in state.values()) > 0, state
        left = bucket()[0]
        assert left < full_objects, (left, full_objects)
        cold_requests(1)
        assert bucket()[0] > left, "a full cache stored no new prefix after the trim"
    finally:
        if restore_needed(request, lab):
            assert pyinfra("--limit", "ceph1").rc == 0
