"""figures' definitions as PromQL, over vLLM's own metric names as Prometheus stores them.

The names come from ``deploys/status/counters.py`` (what status.py reads), with the ``_total``
prometheus_client adds to a counter's samples; the labels ``cache_group``, ``host`` and
``engine`` are the scrape targets' (``targets.py``).
"""

from __future__ import annotations

from deploys.status import counters


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


def mean_prompt(window: str, by: str) -> str:
    return f"{rate(PROMPT_TOKENS, window, by)} / {rate(REQUESTS, window, by)}"
