"""Translation of ``radosgw-admin lc get`` rules (Pacific) into the S3 API shape."""

from deploys.facts.rgw import s3_rule


def raw(**over):
    rule = {
        "id": "r",
        "prefix": "",
        "status": "Enabled",
        "expiration": {"days": "", "date": ""},
        "noncur_expiration": {"days": "", "date": ""},
        "mp_expiration": {"days": "", "date": ""},
        "filter": {"prefix": "", "obj_tags": {"tagset": {}}},
        "transitions": {},
        "noncur_transitions": {},
        "dm_expiration": False,
    }
    rule.update(over)
    return rule


def test_expiration_with_empty_filter():
    assert s3_rule(raw(expiration={"days": "7", "date": ""})) == {
        "ID": "r",
        "Status": "Enabled",
        "Filter": {"Prefix": ""},
        "Expiration": {"Days": 7},
    }


def test_legacy_prefix_stays_top_level():
    rule = s3_rule(raw(prefix="old/", expiration={"days": "9", "date": ""}))
    assert rule["Prefix"] == "old/" and "Filter" not in rule


def test_single_tag_and_prefix_with_tags():
    tag = s3_rule(raw(filter={"prefix": "", "obj_tags": {"tagset": {"k": "v"}}}))
    assert tag["Filter"] == {"Tag": {"Key": "k", "Value": "v"}}
    both = s3_rule(raw(filter={"prefix": "a/", "obj_tags": {"tagset": {"k": "v"}}}))
    assert both["Filter"] == {"And": {"Prefix": "a/", "Tags": [{"Key": "k", "Value": "v"}]}}


def test_multipart_noncurrent_delete_marker_transitions():
    rule = s3_rule(
        raw(
            mp_expiration={"days": "1", "date": ""},
            noncur_expiration={"days": "3", "date": ""},
            dm_expiration=True,
            transitions={"COLD": {"days": "30", "date": "", "storage_class": "COLD"}},
            noncur_transitions={"COLD": {"days": "5", "storage_class": "COLD"}},
        )
    )
    assert rule["AbortIncompleteMultipartUpload"] == {"DaysAfterInitiation": 1}
    assert rule["NoncurrentVersionExpiration"] == {"NoncurrentDays": 3}
    assert rule["Expiration"] == {"ExpiredObjectDeleteMarker": True}
    assert rule["Transitions"] == [{"StorageClass": "COLD", "Days": 30}]
    assert rule["NoncurrentVersionTransitions"] == [{"NoncurrentDays": 5, "StorageClass": "COLD"}]
    assert "kvceph_untranslatable" not in rule


def test_unknown_fields_are_marked_not_dropped():
    rule = s3_rule(raw(newer_field={"x": 1}, filter={"prefix": "", "size_gt": 5}))
    assert rule["kvceph_untranslatable"] == "newer_field, filter.size_gt"
