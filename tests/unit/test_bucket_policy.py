"""The KV bucket's least privilege: object names, the policy document, its merge, the owner
move, the group keys and the hash seed (deploys/cluster/bucket_policy.py, engine_users.py,
operations/s3_policy.py)."""

from __future__ import annotations

import json
from types import SimpleNamespace

import pytest

from deploys.access import engine_users
from deploys.cluster import bucket_policy
from deploys.operations import s3_policy
from deploys.settings import secrets
from deploys.settings.inventory import CacheGroup
from deploys.settings.reader import SettingsError

MODEL = "/var/lib/kvceph/models/Qwen/Qwen3-32B/abc123"
GPU = bucket_policy.GroupUser(
    "gpu", "lmcache-gpu", "_var_lib_kvceph_models_Qwen_Qwen3-32B_abc123@2@"
)
GAUDI = bucket_policy.GroupUser("gaudi", "lmcache-gaudi", "Qwen_Qwen3-32B@1@")


def test_the_prefix_is_what_both_connectors_write():
    # LMCache 0.5.6 s3_connector._format_safe_path and kvceph's s3core.object_path: "/" -> "_",
    # then URL-quoted on the wire; RGW stores the unquoted name.
    from urllib.parse import quote, unquote

    key = f"{MODEL}@2@0@1a2b3c@bfloat16"
    wire = "/" + quote(key.replace("/", "_"))
    assert unquote(wire[1:]).startswith(bucket_policy.object_prefix(MODEL, 2))
    assert bucket_policy.object_prefix("Qwen/Qwen3-32B", 1) == "Qwen_Qwen3-32B@1@"


def test_a_wildcard_in_the_model_argument_is_refused():
    with pytest.raises(bucket_policy.PolicyError, match=r"holds \* or \?"):
        bucket_policy.object_prefix("/models/qwen*", 2)


def test_each_group_gets_get_put_on_its_prefix_and_list_under_it_only():
    doc = bucket_policy.statements("lmcache", [GPU, GAUDI])
    by_sid = {s["Sid"]: s for s in doc}
    assert sorted(by_sid) == [
        "kvceph-gaudi-list",
        "kvceph-gaudi-objects",
        "kvceph-gpu-list",
        "kvceph-gpu-objects",
    ]
    objects = by_sid["kvceph-gpu-objects"]
    assert objects["Principal"] == {"AWS": ["arn:aws:iam:::user/lmcache-gpu"]}
    assert objects["Action"] == ["s3:GetObject", "s3:PutObject"]  # no delete, no ACL
    assert objects["Resource"] == [f"arn:aws:s3:::lmcache/{GPU.prefix}*"]
    listing = by_sid["kvceph-gpu-list"]
    assert listing["Action"] == ["s3:ListBucket"]
    assert listing["Resource"] == ["arn:aws:s3:::lmcache"]
    # IfExists: RGW's 404-for-a-miss check asks for ListBucket with no s3:prefix (lab-measured)
    assert listing["Condition"] == {"StringLikeIfExists": {"s3:prefix": [f"{GPU.prefix}*"]}}
    # Nothing of the bucket's own configuration, nothing of another group's names.
    actions = {a for s in doc for a in s["Action"]}
    assert actions == {"s3:GetObject", "s3:PutObject", "s3:ListBucket"}
    assert all(s["Effect"] == "Allow" for s in doc)


def test_the_legacy_user_keeps_what_the_engines_need_on_the_whole_bucket():
    doc = bucket_policy.statements("lmcache", [GPU], legacy_uid="lmcache")
    legacy = next(s for s in doc if s["Sid"] == "kvceph-legacy-engines")
    assert legacy["Action"] == ["s3:GetObject", "s3:PutObject", "s3:ListBucket"]
    assert legacy["Resource"] == ["arn:aws:s3:::lmcache", "arn:aws:s3:::lmcache/*"]


