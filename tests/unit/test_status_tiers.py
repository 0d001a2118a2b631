"""status.py's hits per tier (deploys/monitoring/tiers.py): GPU prefix cache, DRAM, S3."""

from __future__ import annotations

from deploys.monitoring import counters, tiers

# LMCache's counters as prometheus_client's MultiProcessCollector renders them into vLLM's
# /metrics (one series per worker; lab/engine metrics.py writes the same), for one process that
# loaded 16384 tokens from S3 (a peer's chunks) and then the same 16384 from DRAM (a repeat);
# TP 2, 64 bytes per token per worker.
LABELS = 'model_name="m",role="worker",served_model_name="m",worker_id="{w}"'
TEXT = "\n".join(
    [
        'vllm:prefix_cache_hits_total{engine="0",model_name="m"} 256.0',
        'vllm:prompt_tokens_by_source_total{engine="0",model_name="m",source="external_kv_transfer"} 32768.0',  # noqa: E501
        "# TYPE lmcache:num_hit_tokens counter",
        *(f"lmcache:num_hit_tokens_total{{{LABELS.format(w=w)}}} 32768.0" for w in (0, 1)),
        "# TYPE lmcache:num_remote_read_bytes counter",
        *(
            f"lmcache:num_remote_read_bytes_total{{{LABELS.format(w=w)}}} {16384.0 * 64}"
            for w in (0, 1)
        ),  # fmt: skip
    ]
)


def test_the_tiers_from_vllm_and_lmcache_counters():
    c = counters.from_text(TEXT)
    assert (c.lmcache_hit_tokens, c.remote_read_bytes) == (32768.0, 16384.0 * 64)
    t = tiers.split(c.local_hits, c.lmcache_hit_tokens, c.remote_read_bytes, 64)
    assert (t.gpu, t.dram, t.s3) == (256.0, 16384.0, 16384.0)
    assert tiers.line(t) == "GPU prefix cache 256, DRAM 16384, S3 16384 tokens"
    assert t.to_dict()["tier_dram_tokens"] == 16384.0


def test_without_lmcaches_counters_dram_and_s3_are_unknown_not_zero():
    # vLLM 0.26 on the H200 without PROMETHEUS_MULTIPROC_DIR (tests/facts/status.EngineAnswers)
    c = counters.from_text(TEXT.split("\n# TYPE")[0])
    t = tiers.split(c.local_hits, c.lmcache_hit_tokens, c.remote_read_bytes, 64)
    assert (t.dram, t.s3) == (None, None)
    assert "DRAM / S3 unknown" in tiers.line(t) and "PROMETHEUS_MULTIPROC_DIR" in tiers.line(t)


def test_a_chunks_whole_bytes_never_make_s3_exceed_the_hits():
    t = tiers.split(0.0, 1000.0, 1024.0 * 64, 64)
    assert (t.dram, t.s3) == (0.0, 1000.0)
    assert tiers.split(0.0, 10.0, 5.0, None).s3 is None  # bytes per token not known yet
