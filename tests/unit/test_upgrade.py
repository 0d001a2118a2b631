"""Engine upgrades across a cache group (deploys/engine/upgrade.py, versions.KEY_SCHEMES): a patch
release of one vLLM minor keeps the object keys; another minor is another key scheme, whose
engines hash with their own seed (derived from the fleet's), so the group rolls like any change
and old and new names cannot collide."""

from __future__ import annotations

import hashlib
import hmac
import json
from pathlib import Path

import pytest

from deploys.engine import upgrade, versions

RUNNING = {"active": "active", "main_pid": 42}


def _current(label: str | None) -> dict:
    return {**RUNNING, "env": {} if label is None else {upgrade.VERSIONS_VAR: label}}


def test_every_supported_pair_has_a_key_scheme_with_its_sources():
    for pair in versions.SUPPORTED_PAIRS:
        scheme = versions.key_scheme(*pair)
        assert scheme and scheme.key_format and scheme.chunk_hash
        assert any("CacheEngineKey.to_string" in s for s in scheme.sources)
        assert any("token_database.py" in s for s in scheme.sources)
    assert versions.key_scheme("0.35.0", "0.5.6") is None


@pytest.mark.parametrize(
    ("old", "new", "keeps"),
    [
        (("0.33.0", "0.5.6"), ("0.33.1", "0.5.6"), True),
        (("0.26.0", "0.5.6"), ("0.26.3", "0.5.6"), True),
        (("0.26.0", "0.5.6"), ("0.33.0", "0.5.6"), False),
        (("0.33.1", "0.5.6"), ("0.26.0", "0.5.6"), False),
        (("0.32.0", "0.5.6"), ("0.33.0", "0.5.6"), False),  # an unsupported old pair: unknown
    ],
)
def test_keys_stay_valid_only_within_one_vllm_minor(old, new, keeps):
    assert upgrade.Upgrade(old, new).keeps_keys is keeps


def test_running_versions_come_from_the_process_else_the_venv():
    assert upgrade.running_pair(_current("vllm=0.26.0 lmcache=0.5.6")) == ("0.26.0", "0.5.6")
    venv = {"vllm": "0.33.0", "lmcache": "0.5.6", "torch": "2.11.0"}
    assert upgrade.running_pair(_current(None), venv) == ("0.33.0", "0.5.6")
    assert upgrade.running_pair(_current(None), {"kvceph-lab-engine": "0.1.0"}) is None
    stopped = {"active": "inactive", "main_pid": 0, "env": {}}
    assert upgrade.running_pair(stopped, venv) is None  # nothing running: nothing to keep
    assert upgrade.versions_value("0.33.1", "0.5.6") == "vllm=0.33.1 lmcache=0.5.6"


def test_plan_lines_say_what_a_new_scheme_costs():
    patch = upgrade.Upgrade(("0.33.0", "0.5.6"), ("0.33.1", "0.5.6"))
    assert upgrade.plan_line(patch).startswith(
        "vLLM 0.33.0 -> 0.33.1, LMCache 0.5.6: the object keys stay valid"
    )
    minor = upgrade.Upgrade(("0.33.1", "0.5.6"), ("0.26.0", "0.5.6"))
    line = upgrade.plan_line(minor, "lmcache", 7)
    assert "\n" not in line
    assert line == (
        "vLLM 0.33.1 -> 0.26.0, LMCache 0.5.6: the object keys change (chunk hash vLLM 0.33.x "
        "get_hash_fn_by_name + init_none_hash -> vLLM 0.26.x get_hash_fn_by_name + "
        "init_none_hash): the new engines hash with key scheme vllm-0.26/lmcache-0.5.6's own "
        "seed, old and new names cannot collide, the group rolls in its batches; the new "
        "scheme starts with an empty tier (misses until its engines wrote each prefix once), "
        "the old objects in bucket lmcache age out through the lifecycle rule (7 days)"
    )


# --- The seed of each key scheme -------------------------------------------------------------

FLEET = 3141592653
V033, V026 = ("0.33.0", "0.5.6"), ("0.26.0", "0.5.6")
S033, S026 = versions.scheme_name(*V033), versions.scheme_name(*V026)


