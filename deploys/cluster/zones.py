"""The RGW zone kvceph's RGW serves: where its buckets live, and whether it is multi-site.

Pure. A bucket's objects go to the pools of its zone's placement target, named after the zone
(``<zone>.rgw.buckets.data``), so kvceph's PG counts only matter if ``kvceph_ceph_pools`` names
those pools: a mismatch stops the run in one line naming both.

A zonegroup with more than one zone is refused, not handled. kvceph writes its user with
``radosgw-admin metadata put``, which on a secondary zone skips the master-zone guard and is
overwritten by metadata sync (engines then get 403), and a bucket in such a zonegroup
replicates every KV object to every zone. Handling it needs the user written through the
master zone's endpoint and a bucket sync policy that the zonegroup's own policy must allow:
neither is something kvceph can verify on the lab, and a throwaway cache gains nothing from
the other zones. The fix is a zonegroup of one zone for kvceph's RGW.
"""

from __future__ import annotations

from typing import Any

DEFAULT_PLACEMENT = "default-placement"
# Where RGW puts buckets on a cluster that has no zone yet (no .rgw.root pool): the zone and
# zonegroup it creates at first start, "default".
FRESH = {
    "zonegroup": "default",
    "zones": ["default"],
    "zone": "default",
    "data_pool": "default.rgw.buckets.data",
    "index_pool": "default.rgw.buckets.index",
}
SPEC_KEYS = (("realm", "rgw_realm"), ("zonegroup", "rgw_zonegroup"), ("zone", "rgw_zone"))


def zone_of(spec: dict | None) -> dict[str, str]:
    """The realm/zonegroup/zone an RGW service spec names (``rgw_realm`` ...); {} = defaults."""
    inner = (spec or {}).get("spec") or {}
    return {key: inner[name] for key, name in SPEC_KEYS if inner.get(name)}


def layout(zonegroup: dict[str, Any], zone: dict[str, Any]) -> dict[str, Any]:
    """``radosgw-admin zonegroup get`` and ``zone get`` (JSON) as the facts kvceph needs."""
    by_id = {z["id"]: z["name"] for z in zonegroup.get("zones", [])}
    placement = zonegroup.get("default_placement") or DEFAULT_PLACEMENT
    pools = {p["key"]: p["val"] for p in zone.get("placement_pools", [])}
    target = pools.get(placement) or next(iter(pools.values()), {})
    classes = target.get("storage_classes") or {}
    return {
        "zonegroup": zonegroup.get("name"),
        "zones": sorted(by_id.values()),
        "master_zone": by_id.get(zonegroup.get("master_zone", "")),
        "zone": zone.get("name"),
        "data_pool": (classes.get("STANDARD") or {}).get("data_pool"),
        "index_pool": target.get("index_pool"),
    }


def refusal(service: str, found: dict[str, Any], pool_names: list[str]) -> str | None:
    """The one line that stops a deploy into a multi-site zonegroup, or into a zone whose
    bucket pools kvceph's pool settings do not name; None when neither."""
    if "error" in found:
        return f"RGW zone of {service}: cannot read it: {found['error']}; fix: check radosgw-admin"
    zones = found["zones"]
    if len(zones) > 1:
        return (
            f"RGW zone of {service}: zonegroup {found['zonegroup']} has {len(zones)} zones "
            f"({', '.join(zones)}; master {found['master_zone']}): multi-site, which kvceph "
            "refuses (its user would be overwritten by metadata sync on a secondary zone, and "
            "the cache bucket would replicate to every zone); nothing was changed; fix: give "
            "kvceph's RGW a zonegroup of its own with one zone (rgw_realm/rgw_zonegroup/"
            "rgw_zone in its spec)"
        )
    wanted = [found["data_pool"], found["index_pool"]]
    missing = [p for p in wanted if p and p not in pool_names]
    if pool_names and missing:
        return (
            f"RGW zone of {service}: zone {found['zone']} keeps buckets in "
            f"{found['data_pool']} (data) and {found['index_pool']} (index), but "
            f"kvceph_ceph_pools names {', '.join(pool_names)}; nothing was changed; fix: name "
            f"{', '.join(missing)} in kvceph_ceph_pools"
        )
    return None
