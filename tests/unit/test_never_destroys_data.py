"""Never destroy data: no plan and no deploy code deletes a pool, bucket, user, key or object."""

from __future__ import annotations

import pytest
from fake_deploy import REPO, _commands
from fake_deploy import run as _run

from deploys.operations import s3

DESTRUCTIVE = [
    r"\bpool\s+(delete|rm|rename)\b",
    r"mon_allow_pool_delete",
    r"really-really-mean-it",
    r"\bbucket\s+(rm|unlink|purge)\b",
    r"\buser\s+(rm|suspend)\b",
    r"\bkey\s+rm\b",
    r"--purge-(objects|data|keys)",
    r"\b(realm|zonegroup|zone)\s+(rm|delete)\b",
    r"\borch\s+(rm|daemon\s+rm)\b",
    r"\brados\b[^\n]*\s(rm|purge|cleanup)\b",
    r"\bdelete_(bucket|object|objects|bucket_lifecycle|bucket_policy)\b",
    r"\brm\s+-[a-z]*r",
]
_DESTRUCTIVE = __import__("re").compile("|".join(DESTRUCTIVE))


def _destructive(text: str) -> list[str]:
    return [m.group(0) for m in _DESTRUCTIVE.finditer(text)]


def test_destructive_patterns_catch_what_they_should():
    for bad in (
        "timeout -k 5 60 ceph --connect-timeout 5 osd pool delete p p"
        " --yes-i-really-really-mean-it",
        "timeout 60 radosgw-admin bucket rm --bucket=lmcache --purge-objects",
        "timeout 60 radosgw-admin user rm --uid=lmcache",
        "client.delete_bucket_lifecycle(Bucket=name)",
        "client.delete_objects(Bucket=b, Delete=d)",
    ):
        assert _destructive(bad), bad


@pytest.mark.parametrize("scenario", ["fresh", "converged", "drift"])
def test_no_destructive_command_in_any_plan(scenario):
    # Executed on the fake connector (-y): every fact read and every operation command.
    rc, out = _run(f"tests/inventories/fake_{scenario}.py", "-y", "-vvv", "--debug")
    commands = [cmd for _, cmd in _commands(out)]
    assert len(commands) > 20, out[-2000:]
    assert {c: _destructive(c) for c in commands if _destructive(c)} == {}


def test_no_destructive_call_in_the_deploy_code():
    # The deploy and its remote helper; deploys/verification/ is verify.py's, which deletes
    # only the objects its own run named (object_names.py); the key rotation modules are
    # rotate.py's, which removes only the old key the operator names (checked below).
    sources = [
        p
        for p in (REPO / "deploys").rglob("*.py")
        if "verification" not in p.parts
        and p.name != "verify.py"
        and str(p.relative_to(REPO)) not in ROTATION_ONLY
    ] + [REPO / "deploy.py"]
    found = {str(p.relative_to(REPO)): _destructive(p.read_text()) for p in sources}
    found = {k: [v for v in vs if v not in PRUNES_ITS_OWN.get(k, ())] for k, vs in found.items()}
    assert {k: v for k, v in found.items() if v} == {}
    assert (REPO / "deploys" / "remote" / "s3admin.py") in sources


# The venv prune removes only <kvceph_venv>-<12 hex> venvs holding kvceph's marker (or its
# lock record), never the profile's, one an engine runs or the rollback venv, and wheels of
# kvceph's host wheelhouse no kept venv's lock names (engine_lock.prune_plan,
# tests/unit/test_engine_lock.py).
# The cache trim (issue 52, docs/capacity.md) deletes only objects a cache group's own user
# wrote under the group's prefix, oldest first, past 90 % of its share (test_s3admin.py,
# test_cache_trim.py); it runs from its timer, never from a deploy's plan. A stale ownership
# marker's fix text names `ceph config-key rm` (a marker holds no data).
PRUNES_ITS_OWN = {
    "deploys/operations/engine.py": ("rm -r",),
    "deploys/remote/s3admin.py": ("delete_objects",),
    "deploys/cluster/ownership.py": ("key rm",),
}

ROTATION_ONLY = ("deploys/stages/rotation.py", "deploys/operations/s3_rotation.py")


def test_key_removal_is_reachable_only_from_rotate_py():
    # Nothing deploy.py can import names the rotation modules; their only destructive verb
    # is the key removal.
    names = __import__("re").compile(r"import (.*\b)?rotation\b|s3_rotation|deploys\.rotation")
    importers = {
        str(p.relative_to(REPO))
        for p in [*(REPO / "deploys").rglob("*.py"), REPO / "deploy.py", REPO / "verify.py"]
        if names.search(p.read_text())
    }
    assert importers <= set(ROTATION_ONLY), importers
    for path in ROTATION_ONLY:
        assert set(_destructive((REPO / path).read_text())) <= {"key rm"}, path


def test_lifecycle_rules_of_others_and_stale_ones_are_kept_without_opt_in():
    desired = s3.lifecycle_rules("kvceph-expire", 7, 1)
    foreign = {"ID": "backup-keep", "Status": "Enabled", "Filter": {"Prefix": "b/"}}
    stale = {**desired[0], "ID": "kvceph-old"}
    merge = s3.merge_lifecycle([foreign, stale], desired)
    assert merge.removed == [] and merge.kept_stale == ["kvceph-old"]
    assert foreign in merge.rules and stale in merge.rules
    assert s3.merge_lifecycle([foreign, stale], desired, allow_removal=True).removed == [
        "kvceph-old"
    ]


@pytest.mark.parametrize("existing", ["erasure", "4"])
def test_pool_of_another_type_is_refused_even_with_every_opt_in(existing):
    from deploys.operations import ceph

    have = {
        "type": existing,
        "size": 3,
        "min_size": 2,
        "pg_num": 8,
        "pg_num_target": 8,
        "autoscale_mode": "off",
        "applications": ["rgw"],
    }
    with pytest.raises(ceph.Refused, match=f"is {existing}, kvceph wants replicated"):
        ceph.plan_pool(
            have,
            ceph.WantedPool(
                "default.rgw.buckets.data",
                8,
                size=3,
                min_size=2,
                application="rgw",
                allow_data_movement=True,
                allow_pg_decrease=True,
            ),
        )
