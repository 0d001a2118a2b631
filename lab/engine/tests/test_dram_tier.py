"""The DRAM tier (local_cpu: true) as LMCache 0.5.6 runs it: hits faster than S3's, evicted
under max_local_cpu_size, gone with the process, counted apart from S3 reads.

Driven in process with test_limits' in-memory store; time from the simulated bandwidth.
"""

from __future__ import annotations

from test_limits import BYTES, CHUNK, MemoryStore, doc, hasher, stored

from kvceph_lab_engine.engine import (
    DRAM_SPEEDUP,
    KVEngine,
    LoadLimits,
    LocalCpuTier,
    transfer_seconds,
)
from kvceph_lab_engine.metrics import Metrics

RATE = 2e6  # bytes/s, the lab's simulated S3 bandwidth (group_data/lab.py)


def engine(store, dram_bytes, **limits) -> KVEngine:
    return KVEngine(
        hasher=hasher(), tp=2, bytes_per_token=BYTES, prefill_ms_per_token=0.0, store=store,
        local_cpu=LocalCpuTier(dram_bytes), load_failure_policy="recompute",
        local_cache_tokens=0, limits=LoadLimits(load_bytes_per_s=RATE, **limits),
    )  # fmt: skip


def run(e, tokens):
    result, chunks = e.prefill("r", tokens)
    e.save("r", chunks)
    return result


def test_a_same_node_repeat_loads_from_dram_faster_than_s3_and_reads_nothing():
    store = MemoryStore()
    tokens = doc(24 * CHUNK + 1)
    e = engine(store, dram_bytes=1 << 22)
    cold = run(e, tokens)
    assert cold.loaded == 0 and len(store.objects) == 48  # every chunk still went to S3
    repeat = run(e, tokens)
    assert repeat.loaded == repeat.dram_loaded == 24 * CHUNK and repeat.remote_read_bytes == 0
    # A fresh process (a restart) has an empty DRAM tier: the same prompt comes from S3.
    restarted = engine(store, dram_bytes=1 << 22)
    warm = run(restarted, tokens)
    assert warm.loaded == 24 * CHUNK and warm.dram_loaded == 0
    assert warm.remote_read_bytes == 24 * CHUNK * BYTES * 2
    # 0.39 s from S3 at the simulated bandwidth, a tenth of that from DRAM (+ the lookup).
    assert warm.load_seconds >= warm.remote_read_bytes / RATE
    assert repeat.load_seconds < warm.load_seconds


def test_dram_chunks_take_a_tenth_of_the_s3_time():
    assert DRAM_SPEEDUP == 10.0  # the low end of the H200's 11-24x
    assert transfer_seconds(1000, 0, 2, 2e3) == 1.0
    assert transfer_seconds(0, 1000, 2, 2e3) == 0.1
    assert transfer_seconds(500, 500, 2, 2e3) == 0.55


def test_the_dram_tier_evicts_under_its_size():
    store = MemoryStore()
    first, second = doc(4 * CHUNK), list(range(50_000, 50_000 + 4 * CHUNK))
    # Room for 4 chunks of both workers: the second document evicts the first.
    e = engine(store, dram_bytes=4 * CHUNK * BYTES * 2)
    run(e, first)
    run(e, second)
    again = run(e, first)
    assert again.dram_loaded == 0 and again.loaded == 3 * CHUNK + CHUNK - 1
    assert again.remote_read_bytes == 4 * CHUNK * BYTES * 2


def test_async_loads_are_not_written_back_sync_loads_are():
    store = MemoryStore()
    tokens = stored(store, doc(4 * CHUNK + 1))
    for async_loading, back in ((True, False), (False, True)):
        e = engine(store, dram_bytes=1 << 20, async_loading=async_loading)
        run(e, tokens)  # from S3
        assert (run(e, tokens).dram_loaded == 4 * CHUNK) is back


def test_lmcache_counters_split_dram_from_s3():
    m = Metrics("m", lmcache={"model_name": "m", "served_model_name": ""}, workers=2)
    m.record_prefill(prompt=1025, local_hit=0, claimed=1024, loaded=1024, computed=1,
                     remote_read_bytes=1024 * BYTES * 2)  # fmt: skip
    m.record_prefill(prompt=1025, local_hit=0, claimed=1024, loaded=1024, computed=1)
    text = m.render()
    labels = 'model_name="m",role="worker",served_model_name="",worker_id="1"'
    assert f"lmcache:num_hit_tokens_total{{{labels}}} 2048.0" in text
    assert f"lmcache:num_remote_read_bytes_total{{{labels}}} {1024.0 * BYTES}" in text
    assert "lmcache:" not in Metrics("m").render()  # no multiprocess dir: vLLM shows none


