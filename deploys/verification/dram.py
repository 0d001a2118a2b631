"""verify.py's DRAM step: a same-node repeat, no restart, served by LMCache's local CPU tier.

vLLM's own GPU prefix cache would answer a plain repeat before LMCache is asked, so the repeat
carries a ``cache_salt`` unique to the run: vLLM mixes it into the first block's hash (its
prefix cache misses), while LMCache 0.5.6's LMCacheConnectorV1 keys chunks by tokens alone
(lmcache/v1/token_database.py; only the multiprocess server reads the salt), so LMCache's DRAM
tier answers. This is a normal, authenticated /v1 request on a production engine.

Why not ``POST /reset_prefix_cache``: it exists only with VLLM_SERVER_DEV_MODE=1, and vLLM's
API key guards only /v1, /v2 and /inference (its AuthenticationMiddleware): dev mode would
open /reset_prefix_cache, /sleep, /wake_up and /collective_rpc to anyone who reaches the port.
hw/h200/measure.py uses it on a loaned machine only.
"""

from __future__ import annotations

from deploys.monitoring import metrics
from deploys.monitoring.metrics import Sample
from deploys.verification.verdicts import FAIL, PASS, Verdict, _hit

# vLLM's GPU prefix cache hits and LMCache's remote reads (lmcache/observability.py, 0.5.6;
# they reach /metrics only with PROMETHEUS_MULTIPROC_DIR shared by the unit's processes).
GPU_HITS = "vllm:prefix_cache_hits"
REMOTE_READ_BYTES = "lmcache:num_remote_read_bytes"


def salt(nonce: str) -> str:
    """The run's cache_salt: new to every engine's GPU prefix cache."""
    return f"kvceph-verify-{nonce}"


def delta(before: list[Sample], after: list[Sample], name: str) -> float | None:
    """How much counter ``name`` grew between two scrapes; None when it is not exported."""
    a, b = metrics.total(before, name), metrics.total(after, name)
    return None if a is None or b is None else max(0.0, b - a)


def repeat(
    *,
    hit: float | None,
    expected_hit: int,
    metric: str | None,
    gpu_hit: float | None,
    remote_read: float | None,
    ttft: float | None,
    cold_ttft: float | None,
    ratio: float,
    kv_bytes: int,
) -> Verdict:
    """The same document again on the same engine: every chunk from the node's DRAM.

    + hit: tokens loaded through the KV connector (metrics delta)
    + gpu_hit: tokens vLLM's GPU prefix cache served (must be 0: the salt)
    + remote_read: bytes LMCache read from S3 (None: not exported, or kvceph's connector)
    + ratio: the repeat's TTFT must be at most cold x this (kvceph_verify_dram_ratio)
    + kv_bytes: the document's KV in the bucket (for the message)
    """
    if gpu_hit:
        return Verdict(
            FAIL,
            f"vLLM's GPU prefix cache served {gpu_hit:.0f} tokens although the repeat carried "
            "a new cache_salt: this engine ignores cache_salt (vLLM before 0.9?); the DRAM tier "
            "cannot be told apart",
        )
    partial = _hit(hit, expected_hit, metric)
    if partial:
        return partial
    if not hit:
        return Verdict(
            FAIL,
            f"no tokens loaded on a same-node repeat ({metric} +0): the node's DRAM tier did not "
            f"hold the document's {kv_bytes / 1e6:.1f} MB of KV; check local_cpu: true and "
            "max_local_cpu_size in /etc/kvceph/lmcache.yaml (kvceph_lmcache_local_cpu)",
        )
    if remote_read:
        return Verdict(
            FAIL,
            f"{hit:.0f} tokens loaded, but {remote_read / 1e6:.1f} MB read from S3 "
            f"({REMOTE_READ_BYTES}): the DRAM tier had evicted the document; raise "
            "kvceph_lmcache_max_local_cpu_size or lower kvceph_verify_document_tokens",
        )
    if not ttft or not cold_ttft:
        return Verdict(FAIL, "no TTFT measured (no token streamed)")
    r = ttft / cold_ttft
    source = (
        "no S3 reads"
        if remote_read is not None
        else "LMCache's counters not on /metrics: judged by TTFT"
    )
    figures = (
        f"{hit:.0f} tokens loaded ({source}); TTFT {ttft:.3f}s vs cold {cold_ttft:.3f}s (x{r:.3f})"
    )
    if r > ratio:
        return Verdict(
            FAIL,
            f"{figures}: above x{ratio} (kvceph_verify_dram_ratio): a DRAM hit this slow is "
            "not served from DRAM (LMCache read S3, or the host is swapping)",
        )
    return Verdict(PASS, figures)
