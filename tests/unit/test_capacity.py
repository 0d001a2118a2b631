"""The S3 quota's arithmetic: derived from MAX AVAIL, kept once set, refused when missing;
the fleet's worst-case write rate and "full in N days" against the lifecycle."""

import pytest

from deploys import settings as s
from deploys.cluster import capacity
from deploys.settings.reader import SettingsError

GIB = 1024**3
POOL = "default.rgw.buckets.data"
DF = {POOL: {"max_avail": 100 * GIB, "stored": 0}, "_raw_avail": 400 * GIB}
BASE = {"kvceph_s3_endpoint_ip": "10.0.0.5"}


def test_explicit_quota_wins_and_takes_fractions_of_a_gib():
    q = capacity.decide(0.5, False, 0.2, None, POOL, DF)
    assert (q.max_size, q.source) == (GIB // 2, "kvceph_s3_quota_max_size_gb")


def test_derived_quota_is_the_stated_fraction_of_max_avail():
    q = capacity.decide(None, False, 0.2, None, POOL, DF)
    assert q.max_size == 20 * GIB
    assert q.source == f"20% of pool {POOL}'s MAX AVAIL 100.0 GiB (kvceph_s3_quota_fraction)"


def test_a_new_pool_derives_from_raw_space_over_its_size():
    df = {"_raw_avail": 400 * GIB, "_sizes": {POOL: 2}}
    assert capacity.decide(None, False, 0.25, None, POOL, df).max_size == 50 * GIB


def test_a_quota_the_user_has_is_kept_not_re_derived():
    # MAX AVAIL shrinks as the cluster fills: re-deriving would shrink the quota every run.
    current = {"enabled": True, "max_size": 7 * GIB}
    q = capacity.decide(None, False, 0.2, current, POOL, DF)
    assert (q.max_size, q.set_now) == (7 * GIB, False) and q.source.startswith("kept")


def test_unbounded_only_when_said_and_no_quota_is_one_line():
    assert capacity.decide(None, True, 0.2, None, POOL, None).max_size is None
    with pytest.raises(ValueError) as err:
        capacity.decide(None, False, 0.2, None, POOL, None)
    assert "\n" not in str(err.value) and "kvceph_s3_quota_unbounded = True" in str(err.value)


def test_the_two_quota_keys_together_are_refused():
    with pytest.raises(SettingsError, match="kvceph_s3_quota_unbounded.*keep one"):
        s.load({**BASE, "kvceph_s3_quota_unbounded": True, "kvceph_s3_quota_max_size_gb": 4},
               "ceph1", ("ceph_admin",))  # fmt: skip
    with pytest.raises(SettingsError, match="size in GiB > 0"):
        s.load({**BASE, "kvceph_s3_quota_max_size_gb": 0}, "ceph1", ("ceph_admin",))


def test_one_busy_h200_fills_90_tb_a_day():
    # Issue 36's figures: Qwen3-32B bf16, 256 KiB/token, ~4,000 new tokens/s.
    rate = capacity.write_rate([(4000, 256 * 1024)])
    assert rate == pytest.approx(1.05e9, rel=0.01)
    assert rate * capacity.DAY_S == pytest.approx(90e12, rel=0.05)
    # A 100 TiB quota: full in about 1.2 days, long before a 7-day lifecycle frees anything.
    assert capacity.days_to_full(100 * 1024**4, rate, 7) == pytest.approx(1.21, abs=0.01)


def test_the_lifecycle_can_keep_the_cache_below_its_quota():
    assert capacity.days_to_full(10 * GIB, 1000.0, 7) is None  # 7 days = 0.56 GiB
    assert capacity.days_to_full(GIB, 0.0, 7) is None


def test_plan_line_says_full_in_n_days_with_the_raw_figure():
    q = capacity.Quota(100 * 1024**4, "kvceph_s3_quota_max_size_gb")
    line = capacity.plan_line(q, 4000 * 256 * 1024, 1, 2, 7)
    assert line.startswith("kvceph: S3 quota 100.0 TiB (kvceph_s3_quota_max_size_gb); 1 engine(s)")
    assert "1000.0 MiB/s" in line and "raw at size 2" in line and "full in 1.2 days" in line
    never = capacity.plan_line(capacity.Quota(10 * GIB, "x"), 1000.0, 1, 1, 7)
    assert "never full" in never


def test_fleet_rate_counts_every_engine_at_its_prefill_rate():
    # 32 GiB: above the two engines' 2 x 2 x 6.25 GiB DRAM buffers (a smaller quota is refused)
    ceph1 = s.load({**BASE, "kvceph_s3_quota_max_size_gb": 32}, "ceph1", ("ceph_admin",))
    gpu = s.load({**BASE, "kvceph_prefill_tokens_per_s": 4000}, "gpu1", ("gpu",))
    rate, engines = capacity.fleet([ceph1, gpu, gpu])
    per_token = gpu.lmcache.kv_bytes_per_token * gpu.engine.tensor_parallel_size
    assert engines == 2 and rate == pytest.approx(2 * 4000 * per_token)
    assert per_token == 256 * 1024  # Qwen3-32B, bf16 KV
    quota, line = capacity.plan(ceph1, [ceph1, gpu, gpu], None, None)
    assert quota.max_size == 32 * GIB and "2 engine(s)" in line and "full in 1 min" in line
    assert capacity.duration(2.5) == "2.5 days" and capacity.duration(0.125) == "3.0 hours"


def test_quota_full_means_the_next_chunk_does_not_fit():
    chunk = 32 * 1024
    assert capacity.is_full(GIB - chunk, (GIB - chunk) // chunk, GIB)
    assert not capacity.is_full(GIB // 2, GIB // 2 // chunk, GIB)
    assert capacity.is_full(GIB + chunk, GIB // chunk + 1, GIB)  # two gateways overshoot
    assert not capacity.is_full(0, 0, GIB)


def test_recorded_pacific_df_derives_a_quota():
    import json
    from pathlib import Path

    from deploys.facts.capacity import CephDf

    fixture = Path(__file__).parents[1] / "facts/capacity.CephDf/pacific_lab.json"
    df = CephDf().process(json.loads(fixture.read_text())["output"])
    q = capacity.decide(None, False, 0.2, None, POOL, df)
    assert q.max_size == 8160171520 * 2 // 10 // 2**20 * 2**20  # 1.5 GiB of the lab's 7.6
    assert "MAX AVAIL 7.6 GiB" in q.source