class DownStore(MemoryStore):
    """S3 down: every PUT fails (and the objects stored before stay unreadable)."""

    def get_many(self, keys, sizes=None):
        return [None] * len(keys)

    def put_many(self, items):
        return [False] * len(items)


def test_s3_down_stores_keep_counting_remote_writes_stop_while_dram_hits():
    """What KvcephS3Down reads (deploys/monitoring/rules.py): LMCache's stored tokens grow, its
    remote writes (counted only after a PUT succeeded) do not, while DRAM still hits."""
    labels = {"model_name": "m", "served_model_name": ""}
    m = Metrics("m", lmcache=labels, workers=2)
    up = engine(MemoryStore(), dram_bytes=1 << 22)
    up.save("r", up.prefill("r", doc(4 * CHUNK + 1))[1], m)
    w1 = 'model_name="m",role="worker",served_model_name="",worker_id="1"'
    assert f"lmcache:num_stored_tokens_total{{{w1}}} {4.0 * CHUNK}" in m.render()
    assert f"lmcache:num_remote_write_requests_total{{{w1}}} 4.0" in m.render()
    assert f"lmcache:num_remote_write_bytes_total{{{w1}}} {4.0 * CHUNK * BYTES}" in m.render()
    down = engine(DownStore(), dram_bytes=1 << 22)
    tokens = doc(4 * CHUNK + 1)
    _, chunks = down.prefill("r", tokens)
    down.save("r", chunks, m)
    assert down.prefill("r", tokens)[0].dram_loaded == 4 * CHUNK  # DRAM serves the repeat
    text = m.render()
    assert f"lmcache:num_stored_tokens_total{{{w1}}} {8.0 * CHUNK}" in text
    assert f"lmcache:num_remote_write_requests_total{{{w1}}} 4.0" in text


class CrossoverStore(MemoryStore):
    """kvceph's connector as the lookup sees it: the remote hits, 0 below min_hit_tokens."""

    def __init__(self, min_hit_tokens):
        super().__init__()
        self.min_hit_tokens = min_hit_tokens

    def prefix_hits(self, chunk_keys, sizes):
        hits = 0
        for keys, want in zip(chunk_keys, sizes, strict=True):
            if not all(self.head(k) == want for k in keys):
                break
            hits += 1
        return 0 if 0 < hits * CHUNK < self.min_hit_tokens else hits


def test_the_crossover_gates_the_remote_tier_only():
    store = CrossoverStore(min_hit_tokens=8 * CHUNK)
    tokens = doc(4 * CHUNK + 1)  # below the crossover
    e = engine(store, dram_bytes=1 << 22)
    run(e, tokens)
    assert run(e, tokens).dram_loaded == 4 * CHUNK  # a DRAM hit always pays
    assert run(engine(store, dram_bytes=1 << 22), tokens).loaded == 0  # S3's is skipped


def test_a_cache_salt_misses_the_gpu_prefix_cache_but_not_lmcache():
    """vLLM mixes cache_salt into its prefix cache's first block; LMCache 0.5.6 hashes tokens
    only: a repeat with a fresh salt is served by the DRAM tier (verify.py's DRAM step)."""
    store = MemoryStore()
    tokens = doc(8 * CHUNK + 1)
    e = engine(store, dram_bytes=1 << 22)
    e.local = type(e.local)(1 << 16)  # GPU prefix caching on
    run(e, tokens)
    again = run(e, tokens)
    assert again.local_hit == 8 * CHUNK and again.loaded == 0  # the GPU prefix cache answered
    salted, _ = e.prefill("r", tokens, salt="verify-1")
    assert salted.local_hit == 0 and salted.loaded == salted.dram_loaded == 8 * CHUNK
    assert salted.remote_read_bytes == 0
    # the same salt again: the GPU prefix cache has it now
    assert e.prefill("r", tokens, salt="verify-1")[0].local_hit == 8 * CHUNK
    assert e.prefill("r", tokens, salt="verify-2")[0].local_hit == 0
