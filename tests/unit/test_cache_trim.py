"""deploys/cache_trim.py: each cache group's share, the trim timer's units, days to full."""

from __future__ import annotations

import importlib.util
import shlex

from deploys import bucket_policy, cache_trim, paths

GIB = 2**30
USERS = (
    bucket_policy.GroupUser("gpu", "lmcache-gpu", "kv/Qwen_Qwen3-32B@2@1@"),
    bucket_policy.GroupUser("gaudi", "lmcache-gaudi", "Qwen_Qwen3-32B@1@"),
)


def _s3admin():
    spec = importlib.util.spec_from_file_location("s3admin", paths.ADMIN_SOURCE)
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


def test_each_group_gets_an_equal_share_in_whole_mib():
    assert cache_trim.share(4 * GIB, 2) == 2 * GIB
    assert cache_trim.share(10 * 2**20 + 5, 3) == 3 * 2**20
    assert cache_trim.share(GIB, 0) == GIB


def test_the_unit_trims_every_group_on_its_own_prefix_and_user():
    text = cache_trim.service_text("lmcache", USERS, 4 * GIB)
    starts = [line for line in text.splitlines() if line.startswith("ExecStart=")]
    assert [s.startswith("ExecStart=-") for s in starts] == [True, True]  # one fails alone
    argvs = [shlex.split(s[len("ExecStart=-") :]) for s in starts]
    assert [a[a.index("--owner") + 1] for a in argvs] == ["lmcache-gaudi", "lmcache-gpu"]
    gpu = argvs[1]
    assert gpu[:6] == ["/usr/bin/python3", paths.ADMIN_SCRIPT, "--config", paths.ADMIN_CONFIG,
                       "trim", "lmcache"]  # fmt: skip
    assert gpu[gpu.index("--prefix") + 1] == "kv/Qwen_Qwen3-32B@2@1@"
    assert gpu[gpu.index("--share-bytes") + 1] == str(2 * GIB)
    assert gpu[gpu.index("--state") + 1] == cache_trim.STATE_PATH
    # The order of the groups does not change the text (converged plans stay empty).
    assert cache_trim.service_text("lmcache", USERS[::-1], 4 * GIB) == text
    assert "OnUnitInactiveSec=5min" in cache_trim.timer_text()


def test_the_unit_escapes_systemd_specifiers():
    odd = (bucket_policy.GroupUser("x", "u", "a%b@1@"),)
    assert "a%%b@1@" in cache_trim.service_text("b", odd, GIB)


def test_the_trim_thresholds_are_the_helpers():
    s3admin = _s3admin()
    assert (s3admin.HIGH_WATER, s3admin.LOW_WATER) == (cache_trim.HIGH_WATER, cache_trim.LOW_WATER)


def test_days_to_full_and_the_interval_warning():
    assert cache_trim.days_to_full(GIB, 2 * GIB, None) is None
    assert cache_trim.days_to_full(GIB, 2 * GIB, 0.0) is None
    assert cache_trim.days_to_full(GIB, 2 * GIB, GIB / 86400) == 1.0
    assert cache_trim.days_to_full(3 * GIB, 2 * GIB, 1.0) == 0.0
    # A tenth of a 2 GiB share is ~205 MiB: 1 MiB/s writes 300 MiB in 5 min.
    assert cache_trim.interval_line(2 * GIB, 0.5 * 2**20) is None
    line = cache_trim.interval_line(2 * GIB, 2**20)
    assert line.startswith("kvceph: WARNING: the fleet may write 0.3 GiB in the trim's 5 min")
    assert "kvceph_s3_quota_max_size_gb" in line and "\n" not in line
