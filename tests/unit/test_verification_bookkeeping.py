"""Object-key bookkeeping: counts per document and worker; the document is unique."""

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


def test_worker_counts():
    keys = [_key(0, 2), _key(1, 2), _key(0, 3), "bad@key"]
    assert bk.worker_counts(keys) == {"0": 2, "1": 1, "?": 1}


def test_document_starts_with_nonce_and_has_the_length():
    doc = document.build("run1", 1000)
    words = doc.split()
    assert words[0] == "kvceph-verify-run1" and len(words) == 1000
    assert document.build("run2", 1000).split()[1:] == words[1:]
    assert document.prompt("run1", 1000).startswith(doc)
    assert document.new_nonce() != document.new_nonce()
    with pytest.raises(ValueError):
        document.build("two words", 10)
