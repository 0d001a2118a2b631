"""Lifecycle merge and the S3 tier's pure helpers (offline)."""

from deploys.operations.s3 import lifecycle_rules, merge_lifecycle, secret_sha256
from deploys.settings.secrets import Secret
from deploys.stages import s3_tier

FOREIGN = {
    "ID": "logs",
    "Status": "Enabled",
    "Filter": {"Prefix": "logs/"},
    "Expiration": {"Days": 30},
}
OURS = lifecycle_rules("kvceph-expire", 7, 1)


def ids(rules):
    return [r["ID"] for r in rules]


def test_lifecycle_rules_shape():
    assert OURS == [
        {
            "ID": "kvceph-expire",
            "Status": "Enabled",
            "Filter": {"Prefix": ""},
            "Expiration": {"Days": 7},
        },
        {
            "ID": "kvceph-expire-abort-multipart",
            "Status": "Enabled",
            "Filter": {"Prefix": ""},
            "AbortIncompleteMultipartUpload": {"DaysAfterInitiation": 1},
        },
    ]


def test_merge_into_nothing_adds_ours():
    for current in (None, []):
        merge = merge_lifecycle(current, OURS)
        assert merge.rules == OURS and merge.added == ids(OURS) and merge.changed


def test_merge_converged_is_unchanged():
    merge = merge_lifecycle([FOREIGN, *OURS], OURS)
    assert not merge.changed and merge.rules == [FOREIGN, *OURS]


def test_merge_keeps_foreign_rules_in_place():
    other = {"ID": "zzz", "Status": "Disabled", "Prefix": "tmp/", "Expiration": {"Days": 1}}
    merge = merge_lifecycle([FOREIGN, other], OURS)
    assert merge.rules == [FOREIGN, other, *OURS]
    assert merge.added == ids(OURS) and not merge.updated and not merge.removed


def test_merge_updates_our_rule_in_place():
    merge = merge_lifecycle([OURS[0], FOREIGN, OURS[1]], lifecycle_rules("kvceph-expire", 14, 1))
    assert ids(merge.rules) == ["kvceph-expire", "logs", "kvceph-expire-abort-multipart"]
    assert merge.rules[0]["Expiration"] == {"Days": 14}
    assert merge.updated == ["kvceph-expire"] and not merge.added


def test_a_rule_with_our_id_is_ours():
    # A foreign rule that happens to use an ID we also want is ours by ID: it is updated.
    theirs = {**OURS[0], "Expiration": {"Days": 99}}
    merge = merge_lifecycle([theirs], OURS)
    assert merge.rules[0] == OURS[0]


def test_stale_own_rule_kept_without_opt_in():
    renamed = lifecycle_rules("kvceph-ttl", 7, 1)
    merge = merge_lifecycle([FOREIGN, *OURS], renamed)
    assert merge.kept_stale == ids(OURS) and not merge.removed
    assert ids(merge.rules) == ["logs", *ids(OURS), *ids(renamed)]


def test_stale_own_rule_removed_with_opt_in():
    renamed = lifecycle_rules("kvceph-ttl", 7, 1)
    merge = merge_lifecycle([FOREIGN, *OURS], renamed, allow_removal=True)
    assert merge.removed == ids(OURS) and ids(merge.rules) == ["logs", *ids(renamed)]


def test_opt_in_never_removes_foreign_rules():
    merge = merge_lifecycle([FOREIGN], OURS, allow_removal=True)
    assert FOREIGN in merge.rules and not merge.removed


def test_untranslatable_rules_are_reported():
    odd = {**FOREIGN, "kvceph_untranslatable": "filter.size"}
    assert merge_lifecycle([odd], OURS).untranslatable == ["logs"]


def test_secret_hash_ignores_masking():
    # Secret's str() is "***"; the hash must be of the real value, like the remote side's.
    assert secret_sha256(Secret("abc")) == secret_sha256("abc")
    assert secret_sha256("abc") == (
        "ba7816bf8f01cfea414140de5dae2223b00361a396177a9cb410ff61f20015ad"
    )


class _Me:
    class s3:  # noqa: N801 - mimics HostSettings.s3
        admin_endpoint = "http://127.0.0.1:80"
        region = "default"


def test_admin_config_reveals_keys_only_there():
    text = s3_tier.admin_config(_Me, Secret("AK"), Secret("SK"))
    assert "access_key = AK\n" in text and "secret_key = SK\n" in text
    assert "endpoint = http://127.0.0.1:80\n" in text and text.splitlines()[1] == "[s3]"


def test_stage_refusals_read_before_any_op(monkeypatch):
    from deploys.cluster import ownership
    from deploys.facts.ceph import CephFsid, CephOwnershipMarkers
    from deploys.facts.rgw import RgwBucket, RgwLifecycle, RgwUser
    from deploys.operations.s3 import secret_sha256 as sha

    mine = {
        ownership.marker_key(ownership.S3_USER, "kvceph-s3-admin"): ownership.CREATED,
        ownership.marker_key(ownership.BUCKET, "lmcache"): ownership.CREATED,
    }
    state = {
        CephOwnershipMarkers: mine,
        CephFsid: None,
        RgwUser: {"keys": [{"access_key": "AK", "secret_sha256": sha("old")}]},
        RgwBucket: {"bucket": "lmcache", "owner": "other"},
        RgwLifecycle: [{**FOREIGN, "kvceph_untranslatable": "filter.size"}],
    }

    class FakeHost:
        name = "ceph1"

        @staticmethod
        def get_fact(cls, **kwargs):
            return state[cls]

    class Me:
        ceph = None

        class s3:  # noqa: N801 - mimics HostSettings.s3
            user = "lmcache"
            admin_user = "kvceph-s3-admin"
            bucket = "lmcache"

        class run:  # noqa: N801 - mimics HostSettings.run
            adopt = ()

    class Creds:
        admin_access_key, admin_secret_key = Secret("AK"), Secret("new")

    monkeypatch.setattr(s3_tier, "host", FakeHost)
    problems = s3_tier.refusals(Me, Creds, OURS, False, 60)
    assert len(problems) == 3
    assert "RGW user kvceph-s3-admin exists but holds the configured access key" in problems[0]
    assert "owned by RGW user other" in problems[1]
    assert "cannot reproduce" in problems[2]
    state[RgwUser] = {"keys": [{"access_key": "AK", "secret_sha256": sha("new")}]}
    state[RgwBucket] = None
    assert s3_tier.refusals(Me, Creds, OURS, False, 60) == []
    # A user and bucket without kvceph's markers (deploys/cluster/ownership.py) come first, alone:
    # the checks above would read someone else's objects as kvceph's.
    state[CephOwnershipMarkers] = {}
    state[RgwBucket] = {"bucket": "lmcache", "owner": "lmcache"}
    problems = s3_tier.refusals(Me, Creds, OURS, False, 60)
    assert [p.split(" exists and")[0] for p in problems] == [
        "S3 tier: RGW user kvceph-s3-admin",
        "S3 tier: bucket lmcache",
    ]
    Me.run.adopt = ("s3-user/kvceph-s3-admin", "bucket/lmcache")
    (adopted,) = s3_tier.refusals(Me, Creds, OURS, False, 60)  # then the bucket's own checks
    assert "has lifecycle rule(s) logs" in adopted
    state[CephOwnershipMarkers] = None  # the cluster did not answer
    assert "cannot read kvceph's markers" in s3_tier.refusals(Me, Creds, OURS, False, 60)[0]
