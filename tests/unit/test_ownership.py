"""deploys/cluster/ownership.py: kvceph changes only what it created, or what the operator handed
over."""

from __future__ import annotations

import json
from pathlib import Path

from deploys import specs
from deploys.cluster import ownership
from deploys.settings.ceph import RgwSettings

SECTION = "client.rgw.standard"
MARK = ownership.marker_key("config", f"{SECTION}/rgw_dns_name")


def entry(section: str, value: str, mask: str = "") -> dict:
    return {"section": section, "mask": mask, "name": "rgw_dns_name", "value": value}


def plan(dump, markers=None, adopt=()):
    return ownership.plan_option(SECTION, "rgw_dns_name", "s3.kvlab", dump, markers or {}, adopt)


def test_sections_above_are_the_dotted_prefixes():
    assert ownership.sections_above("client.rgw.standard") == ["global", "client", "client.rgw"]


def test_unset_is_set_and_a_wider_value_is_reported_not_touched():
    p = plan([entry("client.rgw", "s3.other.example"), entry("global", "x.example")])
    assert p.set and p.refusal is None
    assert len(p.notes) == 2 and all("left alone" in n for n in p.notes)


def test_kvceph_value_is_replaced_someone_elses_is_refused():
    assert plan([entry(SECTION, "s3.old")], {MARK: "s3.old"}).set
    refused = plan([entry(SECTION, "s3.tenant.example")])
    assert not refused.set
    assert refused.refusal == (
        "client.rgw.standard/rgw_dns_name = 's3.tenant.example' was set outside kvceph, "
        "kvceph wants 's3.kvlab'"
    )
    changed = plan([entry(SECTION, "s3.hand.example")], {MARK: "s3.old"})
    assert "changed since kvceph set 's3.old'" in changed.refusal


def test_adopt_names_the_option():
    assert plan([entry(SECTION, "s3.tenant.example")], adopt=(f"{SECTION}/rgw_dns_name",)).set
    assert plan([entry(SECTION, "s3.tenant.example")], adopt=("rgw.standard",)).refusal


def test_already_wanted_is_left_as_is():
    p = plan([entry(SECTION, "s3.kvlab")])
    assert not p.set and p.refusal is None


def test_a_narrower_section_overriding_kvceph_is_refused():
    p = plan([entry("client.rgw.standard.ceph1.abcdef", "x.example")])
    assert "client.rgw.standard.ceph1.abcdef rgw_dns_name overrides" in p.refusal
    masked = plan([entry(SECTION, "x.example", mask="host:ceph1")])
    assert "client.rgw.standard/host:ceph1" in masked.refusal


RGW = RgwSettings(
    managed_by="cephadm",
    service_id="standard",
    count_per_host=2,
    label="rgw",
    networks=("10.67.67.0/24",),
    frontend_port=8080,
    concentrator=None,
    concentrator_port=80,
    ingress_virtual_ips=(),
    ingress_frontend_port=80,
    dns_name="s3.kvlab",
)
TENANT = {
    "service_type": "rgw",
    "service_id": "standard",
    "service_name": "rgw.standard",
    "placement": {"hosts": ["ceph1", "ceph2"]},
    "spec": {
        "rgw_realm": "tenant",
        "rgw_zone": "tenant-a",
        "ssl": True,
        "rgw_frontend_port": 443,
        "rgw_frontend_ssl_certificate": "PEM",
        "rgw_exit_timeout_secs": 120,
    },
}
SERVICE_MARK = ownership.marker_key("service", "rgw.standard")


def test_new_service_is_created_and_marked():
    p = ownership.plan_service(specs.rgw_spec(RGW), None, {})
    assert p.spec == specs.rgw_spec(RGW) and p.marker == ownership.CREATED


def test_kvcephs_own_service_gets_kvcephs_spec():
    p = ownership.plan_service(specs.rgw_spec(RGW), TENANT, {SERVICE_MARK: "created"})
    assert p.spec == specs.rgw_spec(RGW) and p.marker is None and not p.merged


