"""The lab engine's kvceph remote tier: kvceph_connector's own S3 core, LMCache's load lines."""

from __future__ import annotations

import logging
import sys
from pathlib import Path

import pytest

pytest.importorskip("kvceph_connector.s3core")
sys.path.insert(0, str(Path(__file__).resolve().parents[3] / "connector" / "tests"))

from fake_s3 import FakeS3  # noqa: E402
from kvceph_connector import versions  # noqa: E402

from kvceph_lab_engine import kvceph_store  # noqa: E402

EXTRA = {
    "remote_storage_plugin.kvceph.module_path": "kvceph_connector.lmcache_plugin",
    "remote_storage_plugin.kvceph.class_name": "KvcephConnectorAdapter",
    "kvceph.tls": False,
    "kvceph.timeout_s": 2.0,
}


@pytest.fixture()
def s3(monkeypatch):
    monkeypatch.setenv("AWS_ACCESS_KEY_ID", "KVTEST")
    monkeypatch.setenv("AWS_SECRET_ACCESS_KEY", "kvtest-secret")
    monkeypatch.setattr(versions, "lmcache_version", lambda: "0.5.6")
    server = FakeS3().start()
    yield server
    server.stop()


def lines(caplog) -> str:
    text = "\n".join(r.getMessage() for r in caplog.records)
    caplog.clear()
    return text


def test_the_core_serves_lookups_loads_and_the_crossover(s3, caplog):
    caplog.set_level(logging.INFO)
    store = kvceph_store.create({**EXTRA, "kvceph.endpoint": s3.endpoint}, chunk_size=16)
    log = lines(caplog)
    assert "kvceph connector ready for plugin://kvceph" in log
    assert "min_hit_tokens 0, crc32c check on" in log  # the default since issue 50
    assert "Created remote backend for plugin: kvceph" in log
    assert store.put_many([("a", b"1" * 64), ("b", b"2" * 64), ("c", b"3" * 64)]) == [True] * 3
    assert store.prefix_hits([["a"], ["b"], ["x"], ["c"]], [64] * 4) == 2
    assert store.get_many(["a", "x"], [64, 64]) == [b"1" * 64, None]
    # A body altered in the bucket (same size, the stored crc32c kept) is a miss, counted.
    s3.objects[s3.name("b")] = (b"X" * 64, s3.objects[s3.name("b")][1])
    assert store.get_many(["a", "b"], [64, 64]) == [b"1" * 64, None]
    assert (store.core.crc32c_checked, store.core.crc32c_refused) == (3, 1)
    assert "kvceph: crc32c since start: refused 1 GET bodies of " in lines(caplog)
    crossover = kvceph_store.create(
        {**EXTRA, "kvceph.endpoint": s3.endpoint, "kvceph.min_hit_tokens": 48}, chunk_size=16
    )
    gets = s3.count("GET")
    assert crossover.prefix_hits([["a"], ["b"], ["x"]], [64] * 3) == 0  # 32 < 48 tokens
    assert crossover.prefix_hits([["a"], ["b"], ["c"]], [64] * 3) == 3
    assert s3.count("GET") == gets


@pytest.mark.parametrize(
    ("change", "line"),
    [
        (
            {"remote_storage_plugin.kvceph.module_path": "kvceph_connector.nope"},
            "Failed to load remote connector kvceph due to import/attribute error: "
            "No module named 'kvceph_connector.nope'",
        ),
        ({"kvceph.conections": 4}, "unknown extra_config key kvceph.conections"),
    ],
)
def test_a_failed_load_is_lmcaches_lines_and_no_remote_tier(s3, caplog, change, line):
    caplog.set_level(logging.INFO)
    assert kvceph_store.create({**EXTRA, "kvceph.endpoint": s3.endpoint, **change}, 16) is None
    log = lines(caplog)
    assert line in log
    assert "Failed to initialize/re-establish remote connection: " in log
    assert "Created remote backend for plugin: kvceph" in log  # LMCache 0.5.6 says it anyway


def test_unsupported_lmcache_is_not_loaded(s3, caplog, monkeypatch):
    monkeypatch.setattr(versions, "lmcache_version", lambda: "0.6.0")
    assert kvceph_store.create({**EXTRA, "kvceph.endpoint": s3.endpoint}, 16) is None
    assert "supports LMCache 0.5.6, not the installed 0.6.0" in lines(caplog)


