"""Engine upgrades across a cache group (deploys/upgrade.py, versions.KEY_SCHEMES): a patch
release of one vLLM minor keeps the object keys, another minor orphans the bucket's cache and
is refused in one line without kvceph_upgrade_cold_cache."""

from __future__ import annotations

import pytest

from deploys import upgrade, versions

RUNNING = {"active": "active", "main_pid": 42}


def _current(label: str | None) -> dict:
    return {**RUNNING, "env": {} if label is None else {upgrade.VERSIONS_VAR: label}}


def test_every_supported_pair_has_a_key_scheme_with_its_sources():
    for pair in versions.SUPPORTED_PAIRS:
        scheme = versions.key_scheme(*pair)
        assert scheme and scheme.key_format and scheme.chunk_hash
        assert any("CacheEngineKey.to_string" in s for s in scheme.sources)
        assert any("token_database.py" in s for s in scheme.sources)
    assert versions.key_scheme("0.34.0", "0.5.6") is None


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


def test_plan_lines_and_the_one_line_refusal():
    patch = upgrade.Upgrade(("0.33.0", "0.5.6"), ("0.33.1", "0.5.6"))
    assert upgrade.plan_line(patch, False).startswith(
        "vLLM 0.33.0 -> 0.33.1, LMCache 0.5.6: the object keys stay valid"
    )
    minor = upgrade.Upgrade(("0.26.0", "0.5.6"), ("0.33.0", "0.5.6"))
    line = upgrade.refusal("gpu1", "lmcache", minor)
    assert "\n" not in line
    assert line == (
        "gpu1: kvceph_engine_profile: vLLM 0.26.0 -> 0.33.0, LMCache 0.5.6: the object keys "
        "change (chunk hash vLLM 0.26.x get_hash_fn_by_name + init_none_hash -> vLLM 0.33.x "
        "get_hash_fn_by_name + init_none_hash), so the cache in bucket lmcache would be "
        "orphaned; fix: keep vLLM "
        "0.26.0's minor, or pass --data kvceph_upgrade_cold_cache=true to accept a cold cache"
    )
    assert "the cache restarts cold" in upgrade.plan_line(minor, True)
