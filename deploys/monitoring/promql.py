"""figures' definitions as PromQL, over vLLM's own metric names as Prometheus stores them.

The names come from ``deploys/monitoring/counters.py`` (what status.py reads), with the ``_total``
prometheus_client adds to a counter's samples; the labels ``cache_group``, ``host`` and
``engine`` are the scrape targets' (``targets.py``).
"""

from __future__ import annotations

from deploys.monitoring import counters


def _by_source(source: str) -> str:
    return f'{counters.LOADED[0]}_total{{source="{source}"}}'


QUERIES = f"{counters.QUERIES}_total"
HITS = f"{counters.HITS}_total"
LOADED = _by_source(counters.LOADED[1]["source"])
COMPUTED = _by_source(counters.COMPUTED[1]["source"])
GPU_HITS = _by_source("local_cache_hit")  # vLLM's own prefix cache on the accelerator
PROMPT_TOKENS = f"{counters.PROMPT_TOKENS}_total"
REQUESTS = f"{counters.REQUESTS}_total"
TTFT = "vllm:time_to_first_token_seconds"
# The process start every vLLM /metrics carries: prometheus_client's _created of a counter.
STARTED = f"{counters.PROMPT_TOKENS}_created"

# LMCache 0.5.6's own counters (lmcache/observability.py), one series per TP worker, in vLLM's
# /metrics through prometheus_client's multiprocess directory.
LMCACHE_HIT_TOKENS = "lmcache:num_hit_tokens_total"  # any tier: DRAM and S3
LMCACHE_STORED = "lmcache:num_stored_tokens_total"
LMCACHE_REMOTE_WRITES = "lmcache:num_remote_write_requests_total"  # PUTs that succeeded
REMOTE_READ_BYTES = "lmcache:num_remote_read_bytes_total"
REMOTE_WRITE_BYTES = "lmcache:num_remote_write_bytes_total"

ENGINE = "instance, host, engine, cache_group"  # one engine's series
GROUP = "cache_group"


def rate(metric: str, window: str, by: str) -> str:
    return f"sum by ({by}) (rate({metric}[{window}]))"


def hit_ratio(window: str, by: str) -> str:
    """figures.hit_ratio: LMCache's hits over its queries."""
    return f"{rate(HITS, window, by)} / {rate(QUERIES, window, by)}"


def gpu_hit_ratio(window: str, by: str) -> str:
    """vLLM's prefix cache: prompt tokens it served from accelerator memory."""
    return f"{rate(GPU_HITS, window, by)} / {rate(PROMPT_TOKENS, window, by)}"


def reused(window: str, by: str) -> str:
    """figures.reused_tokens: the by-source counter where the engine has it, else its hits."""
    return f"({rate(LOADED, window, by)} or {rate(HITS, window, by)})"


def lmcache_hit_tokens(window: str) -> str:
    """LMCache's hit tokens per cache group: one worker's count per engine (every TP worker
    counts the same tokens)."""
    return f"sum by ({GROUP}) (max by ({ENGINE}) (rate({LMCACHE_HIT_TOKENS}[{window}])))"


def mean_prompt(window: str, by: str) -> str:
    return f"{rate(PROMPT_TOKENS, window, by)} / {rate(REQUESTS, window, by)}"
