"""The one definition of "hit", "saved" and "pays", in Python (status.py) and in PromQL (rules).

Both read the same vLLM counters (``deploys/monitoring/counters.py`` names them):

- **hit ratio** of LMCache = tokens it claimed / tokens it was asked for
  (``vllm:external_prefix_cache_hits`` / ``_queries``);
- **reused tokens** = tokens whose KV really came through the connector
  (``prompt_tokens_by_source{source="external_kv_transfer"}``), else the claimed hits (engines
  without the by-source counter);
- **saved** GPU seconds = reused tokens x prefill seconds per token at the mean prompt length,
  off the cache group's prefill curve ``a n + b n^2`` (``deploys/tier/crossover.py``), so per token
  ``a + b n``;
- **pays**: the TTFT actually spent is below what the same prompts would have cost cold. What
  was not reused was computed, so a TTFT sum above ``(computed + reused) x seconds per token``
  means loading cost more than the prefill it replaced: the tier no longer pays. The ratio is
  ``ttft_vs_cold``; 1.0 is the break-even. Queueing also lands in TTFT, hence the margin.

status.py computes its figures since each engine's start; Prometheus over a window (``rate``):
the definitions are the same, the periods differ.
"""

from __future__ import annotations

# TTFT this far above the cold estimate before "does not pay": queueing adds to TTFT, and the
# prefill curve is a configured figure unless verify.py measured it.
PAYS_MARGIN = 1.2
# ...and only where the tier carries this share of the prompt tokens (a few hits move nothing).
PAYS_MIN_REUSED_SHARE = 0.2


def hit_ratio(hits: float | None, queries: float | None) -> float | None:
    """LMCache's hit tokens over the tokens it was asked for (None before any query)."""
    if not queries or hits is None:
        return None
    return hits / queries


def reused_tokens(loaded: float | None, hits: float | None) -> float | None:
    """Tokens the cache spared the GPU: loaded when the engine says so, else the hits."""
    return loaded if loaded is not None else hits


def saved_seconds(reused: float | None, seconds_per_token: float) -> float | None:
    """GPU seconds not spent on prefill: reused tokens x seconds per token."""
    if reused is None:
        return None
    return reused * seconds_per_token


def ttft_vs_cold(
    ttft_seconds: float, computed: float, reused: float, seconds_per_token: float
) -> float | None:
    """TTFT spent over what the same prompts cost cold (> 1: loading cost more than it saved)."""
    cold = (computed + reused) * seconds_per_token
    return ttft_seconds / cold if cold > 0 else None


def pays(ratio: float | None, reused_share: float | None) -> bool | None:
    """False when the tier carries enough of the prompts and TTFT is above cold (with margin);
    None when there is too little reuse to say."""
    if ratio is None or reused_share is None or reused_share < PAYS_MIN_REUSED_SHARE:
        return None
    return ratio <= PAYS_MARGIN