def test_someone_elses_service_is_refused_naming_what_makes_it_theirs():
    p = ownership.plan_service(specs.rgw_spec(RGW), TENANT, {})
    assert p.spec is None
    assert p.refusal == (
        "service rgw.standard exists and kvceph did not create it (rgw_realm tenant; "
        "rgw_zone tenant-a; SSL; placement hosts ['ceph1', 'ceph2'])"
    )


def test_adopted_service_is_merged_keeping_zone_tls_and_placement():
    p = ownership.plan_service(specs.rgw_spec(RGW), TENANT, {}, adopt=("rgw.standard",))
    assert p.merged and p.marker == ownership.ADOPTED
    assert p.spec["placement"] == TENANT["placement"]
    kept = ("rgw_realm", "rgw_zone", "ssl", "rgw_frontend_ssl_certificate", "rgw_exit_timeout_secs")
    assert {k: p.spec["spec"][k] for k in kept} == {k: TENANT["spec"][k] for k in kept}
    assert p.differences == [
        "spec.rgw_frontend_port: 443 -> 8080",
        "networks: None -> ['10.67.67.0/24']",
    ]
    # The next run: marked adopted, merged again, nothing left to change.
    again = ownership.plan_service(specs.rgw_spec(RGW), p.spec, {SERVICE_MARK: "adopted"})
    assert again.merged and again.differences == [] and again.marker is None


def test_refusal_line_names_every_object_and_the_opt_in():
    line = ownership.refusal_line(["a", "b"], ["rgw.tenant", "client.rgw.tenant/rgw_dns_name"])
    assert "a; b; nothing was changed" in line
    assert "--data kvceph_adopt=rgw.tenant,client.rgw.tenant/rgw_dns_name" in line


def test_recorded_config_dump_and_markers_of_a_converged_lab():
    from deploys.facts.ceph import CephConfigDump, CephOwnershipMarkers

    tentacle = Path(__file__).resolve().parents[1] / "fixtures" / "ceph-tentacle-20.2.4"
    dump = CephConfigDump().process((tentacle / "config_dump.json").read_text().splitlines())
    markers = CephOwnershipMarkers().process(
        (tentacle / "config_key_dump.json").read_text().splitlines()
    )
    assert markers[ownership.marker_key("service", "rgw.standard")] == ownership.CREATED
    converged = ownership.plan_option(SECTION, "rgw_dns_name", "s3.kvlab", dump, markers)
    assert not converged.set and converged.refusal is None and converged.notes == []
    by_hand = [
        {**e, "value": "s3.other"} if (e["section"], e["name"]) == (SECTION, "rgw_dns_name") else e
        for e in dump
    ]
    assert "changed since kvceph set 's3.kvlab'" in plan(by_hand, markers).refusal
    # cephadm itself sets rgw_frontends per daemon: a narrower section kvceph never overrides.
    frontends = ownership.plan_option(SECTION, "rgw_frontends", "beast port=1", dump, markers)
    assert "client.rgw.standard.ceph1.dmrmjb, client.rgw.standard.ceph1.mcjqyo" in (
        frontends.refusal
    )
    assert CephOwnershipMarkers().process(["{}"]) == {}


# --- RGW users and buckets (marked in the same store; facts recorded on the labs) --------------

FACTS = Path(__file__).resolve().parents[1] / "facts"


def recorded(fact: str, name: str):
    """A fact as pyinfra processed radosgw-admin's recorded output (tests/facts)."""
    return json.loads((FACTS / fact / f"{name}.json").read_text())["fact"]


def test_a_user_or_bucket_kvceph_creates_is_marked_created_after_it():
    for kind, fact in ((ownership.S3_USER, "rgw.RgwUser"), (ownership.BUCKET, "rgw.RgwBucket")):
        assert recorded(fact, "missing") is None
        p = ownership.plan_object(kind, "lmcache", False, {})
        assert p == ownership.ObjectPlan(ownership.CREATED)
        assert ownership.marker_key(kind, "lmcache") == f"kvceph/owned/{kind}/lmcache"