def test_each_scheme_has_its_own_seed_derived_from_the_fleets():
    assert (S033, S026) == ("vllm-0.33/lmcache-0.5.6", "vllm-0.26/lmcache-0.5.6")
    # A patch release is the same scheme, so the same seed.
    assert versions.scheme_name("0.33.1", "0.5.6") == S033
    assert versions.scheme_name("0.32.0", "0.5.6") == "vllm-0.32/lmcache-0.5.6 (unsupported)"
    a, b = upgrade.scheme_seed(FLEET, S033), upgrade.scheme_seed(FLEET, S026)
    # Pinned: a seed that changed between kvceph versions would restart and orphan every
    # group on a derived seed. HMAC-SHA256(key "3141592653", "kvceph key scheme <name>")[:4].
    assert (a, b) == (
        int.from_bytes(_hmac(FLEET, S033)[:4], "big"),
        int.from_bytes(_hmac(FLEET, S026)[:4], "big"),
    )
    assert len({a, b, FLEET}) == 3
    assert all(0 <= x <= 4294967295 for x in (a, b))  # what PYTHONHASHSEED accepts
    assert upgrade.scheme_seed(FLEET + 1, S033) != a  # another fleet, other seeds
    assert upgrade.scheme_seed(67, S033) == 2661912427  # the public default's, in the docs


def _hmac(key: int, scheme: str) -> bytes:
    return hmac.new(
        str(key).encode(), f"kvceph key scheme {scheme}".encode(), hashlib.sha256
    ).digest()


def _file(pair, seed):
    return {
        "versions": upgrade.versions_value(*pair) if pair else None,
        "seed_sha256": upgrade.seed_sha256(seed) if seed is not None else None,
    }


def test_a_group_without_a_scheme_change_keeps_its_seed():
    # Today's fleet: every engine on the fleet's seed. Nothing changes, nothing restarts.
    got = upgrade.group_seed(FLEET, V033, [_file(V033, FLEET), _file(("0.33.1", "0.5.6"), FLEET)])
    assert (got.seed, got.derived) == (FLEET, False)
    # A group that moved once keeps its scheme's own seed.
    own = upgrade.scheme_seed(FLEET, S026)
    got = upgrade.group_seed(FLEET, V026, [_file(V026, own)])
    assert (got.seed, got.derived) == (own, True)


def test_a_new_scheme_gets_its_own_seed_and_a_rollback_gets_the_old_one_back():
    moving = upgrade.group_seed(FLEET, V026, [_file(V033, FLEET), _file(V033, FLEET)])
    assert moving.seed == upgrade.scheme_seed(FLEET, S026) != FLEET
    assert "not vllm-0.33/lmcache-0.5.6's" in moving.why
    # Half rolled (a failed batch): the rest follows the moved engines' seed ...
    half = [_file(V026, moving.seed), _file(V033, FLEET)]
    assert upgrade.group_seed(FLEET, V026, half).seed == moving.seed
    # ... and setting the profile back returns to the fleet's seed, with the old objects.
    assert upgrade.group_seed(FLEET, V033, half).seed == FLEET
    # Moving on from a derived seed to a third scheme: that scheme's own.
    third = upgrade.group_seed(FLEET, V033, [_file(V026, moving.seed)])
    assert third.seed == upgrade.scheme_seed(FLEET, S033)


def test_nothing_on_record_keeps_the_fleets_seed():
    assert upgrade.group_seed(FLEET, V033, []).seed == FLEET  # a new group
    # Env files from before kvceph recorded versions, or with a seed from elsewhere (an older
    # group_data value): no evidence that the fleet's seed names another scheme.
    assert upgrade.group_seed(FLEET, V033, [_file(None, FLEET)]).seed == FLEET
    assert upgrade.group_seed(FLEET, V026, [_file(V033, 67)]).seed == FLEET
    assert upgrade.group_seed(FLEET, V033, [_file(V033, None)]).seed == FLEET


def _recorded(case: str) -> list[dict]:
    """KeySeedsInUse as recorded from env files render.env_file wrote (tests/facts/)."""
    path = Path(__file__).resolve().parents[1] / "facts" / "engine.KeySeedsInUse" / case
    return list(json.loads(path.with_suffix(".json").read_text())["fact"].values())


def test_the_recorded_env_files_decide_the_seed():
    # The fake lab's fleet seed is group_data's 67; engine-a moved to vLLM 0.26, engine-b not.
    mid_roll = _recorded("two_engines_mid_roll")
    assert mid_roll[1]["seed_sha256"] == upgrade.seed_sha256(67)
    assert upgrade.group_seed(67, V026, mid_roll).seed == upgrade.scheme_seed(67, S026)
    assert upgrade.group_seed(67, V033, mid_roll).seed == 67
    assert upgrade.group_seed(67, V033, _recorded("converged")).derived is False
    assert upgrade.group_seed(67, V026, _recorded("converged")).derived is True
    # Versions not on record: the fleet's seed stays, whichever profile.
    assert upgrade.group_seed(67, V026, _recorded("before_versions")).seed == 67
    assert upgrade.group_seed(67, V026, _recorded("blank_host")).seed == 67
