"""Object-key bookkeeping: only the run's objects are ever deleted; the document is unique."""

from datetime import UTC, datetime, timedelta

import pytest

from deploys.verification import bookkeeping as bk
from deploys.verification import document

T0 = datetime(2026, 11, 30, 1, 0, tzinfo=UTC)
PREFIX = bk.object_prefix("Qwen/Qwen3-32B", 2)


def _obj(key, minutes=0, size=32):
    return bk.ObjectInfo(key, size, T0 + timedelta(minutes=minutes))


def _key(worker, h):
    return f"{PREFIX}{worker}@{h:016x}@bfloat16"


def test_prefix_and_counts():
    assert PREFIX == "Qwen_Qwen3-32B@2@"
    assert bk.expected_objects(16384 + 30, 256, 2, False) == 128
    assert bk.expected_objects(16384 + 30, 256, 2, True) == 130
    assert bk.expected_objects(100, 256, 1, False) == 0
    assert bk.expected_hit_tokens(16384 + 30, 256, False) == 16384
    # Every prompt token cached: the engine recomputes the last one.
    assert bk.expected_hit_tokens(16384, 256, False) == 16383
    assert bk.expected_hit_tokens(300, 256, True) == 299


def test_created_since_ignores_old_and_preexisting_objects():
    old = {_key(0, 1): _obj(_key(0, 1), minutes=-60)}
    after = {
        **old,
        _key(0, 2): _obj(_key(0, 2), minutes=1),
        _key(1, 2): _obj(_key(1, 2), minutes=1),
        # Not listed before but written long before the run (listing lag): not ours.
        _key(0, 3): _obj(_key(0, 3), minutes=-30),
    }
    created = bk.created_since(old, after, T0, skew_seconds=120)
    assert sorted(created) == [_key(0, 2), _key(1, 2)]
    assert bk.worker_counts(created) == {"0": 1, "1": 1}


def test_deletion_plan_deletes_only_the_runs_objects():
    others = {_key(w, h): _obj(_key(w, h), minutes=-5) for w in (0, 1) for h in range(10)}
    ours = {_key(w, 100 + h): _obj(_key(w, 100 + h), 1) for w in (0, 1) for h in range(4)}
    current = {**others, **ours}
    plan = bk.deletion_plan(bk.created_since(others, current, T0, 120), 8, PREFIX, current)
    assert plan.refused is None
    assert set(plan.keys) == set(ours)
    assert not set(plan.keys) & set(others)


def test_deletion_plan_refuses_on_count_mismatch():
    ours = {_key(w, h): _obj(_key(w, h), 1) for w in (0, 1) for h in range(5)}
    plan = bk.deletion_plan(ours, 8, PREFIX)
    assert plan.keys == ()
    assert "10 new objects where 8 were expected" in plan.refused
    assert "deleting nothing" in plan.refused


def test_deletion_plan_refuses_nothing_created_and_foreign_prefix():
    assert bk.deletion_plan({}, 8, PREFIX).refused.startswith("the cold request created no")
    stray = {"other@2@0@ab@bfloat16": _obj("other@2@0@ab@bfloat16")}
    assert "lacks the group prefix" in bk.deletion_plan(stray, 1, PREFIX).refused


def test_deletion_plan_skips_keys_already_gone():
    ours = {_key(0, h): _obj(_key(0, h), 1) for h in range(2)}
    plan = bk.deletion_plan(ours, 2, PREFIX, current={_key(0, 1): ours[_key(0, 1)]})
    assert plan.keys == (_key(0, 1),)


def test_document_starts_with_nonce_and_has_the_length():
    doc = document.build("run1", 1000)
    words = doc.split()
    assert words[0] == "kvceph-verify-run1" and len(words) == 1000
    assert document.build("run2", 1000).split()[1:] == words[1:]
    assert document.prompt("run1", 1000).startswith(doc)
    assert document.new_nonce() != document.new_nonce()
    with pytest.raises(ValueError):
        document.build("two words", 10)