def test_an_existing_user_or_bucket_without_marker_is_reported_not_changed():
    user = recorded("rgw.RgwUser", "exists_with_quota")  # radosgw-admin user info
    p = ownership.plan_object(ownership.S3_USER, user["user_id"], user is not None, {})
    assert p.marker is None
    assert p.refusal == (
        "S3 tier: RGW user kvceph-it exists and kvceph did not create it (no marker "
        "kvceph/owned/s3-user/kvceph-it); nothing was changed; fix: set kvceph_s3_user to a "
        "name kvceph creates, or hand it over for one run with --data "
        "kvceph_adopt=s3-user/kvceph-it (kvceph then sets its quotas, keys, lifecycle and "
        "policies on it)"
    )
    bucket = recorded("rgw.RgwBucket", "exists")  # radosgw-admin bucket stats
    p = ownership.plan_object(ownership.BUCKET, bucket["bucket"], True, {})
    assert "bucket kvceph-it exists and kvceph did not create it" in p.refusal
    assert "kvceph_s3_bucket" in p.refusal and "kvceph_adopt=bucket/kvceph-it" in p.refusal


def test_a_marked_one_is_kvcephs_and_the_opt_in_adopts_an_unmarked_one():
    markers = {ownership.marker_key(ownership.BUCKET, "kvceph-it"): ownership.CREATED}
    assert ownership.plan_object(ownership.BUCKET, "kvceph-it", True, markers).refusal is None
    assert ownership.plan_object(ownership.BUCKET, "kvceph-it", True, markers).marker is None
    adopted = ownership.plan_object(
        ownership.S3_USER, "kvceph-it", True, {}, ("s3-user/kvceph-it",)
    )
    assert adopted == ownership.ObjectPlan(ownership.ADOPTED)
    again = {ownership.marker_key(ownership.S3_USER, "kvceph-it"): ownership.ADOPTED}
    assert ownership.plan_object(ownership.S3_USER, "kvceph-it", True, again).marker is None
    # the opt-in names the kind: a bucket's handle does not hand over the user of that name
    other = ownership.plan_object(ownership.S3_USER, "kvceph-it", True, {}, ("bucket/kvceph-it",))
    assert other.refusal is not None


# --- what a marker records (issue 52 item 7) ---------------------------------------------------

FSID = "5b6c1c2e-8f0a-11f0-9d3b-525400c0ffee"
BUCKET_MARK = ownership.marker_key(ownership.BUCKET, "lmcache")
MINE = ownership.digest({"bucket": "lmcache", "owner": "kvceph-s3-admin"})


def test_a_record_reads_back_and_a_bare_marker_of_an_older_kvceph_still_reads():
    text = ownership.record("created", FSID, MINE, "2026-12-07T10:00:00Z")
    assert ownership.parse(text) == ownership.Marker("created", FSID, MINE, "2026-12-07T10:00:00Z")
    assert ownership.parse("adopted") == ownership.Marker("adopted")
    # An option's marker holds the value kvceph set: not a record.
    assert ownership.parse("s3.kvlab") is None and ownership.parse(None) is None
    assert ownership.parse('{"state": "mine"}') is None


def test_a_marker_of_another_cluster_or_object_takes_nothing_over_even_when_adopted():
    mine = {BUCKET_MARK: ownership.record("created", FSID, MINE, "2026-12-01T02:00:00Z")}
    ok = ownership.plan_object(ownership.BUCKET, "lmcache", True, mine, (), FSID, MINE)
    assert ok == ownership.ObjectPlan()
    other = ownership.digest({"bucket": "lmcache", "owner": "someone"})
    for fsid, found, why in (
        ("0000-other", MINE, f"was written on cluster {FSID}, this is 0000-other"),
        (FSID, other, f"records digest {MINE} (created 2026-12-01T02:00:00Z), the bucket"),
    ):
        for adopt in ((), ("bucket/lmcache",)):
            p = ownership.plan_object(ownership.BUCKET, "lmcache", True, mine, adopt, fsid, found)
            assert p.marker is None and why in p.refusal
            assert p.refusal.count("\n") == 0 and p.refusal.startswith("S3 tier: bucket lmcache")
            assert f"`ceph config-key rm {BUCKET_MARK}`" in p.refusal
            assert "--data kvceph_adopt=bucket/lmcache" in p.refusal
    # A bare marker (before issue 52) matches anything: it is rewritten as a record.
    bare = ownership.plan_object(
        ownership.BUCKET, "lmcache", True, {BUCKET_MARK: "created"}, (), FSID, other
    )
    assert bare == ownership.ObjectPlan()


