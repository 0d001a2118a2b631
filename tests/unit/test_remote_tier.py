"""remote_tier: LMCache 0.5.6's own journal lines -> has the engine a remote tier?

The lines are LMCache's templates as vLLM's journal shows them (prefix, level, file suffix)."""

import json
import logging
from pathlib import Path

import pytest
from kvceph_lab_engine import kvceph_store

from deploys import render
from deploys import settings as s
from deploys.tier import remote_tier as rt

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


# --- S3 turned off for good (LMCache 0.5.6's stock S3 connector) ----------------------------

S3_OFF_FIXTURES = Path(__file__).resolve().parents[1] / "facts" / "connector.S3Disabled"


def _s3_off(case: str) -> dict:
    return json.loads((S3_OFF_FIXTURES / f"{case}.json").read_text())["fact"]


def test_s3_off_at_from_the_lab_engines_recorded_journal_line():
    fact = _s3_off("lab_engine_disabled")
    at = rt.s3_off_at(fact)
    assert at is not None and at == fact["at"]
    assert fact["line"].startswith("ERROR ") and rt.S3_DISABLED in fact["line"]
    assert rt.shown_time(at).endswith(" UTC") and len(rt.shown_time(at)) == len(
        "2026-12-04 13:40:01 UTC"
    )
    assert rt.s3_off_at(_s3_off("not_disabled")) is None
    assert rt.s3_off_at(_s3_off("not_running")) is None
    assert rt.s3_off_at(None) is None  # kvceph's connector: not read


def test_shown_time_takes_what_journalctl_prints():
    assert rt.shown_time("2026-12-04T13:40:01.123456+00:00") == "2026-12-04 13:40:01 UTC"
    assert rt.shown_time("2026-12-04T14:40:01.123456+0100") == "2026-12-04 13:40:01 UTC"
    assert rt.shown_time("not a time") == "not a time"


def test_s3_off_reason_and_warning_name_the_time_endpoint_and_fix():
    at = "2026-12-04T13:40:01.123456+00:00"
    reason = rt.s3_off_reason(at, "http://s3.kvlab:80")
    assert reason.startswith("S3 connection disabled at 2026-12-04 13:40:01 UTC (")
    assert reason.endswith("and http://s3.kvlab:80 answers again")
    waits = rt.s3_off_waits("gpu1", "vllm.service", at, "http://s3.kvlab:80", "Connection refused")
    assert waits.startswith("kvceph: gpu1 vllm.service: S3 connection disabled at 2026-12-04")
    assert "not restarted: http://s3.kvlab:80 does not answer from gpu1 (Connection refused)" in (
        waits
    )
    assert "fix: bring the S3 endpoint back, then rerun the deploy" in waits


def test_the_lab_engine_logs_lmcaches_s3_disabled_line():
    """The lab engine's breaker says what LMCache 0.5.6's does (s3_connector.py)."""
    from kvceph_lab_engine import s3 as lab_s3

    source = Path(lab_s3.__file__).read_text()
    assert '"S3 connection disabled after %s consecutive failures. "' in source
    assert rt.S3_DISABLED == "S3 connection disabled after"