# The shape RGW (Pacific 16.2) returned for GetBucketPolicy after kvceph's put-policy in the lab
# (test_20_privilege.py's bucket; the model path shortened): the document as sent.
RECORDED = json.loads(
    '{"Statement":[{"Action":["s3:GetObject","s3:PutObject"],"Effect":"Allow",'
    '"Principal":{"AWS":["arn:aws:iam:::user/lmcache-gpu"]},'
    '"Resource":["arn:aws:s3:::lmcache/_var_lib_kvceph_models_Qwen_Qwen3-32B_abc123@2@*"],'
    '"Sid":"kvceph-gpu-objects"},{"Action":["s3:ListBucket"],'
    '"Condition":{"StringLikeIfExists":{"s3:prefix":["_var_lib_kvceph_models_Qwen_Qwen3-32B_abc123@2@*"]}},'
    '"Effect":"Allow","Principal":{"AWS":["arn:aws:iam:::user/lmcache-gpu"]},'
    '"Resource":["arn:aws:s3:::lmcache"],"Sid":"kvceph-gpu-list"}],"Version":"2012-10-17"}'
)


def test_a_converged_policy_merges_to_no_change():
    merged = bucket_policy.merge(RECORDED, bucket_policy.statements("lmcache", [GPU]))
    assert not merged.changed and merged.summary() == "no change"


def test_single_values_unlisted_compare_equal():
    flat = json.loads(json.dumps(RECORDED))
    for s in flat["Statement"]:
        s["Action"] = s["Action"][0] if len(s["Action"]) == 1 else s["Action"]
        s["Resource"] = s["Resource"][0]
    assert not bucket_policy.merge(flat, bucket_policy.statements("lmcache", [GPU])).changed


def test_foreign_statements_stay_and_ours_are_added_updated_removed():
    foreign = {
        "Sid": "ops-read",
        "Effect": "Allow",
        "Principal": {"AWS": ["x"]},
        "Action": "s3:GetObject",
        "Resource": "arn:aws:s3:::lmcache/*",
    }
    stale = {**RECORDED["Statement"][0], "Sid": "kvceph-old-objects"}
    current = {"Version": "2012-10-17", "Statement": [foreign, stale, RECORDED["Statement"][1]]}
    wanted = bucket_policy.statements("lmcache", [GPU, GAUDI], legacy_uid="lmcache")
    merged = bucket_policy.merge(current, wanted)
    assert merged.added == [
        "kvceph-gaudi-list",
        "kvceph-gaudi-objects",
        "kvceph-gpu-objects",
        "kvceph-legacy-engines",
    ]
    assert merged.removed == ["kvceph-old-objects"] and merged.updated == []
    assert merged.document["Statement"][0] == foreign
    assert merged.summary().startswith("add kvceph-gaudi-list")
    # Dropping the legacy key later removes only its statement.
    later = bucket_policy.merge(merged.document, bucket_policy.statements("lmcache", [GPU, GAUDI]))
    assert later.removed == ["kvceph-legacy-engines"] and not later.added


@pytest.mark.parametrize(
    ("bucket", "plan"),
    [
        (None, None),  # no bucket yet: the admin user creates it
        ({"owner": "kvceph-s3-admin"}, None),  # converged (a second run: no change)
        ({"owner": "lmcache"}, "link"),  # a deploy before issue 36: moved
        ({"owner": "someone"}, None),  # not ours to move: the S3 tier refuses it
    ],
)
def test_the_owner_moves_only_from_the_former_engine_user(bucket, plan):
    assert s3_policy.owner_plan(bucket, "kvceph-s3-admin", "lmcache") == plan


# --- keys per cache group ----------------------------------------------------------------------


def _creds(**env):
    base = {"KVCEPH_S3_ADMIN_ACCESS_KEY": "ADMINAK", "KVCEPH_S3_ADMIN_SECRET_KEY": "adminsk"}
    return secrets.load({**base, **env}, cwd="/nonexistent")


GROUPS = [CacheGroup("m", 2, ("gpu1", "gpu2"), "gpu"), CacheGroup("m", 1, ("gaudi1",), "gaudi")]


