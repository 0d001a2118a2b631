"""An engine's cache counters since its start, from vLLM's own ``/metrics``.

vLLM 0.26 (vllm/v1/metrics/loggers.py, PrometheusStatLogger) counts, per engine process:

- ``vllm:external_prefix_cache_queries`` / ``_hits``: tokens the KV connector (LMCache) was
  asked for, and the tokens it claimed to have (its lookup);
- ``vllm:prompt_tokens_by_source{source="external_kv_transfer"}``: tokens whose KV really came
  through the connector (a claimed chunk that failed to load is recomputed, not counted here);
- ``vllm:prefix_cache_queries`` / ``_hits``: vLLM's own GPU prefix cache. The real engine adds
  to its queries each time the scheduler looks at a request, also while the request waits for
  an asynchronous load: on the H200 one 16k-token warm request added 3.7 M queries (recorded
  in tests/facts/status.EngineAnswers/vllm-0.26-h200-warm-async-timeout.json), so its ratio
  is shown, never used for savings;
- ``vllm:request_success{finished_reason}``: finished requests; ``vllm:prompt_tokens``.

LMCache's own counters (``lmcache:num_hit_tokens``, ``lmcache:num_remote_read_bytes``, worker 0)
split the hits by tier (deploys/monitoring/tiers.py) where /metrics carries them.

Counters reset when the engine restarts: every figure here is "since the unit's start".
"""

from __future__ import annotations

from dataclasses import asdict, dataclass

from deploys.monitoring import figures, metrics, tiers

# The counters, by what status.py calls them (names without the _total suffix prometheus_client
# adds; metrics.total reads either).
QUERIES = "vllm:external_prefix_cache_queries"
HITS = "vllm:external_prefix_cache_hits"
LOADED = ("vllm:prompt_tokens_by_source", {"source": "external_kv_transfer"})
COMPUTED = ("vllm:prompt_tokens_by_source", {"source": "local_compute"})
LOCAL_QUERIES = "vllm:prefix_cache_queries"
LOCAL_HITS = "vllm:prefix_cache_hits"
PROMPT_TOKENS = "vllm:prompt_tokens"
REQUESTS = "vllm:request_success"


@dataclass(frozen=True)
class Counters:
    """One engine's counters; None where its /metrics lacks the metric."""

    requests: float | None
    prompt_tokens: float | None
    external_queries: float | None
    external_hits: float | None
    loaded_tokens: float | None
    computed_tokens: float | None
    local_queries: float | None
    local_hits: float | None
    lmcache_hit_tokens: float | None = None  # every LMCache tier (tiers.LMCACHE_HITS)
    remote_read_bytes: float | None = None  # worker 0's GETs (tiers.REMOTE_READ_BYTES)

    @property
    def hit_ratio(self) -> float | None:
        """LMCache's hit tokens over the tokens it was asked for (figures.hit_ratio)."""
        return figures.hit_ratio(self.external_hits, self.external_queries)

    @property
    def reused_tokens(self) -> float | None:
        """Tokens the cache spared the GPU (figures.reused_tokens)."""
        return figures.reused_tokens(self.loaded_tokens, self.external_hits)

    @property
    def mean_prompt_tokens(self) -> float | None:
        """Prompt tokens per finished request (the length a prefill figure is read at)."""
        if not self.requests or self.prompt_tokens is None:
            return None
        return self.prompt_tokens / self.requests

    def to_dict(self) -> dict:
        return {
            **asdict(self),
            "hit_ratio": self.hit_ratio,
            "reused_tokens": self.reused_tokens,
            "mean_prompt_tokens": self.mean_prompt_tokens,
        }


def from_text(text: str) -> Counters:
    """Counters from a /metrics exposition (any label order; engines of one process summed)."""
    samples = metrics.parse(text)

    def read(what) -> float | None:
        name, labels = (what, {}) if isinstance(what, str) else what
        return metrics.total(samples, name, **labels)

    return Counters(
        requests=read(REQUESTS),
        prompt_tokens=read(PROMPT_TOKENS),
        external_queries=read(QUERIES),
        external_hits=read(HITS),
        loaded_tokens=read(LOADED),
        computed_tokens=read(COMPUTED),
        local_queries=read(LOCAL_QUERIES),
        local_hits=read(LOCAL_HITS),
        lmcache_hit_tokens=read((tiers.LMCACHE_HITS, tiers.WORKER)),
        remote_read_bytes=read((tiers.REMOTE_READ_BYTES, tiers.WORKER)),
    )


def as_dict(c: Counters) -> dict:
    """The raw counters (a fact's value: plain JSON)."""
    return asdict(c)


def from_dict(d: dict) -> Counters:
    return Counters(**{f: d.get(f) for f in Counters.__dataclass_fields__})


def missing(c: Counters) -> list[str]:
    """The counters status.py needs that this /metrics does not carry (an older or foreign
    engine): said in the output instead of showing zeros."""
    needed = {"external_queries": QUERIES, "external_hits": HITS, "requests": REQUESTS}
    return [name for field, name in needed.items() if getattr(c, field) is None]