def test_the_engine_stores_and_loads_through_the_core(s3):
    from kvceph_lab_engine.engine import KVEngine, LoadLimits
    from kvceph_lab_engine.hashing import ChunkHasher

    def engine(min_hit=0):
        hasher = ChunkHasher(
            model="/models/m", world_size=2, kv_dtype="bfloat16", chunk_size=16,
            save_unfull_chunk=False, algorithm="sha256_cbor", seed="0",
        )  # fmt: skip
        extra = {**EXTRA, "kvceph.endpoint": s3.endpoint, "kvceph.min_hit_tokens": min_hit}
        return KVEngine(
            hasher=hasher, tp=2, bytes_per_token=64, prefill_ms_per_token=0.0,
            store=kvceph_store.create(extra, 16), load_failure_policy="recompute",
            local_cache_tokens=0, limits=LoadLimits(),
        )  # fmt: skip

    tokens = list(range(100, 164))  # 4 chunks of 16
    cold = engine()
    result, chunks = cold.prefill("cold", tokens)
    assert result.loaded == 0 and cold.save("cold", chunks) == 4
    assert len(s3.objects) == 8  # 4 chunks x 2 workers, LMCache's names
    assert all(name.startswith("/_models_m@2@") for name in s3.objects)
    warm, _ = engine().prefill("warm", tokens)
    assert warm.loaded == 63  # the last token is recomputed (vLLM's rule)
    gets = s3.count("GET")
    skipped, _ = engine(min_hit=128).prefill("below", tokens)  # 64 tokens < 128
    assert skipped.loaded == 0 and skipped.computed == 64 and s3.count("GET") == gets


def _engine(s3, min_hit=0, skip_short=False, local_cpu=None):
    from kvceph_lab_engine.engine import KVEngine, LoadLimits
    from kvceph_lab_engine.hashing import ChunkHasher

    hasher = ChunkHasher(
        model="/models/m", world_size=2, kv_dtype="bfloat16", chunk_size=16,
        save_unfull_chunk=False, algorithm="sha256_cbor", seed="0",
    )  # fmt: skip
    extra = {**EXTRA, "kvceph.endpoint": s3.endpoint, "kvceph.min_hit_tokens": min_hit}
    if skip_short:
        extra["kvceph.skip_short_puts"] = True
    return KVEngine(
        hasher=hasher, tp=2, bytes_per_token=64, prefill_ms_per_token=0.0,
        store=kvceph_store.create(extra, 16), load_failure_policy="recompute",
        local_cache_tokens=0, limits=LoadLimits(), local_cpu=local_cpu,
    )  # fmt: skip


def _serve(engine, rid, tokens):
    result, chunks = engine.prefill(rid, tokens)
    engine.save(rid, chunks)
    return result


def test_skip_short_puts_writes_only_requests_at_or_above_the_crossover(s3, caplog):
    caplog.set_level(logging.INFO)
    short, long = list(range(100, 132)), list(range(100, 164))  # 2 and 4 chunks of 16
    on = _engine(s3, min_hit=64, skip_short=True)
    assert "min_hit_tokens 64, skip_short_puts" in lines(caplog)
    _serve(on, "short", short)
    assert len(s3.objects) == 0  # 2 chunks < 4: a hit of them would report 0 anyway
    assert "since start: skipped 1, stored 0" in lines(caplog)  # then at most once a minute
    _serve(on, "long", long)
    assert len(s3.objects) == 8  # 4 chunks x 2 workers, the short prefix included
    s3.objects.clear()
    off = _engine(s3, min_hit=64)
    _serve(off, "short", short)
    assert len(s3.objects) == 4


def test_skip_short_puts_with_the_dram_tier_leaves_the_prefix_out(s3):
    """The hazard that keeps it opt-in (docs/design.md): LMCache stores a request's chunks only
    after its LMCache hit, DRAM included, and asks the connector only about the chunks after
    the DRAM hit. A short prefix kept in DRAM is never put when a longer request extends it."""
    from kvceph_lab_engine.engine import LocalCpuTier

    short, long = list(range(100, 132)), list(range(100, 196))  # 2 and 6 chunks of 16
    node = _engine(s3, min_hit=64, skip_short=True, local_cpu=LocalCpuTier(1 << 20))
    _serve(node, "short", short)
    assert len(s3.objects) == 0
    assert _serve(node, "long", long).dram_loaded == 32
    assert len(s3.objects) == 8  # chunks 3-6 only: chunks 1-2 stayed in DRAM
    other = _engine(s3, min_hit=64)
    assert _serve(other, "elsewhere", long).loaded == 0  # the bucket's chain breaks at chunk 1