def test_group_keys_are_read_per_group_and_masked():
    creds = _creds(
        KVCEPH_S3_ACCESS_KEY_GPU="GPUAK",
        KVCEPH_S3_SECRET_KEY_GPU="gpusk",
        KVCEPH_S3_ACCESS_KEY_GAUDI="GAUDIAK",
        KVCEPH_S3_SECRET_KEY_GAUDI="gaudisk",
    )
    engine_users.check_keys(GROUPS, creds)
    gpu = creds.engine("gpu")
    assert gpu.access_key.reveal() == "GPUAK" and gpu.admin_access_key is None
    assert gpu.group_keys == ()  # a host of one group carries no other group's key
    assert "gpusk" not in repr(creds) and not creds.legacy


def test_a_missing_group_key_names_the_variable_and_the_hosts():
    creds = _creds(KVCEPH_S3_ACCESS_KEY_GPU="GPUAK", KVCEPH_S3_SECRET_KEY_GPU="gpusk")
    with pytest.raises(SettingsError) as err:
        engine_users.check_keys(GROUPS, creds)
    assert str(err.value).startswith(
        "controller: KVCEPH_S3_ACCESS_KEY_GAUDI / KVCEPH_S3_SECRET_KEY_GAUDI missing: the keys "
        "of cache group gaudi (gaudi1); fix: export"
    )


def test_one_access_key_for_two_users_is_refused():
    creds = _creds(
        KVCEPH_S3_ACCESS_KEY_GPU="ADMINAK",
        KVCEPH_S3_SECRET_KEY_GPU="x",
        KVCEPH_S3_ACCESS_KEY_GAUDI="G",
        KVCEPH_S3_SECRET_KEY_GAUDI="y",
    )
    with pytest.raises(SettingsError, match="KVCEPH_S3_ACCESS_KEY_GPU equals KVCEPH_S3_ADMIN_"):
        engine_users.check_keys(GROUPS, creds)


def test_a_group_access_key_without_its_secret_is_refused():
    with pytest.raises(secrets.SecretsError, match="without KVCEPH_S3_SECRET_KEY_GPU"):
        _creds(KVCEPH_S3_ACCESS_KEY_GPU="GPUAK")


# --- the hash seed -----------------------------------------------------------------------------


def _hosts(seed: int):
    engine = SimpleNamespace(python_hash_seed=seed)
    return {"gpu1": SimpleNamespace(is_inference=True, engine=engine)}


def test_the_public_seed_is_refused_outside_a_lab_and_a_warning_in_one():
    with pytest.raises(SettingsError, match=r"^gpu1: kvceph_python_hash_seed = 67: the public "
                       r"default: .*fix: put KVCEPH_PYTHON_HASH_SEED="):  # fmt: skip
        engine_users.apply_hash_seed(_hosts(67), _creds())
    lab = {n: SimpleNamespace(**vars(h), lab=True) for n, h in _hosts(67).items()}
    hosts, line = engine_users.apply_hash_seed(lab, _creds())
    assert hosts["gpu1"].engine.python_hash_seed == 67
    assert line.startswith("kvceph: WARNING: hash seed: the public default 67")
    assert "KVCEPH_PYTHON_HASH_SEED" in line


def test_the_fleet_seed_from_the_secrets_wins_and_is_never_shown():
    import dataclasses

    @dataclasses.dataclass(frozen=True)
    class Engine:
        python_hash_seed: int

    @dataclasses.dataclass(frozen=True)
    class Host:
        engine: Engine
        is_inference: bool = True

    hosts, line = engine_users.apply_hash_seed(
        {"gpu1": Host(Engine(67))}, _creds(KVCEPH_PYTHON_HASH_SEED="3141592653")
    )
    assert hosts["gpu1"].engine.python_hash_seed == 3141592653
    assert "3141592653" not in line and "WARNING" not in line


def test_a_seed_that_is_no_integer_is_refused():
    with pytest.raises(secrets.SecretsError) as caught:
        _creds(KVCEPH_PYTHON_HASH_SEED="sixty-seven")
    assert str(caught.value) == (
        "controller: KVCEPH_PYTHON_HASH_SEED = '***': must be an integer 0..4294967295; fix: "
        "set it to the fleet's seed, digits only (or unset it: kvceph_python_hash_seed)"
    )