def test_a_service_reads_a_record_as_its_state():
    rec = ownership.record("created", FSID, None, "2026-12-01T02:00:00Z")
    spec = specs.rgw_spec(RGW)
    p = ownership.plan_service(spec, spec, {SERVICE_MARK: rec})
    assert p.spec == spec and p.marker is None and not p.merged


class _Host:
    noops: list = []

    @classmethod
    def noop(cls, text):
        cls.noops.append(text)


def _op(monkeypatch, op, markers, **kwargs):
    from deploys.operations import ceph as ceph_ops

    monkeypatch.setattr(ceph_ops, "host", _Host)
    monkeypatch.setattr(ceph_ops.memo, "read", lambda _h, _fact, **_kw: markers)
    _Host.noops = []
    return [str(c) for c in op._inner(**kwargs)]


def test_the_marker_operation_writes_a_record_once_and_rewrites_a_bare_one(monkeypatch):
    from deploys.operations import ceph as ceph_ops

    args = {"kind": "bucket", "object_name": "lmcache", "value": "created"}
    args |= {"fsid": FSID, "spec_digest": MINE}
    fresh = _op(monkeypatch, ceph_ops.ownership_marker, {}, **args)
    assert len(fresh) == 1 and f"config-key set {BUCKET_MARK}" in fresh[0]
    written = json.loads(fresh[0].split(BUCKET_MARK, 1)[1].strip().strip("'"))
    assert written["state"] == "created" and written["fsid"] == FSID
    assert written["digest"] == MINE and written["time"].endswith("Z")
    same = {BUCKET_MARK: ownership.record("created", FSID, MINE, "2026-12-01T02:00:00Z")}
    assert _op(monkeypatch, ceph_ops.ownership_marker, same, **args) == []
    assert _Host.noops == ["bucket lmcache is marked created"]
    # A bare "adopted" stays adopted, now with what it records.
    again = _op(monkeypatch, ceph_ops.ownership_marker, {BUCKET_MARK: "adopted"}, **args)
    assert '"state": "adopted"' in again[0]


def test_the_marker_goes_when_kvceph_retires_the_object(monkeypatch):
    from deploys.operations import ceph as ceph_ops

    args = {"kind": "bucket", "object_name": "lmcache"}
    gone = _op(monkeypatch, ceph_ops.ownership_marker_removed, {BUCKET_MARK: "created"}, **args)
    assert len(gone) == 1 and gone[0].endswith(f"config-key rm {BUCKET_MARK}")
    assert _op(monkeypatch, ceph_ops.ownership_marker_removed, {}, **args) == []
    assert _Host.noops == ["bucket lmcache has no kvceph marker"]


def test_the_fsid_fact_reads_ceph_fsid():
    from deploys.facts.ceph import CephFsid

    assert CephFsid().process([json.dumps({"fsid": FSID})]) == FSID


def test_a_service_marked_on_another_cluster_is_not_taken_over():
    rec = ownership.record("created", FSID, ownership.digest({"x": 1}), "2026-12-01T02:00:00Z")
    spec = specs.rgw_spec(RGW)
    p = ownership.plan_service(spec, spec, {SERVICE_MARK: rec}, (), "0000-other")
    assert p.spec is None and p.refusal.startswith("service rgw.standard: marker ")
    assert f"was written on cluster {FSID}, this is 0000-other" in p.refusal
    assert "--data kvceph_adopt=rgw.standard" in p.refusal
    # Same cluster: kvceph's own, whatever spec digest it recorded (kvceph changes specs).
    assert ownership.plan_service(spec, spec, {SERVICE_MARK: rec}, (), FSID).refusal is None


def test_a_service_marker_is_written_as_a_record():
    from deploys.operations import ceph as ceph_ops

    spec = specs.rgw_spec(RGW)
    cmd = str(ceph_ops._marker("rgw.standard", "created", {}, FSID, spec))
    written = json.loads(cmd.split(SERVICE_MARK, 1)[1].strip().strip("'"))
    assert written["state"] == "created" and written["fsid"] == FSID
    assert written["digest"] == ownership.digest(spec)
