"""deploys/cluster/zones.py: the zone kvceph's RGW serves, read from recorded radosgw-admin
answers."""

from __future__ import annotations

import copy
import json
from pathlib import Path

from deploys.cluster import zones
from deploys.facts.rgw import RgwZoneLayout

TENTACLE = Path(__file__).resolve().parents[1] / "fixtures" / "ceph-tentacle-20.2.4"
ZONEGROUP = json.loads((TENTACLE / "zonegroup_default.json").read_text())
ZONE = json.loads((TENTACLE / "zone_default.json").read_text())
POOLS = ["default.rgw.buckets.data", "default.rgw.buckets.index"]


def test_the_default_zone_as_recorded():
    found = zones.layout(ZONEGROUP, ZONE)
    assert found == {**zones.FRESH, "master_zone": "default"}
    assert zones.refusal("rgw.standard", found, POOLS) is None


def test_the_fact_reads_both_answers_and_a_failure():
    fact = RgwZoneLayout()
    out = [json.dumps(ZONEGROUP), "---", json.dumps(ZONE)]
    assert fact.process(out)["data_pool"] == "default.rgw.buckets.data"
    assert "failed (2)" in fact.process(["kvceph-zone-failed=2"])["error"]
    command = fact.command(realm="tenant", zone="tenant-a").get_raw_value()
    assert "zonegroup get --rgw-realm=tenant &&" in command
    assert "zone get --rgw-realm=tenant --rgw-zone=tenant-a" in command


def test_a_second_zone_is_refused_in_one_line():
    two = copy.deepcopy(ZONEGROUP)
    second = {**two["zones"][0], "id": "b", "name": "backup"}
    two["zones"].append(second)
    line = zones.refusal("rgw.standard", zones.layout(two, ZONE), POOLS)
    assert line.startswith("RGW zone of rgw.standard: zonegroup default has 2 zones")
    assert "(backup, default; master default): multi-site" in line
    assert "\n" not in line and "fix: give kvceph's RGW a zonegroup of its own" in line


def test_pools_come_from_the_zone_not_a_literal_default():
    zone = json.loads(json.dumps(ZONE).replace("default.rgw.buckets", "tenant-a.rgw.buckets"))
    found = zones.layout(ZONEGROUP, zone)
    line = zones.refusal("rgw.tenant", found, POOLS)
    assert "zone default keeps buckets in tenant-a.rgw.buckets.data (data)" in line
    assert "fix: name tenant-a.rgw.buckets.data, tenant-a.rgw.buckets.index" in line
    names = ["tenant-a.rgw.buckets.data", "tenant-a.rgw.buckets.index"]
    assert zones.refusal("rgw.tenant", found, names) is None
    assert zones.refusal("rgw.tenant", found, []) is None  # no pools to pre-create


def test_zone_of_a_spec():
    spec = {"spec": {"rgw_realm": "r", "rgw_zone": "z", "rgw_frontend_port": 80}}
    assert zones.zone_of(spec) == {"realm": "r", "zone": "z"}
    assert zones.zone_of(None) == {}


def test_a_recorded_realm_with_two_zones_is_refused():
    # 20.2.4: realm kvtest, zonegroup kvtestzg, zones kvtest-a (master) and kvtest-b.
    two = json.loads((TENTACLE / "zonegroup_two_zones.json").read_text())
    line = zones.refusal("rgw.standard", zones.layout(two, ZONE), POOLS)
    assert "zonegroup kvtestzg has 2 zones (kvtest-a, kvtest-b; master kvtest-a)" in line


def test_the_zone_answer_is_filtered_on_the_host():
    command = RgwZoneLayout().command().get_raw_value()
    assert "system_key" in ZONE  # the recorded answer carries the multi-site secret's slot
    assert "radosgw-admin zone get | python3 -c" in command and "placement_pools" in command
