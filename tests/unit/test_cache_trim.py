"""deploys/cluster/cache_trim.py: each cache group's share, the trim timer's units, days to full."""

from __future__ import annotations

import importlib.util
import shlex

from deploys import paths
from deploys.cluster import bucket_policy, cache_trim

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


def test_each_group_gets_an_equal_share():
    assert cache_trim.share(4 * GIB, 2) == 2 * GIB
    # The lab's quota (test_18_capacity.py) is about 1 MiB: its shares must not round to 0.
    assert cache_trim.share(1153433, 2) == 576716
    assert cache_trim.share(GIB, 0) == GIB


def test_the_unit_trims_every_group_on_its_own_prefix_and_user():
    text = cache_trim.service_text("lmcache", USERS, 4 * GIB, "kvceph-s3-admin")
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
    assert gpu[gpu.index("--sync-uid") + 1] == "kvceph-s3-admin"
    # The order of the groups does not change the text (converged plans stay empty).
    assert cache_trim.service_text("lmcache", USERS[::-1], 4 * GIB, "kvceph-s3-admin") == text
    assert "OnUnitInactiveSec=5min" in cache_trim.timer_text()


def test_the_unit_escapes_systemd_specifiers():
    odd = (bucket_policy.GroupUser("x", "u", "a%b@1@"),)
    assert "a%%b@1@" in cache_trim.service_text("b", odd, GIB, "o")


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


# --- status.py's group rows, their metrics and the alerts on them -------------------------------

TRIM = {
    "kv/Qwen_Qwen3-32B@2@1@": {"used": GIB, "share": 2 * GIB, "rate": GIB / 86400,
                               "deleted": 3, "time": 1796000000.0, "left": GIB},
    "Qwen_Qwen3-32B@1@": {"used": GIB, "share": 2 * GIB, "rate": None, "deleted": 0,
                          "time": 1796000000.0, "left": GIB},
}  # fmt: skip


def test_status_shows_each_groups_share_fill_rate_and_days_to_full():
    import json

    from deploys.facts.capacity import CacheTrimState
    from deploys.status import document, output

    assert CacheTrimState().process([]) == {} and CacheTrimState().process(["x"]) == {}
    assert CacheTrimState().process([json.dumps(TRIM)]) == TRIM
    rows = document.trim_rows(TRIM)
    assert [r["prefix"] for r in rows] == ["Qwen_Qwen3-32B@1@", "kv/Qwen_Qwen3-32B@2@1@"]
    assert rows[1]["days_to_full"] == 1.0 and rows[1]["share_used"] == 0.5
    lines = output.group_lines(rows)
    assert "fill rate unmeasured (one trim so far)" in lines[0]
    assert "full in 1.0 d without the trim; last trim deleted 3 objects" in lines[1]
    assert lines[1].startswith("  group kv/Qwen_Qwen3-32B@2@1@: 1.0 GiB of its 2.0 GiB share (50%)")


def test_group_metrics_and_alerts_fire_before_full(tmp_path):
    import shutil
    import subprocess

    import pytest
    import yaml

    from deploys.monitoring import rules, status_metrics
    from deploys.status import document

    doc = {"time": "2026-12-07T10:00:00+00:00",
           "cluster": {"bucket": "lmcache", "groups": document.trim_rows(TRIM)}}  # fmt: skip
    text = status_metrics.exposition(doc)
    gpu = 'bucket="lmcache",prefix="kv/Qwen_Qwen3-32B@2@1@"'
    assert f"{status_metrics.GROUP_USED}{{{gpu}}} {float(GIB)!r}" in text
    assert f"{status_metrics.GROUP_SHARE}{{{gpu}}} {float(2 * GIB)!r}" in text
    assert f'{status_metrics.GROUP_RATE}{{bucket="lmcache",prefix="Qwen' not in text  # no rate
    if not shutil.which("promtool"):
        pytest.skip("promtool missing: make deps")
    labels = {"bucket": "lmcache", "prefix": "p@1@"}
    series = ",".join(f'{k}="{v}"' for k, v in sorted(labels.items()))
    group = rules.cache_alerts()
    by_name = {r["alert"]: r for r in group["rules"]}

    def expected(alert):
        rule = by_name[alert]
        notes = {
            k: v.replace("{{ $labels.prefix }}", "p@1@") for k, v in rule["annotations"].items()
        }
        return [{"exp_labels": {**labels, **rule["labels"]}, "exp_annotations": notes}]

    tests = [
        {
            "interval": "1m",
            "input_series": [
                {"series": f"{status_metrics.GROUP_USED}{{{series}}}", "values": "80 90 96 96"},
                {"series": f"{status_metrics.GROUP_SHARE}{{{series}}}", "values": "100x3"},
            ],
            "alert_rule_test": [
                {"eval_time": "1m", "alertname": "KvcephCacheGroupNearlyFull", "exp_alerts": []},
                {"eval_time": "2m", "alertname": "KvcephCacheGroupNearlyFull",
                 "exp_alerts": expected("KvcephCacheGroupNearlyFull")},
            ],
        },
        {
            "interval": "5m",
            "input_series": [{"series": f"{status_metrics.TRIM_AT}{{{series}}}", "values": "0x10"}],
            "alert_rule_test": [
                {"eval_time": "25m", "alertname": "KvcephCacheTrimStale", "exp_alerts": []},
                {"eval_time": "35m", "alertname": "KvcephCacheTrimStale",
                 "exp_alerts": expected("KvcephCacheTrimStale")},
            ],
        },
    ]  # fmt: skip
    assert sorted(by_name) == ["KvcephCacheGroupNearlyFull", "KvcephCacheTrimStale"]
    (tmp_path / "alerts.yml").write_text(yaml.safe_dump({"groups": [group]}))
    (tmp_path / "test.yml").write_text(
        yaml.safe_dump({"rule_files": ["alerts.yml"], "evaluation_interval": "1m", "tests": tests})
    )
    proc = subprocess.run(["promtool", "test", "rules", "test.yml"], cwd=tmp_path,
                          capture_output=True, text=True, timeout=120)  # fmt: skip
    assert proc.returncode == 0, proc.stdout + proc.stderr
