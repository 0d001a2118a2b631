"""LMCache's load limits in the lab engine: the two H200 failures, decided from quantities.

The engine's lookup and load are driven with an in-memory store (no RGW needed). Each case
keeps the config fixed and changes only the request: the outcome follows bytes against the
buffer and fetch time against the timeout, never particular config values.
"""

from __future__ import annotations

import json
import logging
import threading
import time
import urllib.request

import pytest

from kvceph_lab_engine.engine import EngineDead, KVEngine, LoadLimits, object_payload
from kvceph_lab_engine.hashing import ChunkHasher
from kvceph_lab_engine.metrics import Metrics
from kvceph_lab_engine.server import App, make_server

BYTES = 64  # per token per worker, the lab's size
CHUNK = 256
STILL_WAITING = (
    "is still waiting for async lookup after {} seconds, returning 0 lmcache cached tokens so "
    "vllm can recompute"
)
NO_MEMORY = (
    f"Failed to allocate memory block of size {CHUNK * BYTES} because no memory is available"
)


class MemoryStore:
    """HEAD / GET / PUT of the objects a cold request stored (what S3Store offers)."""

    def __init__(self):
        self.objects: dict[str, bytes] = {}

    def head(self, key):
        return len(self.objects.get(key, b""))

    def get_many(self, keys, sizes=None):
        return [self.objects.get(k) for k in keys]

    def put_many(self, items):
        self.objects.update(items)
        return [True] * len(items)


def hasher() -> ChunkHasher:
    """The in-process engines' hasher: the lab model at TP 2, CHUNK tokens, sha256_cbor."""
    return ChunkHasher(
        model="m", world_size=2, kv_dtype="bfloat16", chunk_size=CHUNK,
        save_unfull_chunk=False, algorithm="sha256_cbor", seed="0",
    )  # fmt: skip


def engine(store, **limits) -> KVEngine:
    return KVEngine(
        hasher=hasher(), tp=2, bytes_per_token=BYTES, prefill_ms_per_token=0.0, store=store,
        load_failure_policy="recompute", local_cache_tokens=0, limits=LoadLimits(**limits),
    )  # fmt: skip


def stored(store, tokens):
    """A cold request on another engine wrote the chunks of ``tokens``."""
    cold = engine(store)
    _, chunks = cold.prefill("cold", tokens)
    cold.save("cold", chunks)
    return tokens


@pytest.fixture
def store():
    return MemoryStore()


def doc(n):
    return list(range(1000, 1000 + n))


def test_async_lookup_slower_than_its_timeout_returns_0_hits(store, caplog):
    caplog.set_level(logging.INFO)
    # 2 workers x 4096 tokens x 64 B = 512 KiB at 0.5 MB/s: ~1.05 s, longer than 300 ms.
    limits = dict(async_loading=True, lookup_timeout_ms=300, load_bytes_per_s=5e5)
    tokens = stored(store, doc(4096))
    t0 = time.monotonic()
    result, _ = engine(store, **limits).prefill("cmpl-slow", tokens)
    waited = time.monotonic() - t0
    assert result.claimed == 0 and result.loaded == 0 and result.computed == 4096
    assert f"Request cmpl-slow {STILL_WAITING.format(0)}" in caplog.text
    assert 0.3 <= waited < 0.9  # it gave up at the timeout, not after the ~1.05 s load
    # The same config with a shorter request: the load fits the timeout and hits.
    caplog.clear()
    short = stored(store, doc(512))  # 64 KiB: ~0.13 s
    result, _ = engine(store, **limits).prefill("cmpl-short", short)
    assert result.loaded == 512 - 1 and "still waiting" not in caplog.text
    assert "[req_id=cmpl-short] Retrieved 512 out of 512 required tokens" in caplog.text


def test_buffer_smaller_than_the_request_fails_allocations_then_the_lookup(store, caplog):
    caplog.set_level(logging.INFO)
    # 96 KiB per worker holds 1536 tokens of KV; 4096 tokens need 256 KiB.
    limits = dict(async_loading=True, lookup_timeout_ms=400, cpu_buffer_bytes=96 << 10)
    result, _ = engine(store, **limits).prefill("cmpl-big", stored(store, doc(4096)))
    assert result.loaded == 0 and result.claimed == 0
    assert caplog.text.count(NO_MEMORY) >= 3  # LMCache retries every 0.1 s
    assert STILL_WAITING.format(0) in caplog.text
    caplog.clear()
    result, _ = engine(store, **limits).prefill("cmpl-fits", stored(store, doc(1024)))
    assert result.loaded == 1023 and NO_MEMORY not in caplog.text


def test_sync_loading_without_buffer_room_kills_the_engine(store, caplog):
    caplog.set_level(logging.INFO)
    limits = dict(async_loading=False, blocking_timeout_secs=1, cpu_buffer_bytes=96 << 10)
    e = engine(store, **limits)
    tokens = stored(store, doc(4096))
    t0 = time.monotonic()
    with pytest.raises(EngineDead):
        e.prefill("cmpl-sync", tokens)
    assert time.monotonic() - t0 >= 1.0  # it waited blocking_timeout_secs, as on the H200
    assert NO_MEMORY in caplog.text
    assert "[req_id=cmpl-sync] Retrieved 0 out of 4096 required tokens" in caplog.text
    with pytest.raises(EngineDead):  # every later request fails too
        e.prefill("cmpl-next", doc(10))
    # Synchronous loading within the buffer loads everything.
    ok = engine(store, async_loading=False, cpu_buffer_bytes=1 << 20)
    assert ok.prefill("cmpl-ok", tokens)[0].loaded == 4095


def test_sync_loading_slower_than_blocking_timeout_recomputes(store, caplog):
    limits = dict(async_loading=False, blocking_timeout_secs=1, load_bytes_per_s=2e5)
    result, _ = engine(store, **limits).prefill("cmpl-t", stored(store, doc(4096)))
    assert result.loaded == 0 and result.computed == 4096
    assert "batched get blocking timeout" in caplog.text


def test_a_dead_engine_answers_the_stream_with_an_error_and_health_503(store):
    e = engine(store, async_loading=False, blocking_timeout_secs=1, cpu_buffer_bytes=1024)
    tokens = stored(store, doc(1024))
    app = App(model="m", max_model_len=8192, engine=e, metrics=Metrics("m"), vllm_version="0.33.0")
    died = threading.Event()
    app.on_dead = died.set
    server = make_server("127.0.0.1", 0, app)
    threading.Thread(target=server.serve_forever, daemon=True).start()
    base = f"http://127.0.0.1:{server.server_address[1]}"
    try:
        assert urllib.request.urlopen(f"{base}/health", timeout=5).status == 200
        body = {"prompt": tokens, "max_tokens": 4, "stream": True}
        req = urllib.request.Request(
            f"{base}/v1/completions", json.dumps(body).encode(), {"Content-Type": "a/json"}
        )
        with urllib.request.urlopen(req, timeout=30) as r:
            events = r.read().decode()
        assert "EngineCore encountered an issue" in events and "data: [DONE]" in events
        assert died.is_set()
        with pytest.raises(urllib.error.HTTPError) as err:
            urllib.request.urlopen(f"{base}/health", timeout=5)
        assert err.value.code == 503
    finally:
        server.shutdown()
        server.server_close()


def test_payload_helper_is_what_the_store_holds(store):
    stored(store, doc(256))
    key, data = next(iter(store.objects.items()))
    assert data == object_payload(key, CHUNK * BYTES)
