"""Ceph pools stage: opt-ins, the min_size warning, the pure pool and PG-budget planners."""

from __future__ import annotations

import json

import pytest
from fake_deploy import _commands
from fake_deploy import run as _run
from pyinfra_testing.util import get_command_string

from deploys import settings
from deploys.cluster import ownership
from deploys.cluster.ceph_cli import ceph
from deploys.operations.ceph import Refused, WantedPool, plan_pg_budget, plan_pool
from deploys.stages import ceph_pools


def me(**data):
    return settings.load({"kvceph_s3_endpoint_ip": "10.0.0.5", **data}, "ceph1", ["ceph_admin"])


def test_ceph_command_is_bounded_and_quoted():
    cmd = get_command_string(ceph("osd", "pool", "ls", connect_timeout=3, command_timeout=20))
    assert cmd == "timeout -k 5 20 ceph --connect-timeout 3 osd pool ls -f json"
    cmd = get_command_string(ceph("osd", "pool", "create", "a;rm -rf /", 8, json=False))
    assert cmd == "timeout -k 5 60 ceph --connect-timeout 10 osd pool create 'a;rm -rf /' 8"


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
        plan_pool(_pool(size=3, pg_num_target=32), WantedPool("p", 64, size=2, application="rgw"))
    message = str(exc.value)
    assert "\n" not in message
    assert "size 3 -> 2 moves data" in message and "pg_num 32 -> 64 splits" in message


def test_warn_mode_is_managed_like_off():
    steps, _ = plan_pool(
        _pool(autoscale_mode="warn", pg_num_target=32),
        WantedPool("p", 64, allow_data_movement=True),
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


# --- mons down: one line within the connect timeout (the @fake deploy) ----------------------

MON_TIMEOUT = "[errno 110] RADOS timed out (error connecting to the cluster)"


def test_ceph_reachable_reads_health_and_failures():
    from deploys.facts.ceph import CephReachable

    fact = CephReachable()
    cmd = str(fact.command(connect_timeout=5, command_timeout=60))
    assert cmd == (
        "timeout -k 5 60 ceph --connect-timeout 5 health 2>&1 || echo kvceph-ceph-failed=$?"
    )
    assert fact.process(["HEALTH_WARN 1 pool(s) have no replicas configured"])["reachable"]
    monclient = "2026-11-30T01:00:00.000+0000 7f monclient(hunting): authenticate timed out after 5"
    assert fact.process([monclient, MON_TIMEOUT, "kvceph-ceph-failed=1"]) == {
        "reachable": False,
        "rc": 1,
        "error": MON_TIMEOUT,
    }
    assert fact.process(["kvceph-ceph-failed=124"]) == {
        "reachable": False,
        "rc": 124,
        "error": "no answer, killed by timeout (exit 124)",
    }


def test_ceph_unreachable_message_is_one_line():
    from deploys.stages.ceph_pools import unreachable_message

    probe = {"reachable": False, "rc": 1, "error": MON_TIMEOUT}
    assert unreachable_message("ceph1", 5, probe) == (
        "Ceph pools: the cluster is unreachable from ceph1 within 5s (ceph --connect-timeout): "
        f"{MON_TIMEOUT}; fix: check the mons"
    )
    assert unreachable_message("ceph1", 5, {"reachable": True}) is None


@pytest.mark.parametrize("flags", [("--dry",), ("-y",)])
def test_mon_down_stops_with_one_line_before_anything(flags):
    rc, out = _run("tests/inventories/fake_mon_down.py", *flags, "-vvv", "--debug")
    assert rc != 0
    assert "Traceback" not in out and "continue?" not in out
    line = (
        "Ceph pools: the cluster is unreachable from @fake/ceph1 within 5s "
        f"(ceph --connect-timeout): {MON_TIMEOUT}; fix: check the mons"
    )
    errors = [x for x in out.splitlines() if x.startswith("--> ") and "error" in x]
    assert len(errors) == 1 and errors[0].endswith(line), errors
    # One call to the cluster (preflight's prerequisites read it, the stage reuses it).
    ceph_commands = [c for h, c in _commands(out) if h == "@fake/ceph1" and "ceph --conn" in c]
    assert len(ceph_commands) == 1 and " health " in ceph_commands[0]
    assert "Starting operation" not in out


# --- the pool's marker: a record, like every other marker (issue 52 item 7) ------------------

FSID = "5b3c0f6e-8d2a-4e51-9f7c-1d2e3f4a5b6c"
NOW = "2026-12-07T20:00:00Z"


def _marker(steps) -> dict:
    """The record a plan's marker step writes."""
    (last,) = [s for s in steps if s[:2] == ["config-key", "set"]]
    assert last[2] == "kvceph/owned/pool/p"
    return json.loads(last[3])


def test_a_created_pool_is_marked_with_a_record_of_the_cluster_and_the_pool_asked_for():
    steps, _ = plan_pool(None, WantedPool("p", 8, application="rgw"), fsid=FSID, now=NOW)
    record = _marker(steps)
    assert record == {
        "state": "created",
        "fsid": FSID,
        "digest": ownership.digest({"pool": "p", "type": "replicated", "application": "rgw"}),
        "time": NOW,
    }
    assert ownership.parse(steps[-1][3]) == ownership.Marker("created", FSID, record["digest"], NOW)


def test_an_adopted_pool_is_marked_adopted_with_a_record():
    steps, _ = plan_pool(
        _pool(min_size=2), WantedPool("p", 64, min_size=1), owner=None, adopt=True, fsid=FSID
    )
    assert steps[0] == ["osd", "pool", "set", "p", "min_size", 1]
    assert _marker(steps)["state"] == "adopted" and _marker(steps)["fsid"] == FSID


def test_without_the_fsid_the_marker_is_the_bare_state_as_before():
    steps, _ = plan_pool(None, WantedPool("p", 8))
    assert steps[-1] == ["config-key", "set", "kvceph/owned/pool/p", "created"]


def test_a_marker_of_another_cluster_takes_nothing_over_and_a_bare_one_still_counts():
    other = ownership.record("created", "another-fsid", "0123456789abcdef", NOW)
    with pytest.raises(Refused) as exc:
        plan_pool(_pool(min_size=2), WantedPool("p", 64, min_size=1), owner=other, fsid=FSID)
    message = str(exc.value)
    assert "was written on cluster another-fsid, this is " + FSID in message
    assert "kvceph_adopt=pool/p" in message and "\n" not in message
    # Its own record, or a bare marker from before issue 52: kvceph's pool, fixed in place.
    for owner in (ownership.record("created", FSID, "0123456789abcdef", NOW), "created"):
        steps, _ = plan_pool(_pool(min_size=2), WantedPool("p", 64, min_size=1), owner, fsid=FSID)
        assert steps == [["osd", "pool", "set", "p", "min_size", 1]]
