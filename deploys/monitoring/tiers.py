"""Where an engine's reused tokens came from: vLLM's GPU prefix cache, LMCache's DRAM tier, S3.

- GPU prefix cache: ``vllm:prefix_cache_hits`` (vLLM's own counter).
- Every LMCache tier together: ``lmcache:num_hit_tokens`` (LMCache 0.5.6
  lmcache/observability.py: tokens a retrieve loaded), read on worker 0 (each worker loads the
  same tokens, its own share of their bytes).
- S3: ``lmcache:num_remote_read_bytes`` on worker 0 over the KV bytes per token per worker.
  LMCache wraps every remote connector in its InstrumentedRemoteConnector, kvceph's plugin
  included (connector/tests/test_lmcache_plugin.py), so this counts either connector's GETs.
- DRAM: LMCache's hits less the S3 share.

LMCache's counters live in its worker processes: they reach vLLM's /metrics only when the unit
gives every process one PROMETHEUS_MULTIPROC_DIR. Without them the DRAM and S3 figures are None
(shown as missing, never as 0).
"""

from __future__ import annotations

from dataclasses import dataclass

LMCACHE_HITS = "lmcache:num_hit_tokens"
REMOTE_READ_BYTES = "lmcache:num_remote_read_bytes"
WORKER = {"worker_id": "0"}


@dataclass(frozen=True)
class Tiers:
    """Tokens each tier served since the engine started; None where the counter is absent."""

    gpu: float | None
    dram: float | None
    s3: float | None

    def to_dict(self, prefix: str = "tier_") -> dict:
        return {f"{prefix}gpu_tokens": self.gpu, f"{prefix}dram_tokens": self.dram,
                f"{prefix}s3_tokens": self.s3}  # fmt: skip


def split(
    gpu_hits: float | None,
    lmcache_hits: float | None,
    remote_read_bytes: float | None,
    kv_bytes_per_token: int | None,
) -> Tiers:
    """The three tiers' tokens from the counters.

    + gpu_hits: vllm:prefix_cache_hits
    + lmcache_hits: lmcache:num_hit_tokens, worker 0
    + remote_read_bytes: lmcache:num_remote_read_bytes, worker 0
    + kv_bytes_per_token: one worker's KV bytes per token (settings.lmcache.kv_bytes_per_token)
    """
    s3 = None
    if remote_read_bytes is not None and kv_bytes_per_token:
        s3 = remote_read_bytes / kv_bytes_per_token
    dram = None
    if lmcache_hits is not None and s3 is not None:
        # A chunk read from S3 counts its whole bytes; its last token may be recomputed: clamp.
        dram = max(0.0, lmcache_hits - s3)
        s3 = min(s3, lmcache_hits)
    return Tiers(gpu_hits, dram, s3)


def line(t: Tiers) -> str:
    """One line for the table: each tier's tokens, or why it is not known."""
    if t.dram is None:
        known = f"GPU prefix cache {t.gpu:.0f}" if t.gpu is not None else "GPU prefix cache ?"
        return (
            f"{known}; DRAM / S3 unknown: LMCache's counters are not on /metrics "
            "(PROMETHEUS_MULTIPROC_DIR)"
        )
    gpu = f"{t.gpu:.0f}" if t.gpu is not None else "?"
    return f"GPU prefix cache {gpu}, DRAM {t.dram:.0f}, S3 {t.s3:.0f} tokens"
