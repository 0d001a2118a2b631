"""Ceph pools stage: opt-ins, the min_size warning, the pure pool and PG-budget planners."""

from __future__ import annotations

import pytest
from pyinfra_testing.util import get_command_string

from deploys import settings
from deploys.ceph_cli import ceph
from deploys.operations.ceph import Refused, plan_pg_budget, plan_pool
from deploys.stages import ceph_pools


def me(**data):
    return settings.load({"kvceph_s3_endpoint_ip": "10.0.0.5", **data}, "ceph1", ["ceph_admin"])


def test_ceph_command_is_bounded_and_quoted():
    cmd = get_command_string(ceph("osd", "pool", "ls", connect_timeout=3, command_timeout=20))
    assert cmd == "timeout 20 ceph --connect-timeout 3 osd pool ls -f json"
    cmd = get_command_string(ceph("osd", "pool", "create", "a;rm -rf /", 8, json=False))
    assert cmd == "timeout 60 ceph --connect-timeout 10 osd pool create 'a;rm -rf /' 8"


def test_min_size_one_warning_names_the_pools_once():
    warning = ceph_pools.min_size_one_warning(me())
    assert "default.rgw.buckets.data have min_size 1" in warning and "\n" not in warning
    assert ceph_pools.min_size_one_warning(me(kvceph_ceph_warn_min_size_one=False)) is None


def _pool(**kw):
    base = {
        "type": "replicated",
        "size": 2,
        "min_size": 1,
        "pg_num": 64,
        "pg_num_target": 64,
        "autoscale_mode": "off",
        "applications": ["rgw"],
    }
    return {**base, **kw}


def test_refusals_are_collected_into_one_line():
    with pytest.raises(Refused) as exc:
        plan_pool(_pool(size=3, pg_num_target=32), "p", 64, size=2, application="rgw")
    message = str(exc.value)
    assert "\n" not in message
    assert "size 3 -> 2 moves data" in message and "pg_num 32 -> 64 splits" in message


def test_warn_mode_is_managed_like_off():
    steps, _ = plan_pool(
        _pool(autoscale_mode="warn", pg_num_target=32), "p", 64, allow_data_movement=True
    )
    assert steps == [["osd", "pool", "set", "p", "pg_num", 64]]


def test_budget_counts_default_size_for_new_pools():
    pools = {"a": _pool(pg_num_target=8, size=1)}
    line = plan_pg_budget(pools, [{"name": "b", "pg_num": 8, "size": None}], 100, 1, 3)
    assert line == "PG budget: 32 of 300 PG replicas (mon_max_pg_per_osd 100 x 3 OSDs)"
    with pytest.raises(Refused, match="b 64 PGs x size 3 would bring the cluster to 200"):
        plan_pg_budget(pools, [{"name": "b", "pg_num": 64, "size": None}], 10, 1, 3)


def test_budget_uses_real_osd_count_above_three():
    assert "x 12 OSDs" in plan_pg_budget({}, [{"name": "b", "pg_num": 8, "size": 3}], 250, 12, 3)
