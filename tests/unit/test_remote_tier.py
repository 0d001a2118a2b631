"""remote_tier: LMCache 0.5.6's own journal lines -> has the engine a remote tier?

The lines are LMCache's templates as vLLM's journal shows them (prefix, level, file suffix)."""

import logging

import pytest
from kvceph_lab_engine import kvceph_store

from deploys import remote_tier as rt
from deploys import render
from deploys import settings as s

P = "(EngineCore_DP0 pid=812) [2026-12-01 20:01:02,123] LMCache"
OK_LINES = [
    f"{P} INFO: Connection initialized/re-established at plugin://kvceph (remote_backend.py:153)",
    f"{P} INFO: Created remote backend for plugin: kvceph (__init__.py:277)",
]
IMPORT_FAILED = [
    f"{P} ERROR: Failed to load remote connector kvceph due to import/attribute error: No module "
    "named 'kvceph_connector' (__init__.py:339)",
    f"{P} WARNING: Failed to initialize/re-establish remote connection: No adapter found for URL: "
    "plugin://kvceph (remote_backend.py:160)",
    # LMCache logs this even so: it is no proof of a tier.
    f"{P} INFO: Created remote backend for plugin: kvceph (__init__.py:277)",
]


def test_connected():
    assert rt.verdict(OK_LINES) == rt.Verdict(rt.OK)


def test_import_failure_is_missing_despite_created_line():
    v = rt.verdict(IMPORT_FAILED)
    assert v.state == rt.MISSING
    assert v.cause.startswith("Failed to initialize/re-establish remote connection: No adapter")


def test_backend_constructor_failure():
    line = f"{P} ERROR: Failed to create remote backend for plugin kvceph: bad serde (x.py:282)"
    v = rt.verdict([line])
    assert v.state == rt.MISSING and "plugin kvceph: bad serde" in v.cause


def test_adapter_constructor_failure():
    line = f"{P} ERROR: Failed to create remote connector kvceph adapter: boom (__init__.py:345)"
    assert rt.verdict([line]).state == rt.MISSING


def test_a_later_reconnect_heals():
    assert rt.verdict(IMPORT_FAILED + OK_LINES[:1]).state == rt.OK
    assert rt.verdict(OK_LINES + IMPORT_FAILED).state == rt.MISSING


def test_nothing_said_is_unknown_not_a_failure():
    assert rt.verdict([]).state == rt.UNKNOWN
    assert rt.verdict([f"{P} INFO: Creating connector for plugin: kvceph"]).state == rt.UNKNOWN


def test_failure_message_is_one_line_with_the_fix():
    msg = rt.failure_message("gpu1", "vllm.service", "kvceph", rt.verdict(IMPORT_FAILED))
    assert msg.startswith("gpu1: vllm.service serves with no remote tier: LMCache logged ")
    assert "kvceph_connector is installed" in msg and "; fix: " in msg and "\n" not in msg


# --- The lab engine fails as LMCache fails: the same lines, the same verdict -------------------


def _extra(**changes):
    me = s.load(
        {"kvceph_s3_endpoint_ip": "10.0.0.5", "kvceph_lmcache_connector": "kvceph"},
        "gpu1",
        ("gpu",),
    )
    return {**render.lmcache_config(me)["extra_config"], **changes}


@pytest.fixture(autouse=True)
def lmcache_056(monkeypatch):
    """The lab hosts' venv has LMCache 0.5.6 (this test interpreter has none)."""
    from kvceph_connector import versions

    monkeypatch.setattr(versions, "check_lmcache_version", lambda *a, **k: None)


def _connect(caplog, extra):
    caplog.clear()
    with caplog.at_level(logging.INFO, logger="kvceph_lab_engine.lmcache"):
        store = kvceph_store.create(extra, 256)
    return store, [r.getMessage() for r in caplog.records]


def test_lab_engine_connects_with_the_rendered_config(caplog):
    store, lines = _connect(caplog, _extra())
    assert store is not None and store.min_hit_tokens == 0
    assert rt.verdict(lines).state == rt.OK
    assert lines[-1] == "Created remote backend for plugin: kvceph"


@pytest.mark.parametrize(
    "changes,cause",
    [
        (
            {"remote_storage_plugin.kvceph.module_path": "kvceph_nowhere.plugin"},
            "No adapter found for URL: plugin://kvceph",
        ),
        ({"remote_storage_plugin.kvceph.class_name": "Nope"}, "No adapter found"),
        ({"kvceph.bogus": 1}, "kvceph.bogus"),
        ({"kvceph.endpoint": ""}, "kvceph.endpoint"),
    ],
)
def test_lab_engine_fails_like_lmcache(caplog, changes, cause):
    store, lines = _connect(caplog, _extra(**changes))
    assert store is None
    v = rt.verdict(lines)
    assert v.state == rt.MISSING and cause in v.cause, v
    # LMCache logs the misleading "created" line anyway; so does the stand-in.
    assert lines[-1] == "Created remote backend for plugin: kvceph"
