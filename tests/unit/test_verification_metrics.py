"""Prometheus exposition parsing and the KV hit counters."""
# ruff: noqa: E501 (recorded exposition lines are long)

import pytest

from deploys.monitoring import metrics

# Shaped like prometheus_client output from vLLM 0.33 (two engines, _created samples, help
# lines with braces), plus a timestamped and an escaped-label sample.
VLLM = r"""
# HELP vllm:prompt_tokens_by_source_total Number of prompt tokens by source.
# TYPE vllm:prompt_tokens_by_source_total counter
vllm:prompt_tokens_by_source_total{engine="0",model_name="Qwen/Qwen3-32B",source="local_compute"} 16640.0
vllm:prompt_tokens_by_source_total{engine="0",model_name="Qwen/Qwen3-32B",source="external_kv_transfer"} 16384.0
vllm:prompt_tokens_by_source_total{engine="1",model_name="Qwen/Qwen3-32B",source="external_kv_transfer"} 256.0
vllm:prompt_tokens_by_source_created{engine="0",model_name="Qwen/Qwen3-32B",source="external_kv_transfer"} 1.7e+09
# HELP vllm:external_prefix_cache_hits_total External prefix cache hits {tokens}.
# TYPE vllm:external_prefix_cache_hits_total counter
vllm:external_prefix_cache_hits_total{engine="0",model_name="Qwen/Qwen3-32B"} 16384.0 1700000000000
vllm:time_to_first_token_seconds_bucket{engine="0",le="+Inf",model_name="Qwen/Qwen3-32B"} 3.0
vllm:time_to_first_token_seconds_sum{engine="0",model_name="Qwen/Qwen3-32B"} NaN
weird{path="a \"quoted\" \\ value\n"} 1
garbage line without value
"""


def test_parse_labels_values_and_escapes():
    samples = metrics.parse(VLLM)
    weird = next(s for s in samples if s.name == "weird")
    assert weird.labels == {"path": 'a "quoted" \\ value\n'}
    inf = next(s for s in samples if s.name.endswith("_bucket"))
    assert inf.labels["le"] == "+Inf" and inf.value == 3.0
    assert not any(s.name == "garbage" for s in samples)


def test_total_sums_engines_and_filters_labels():
    samples = metrics.parse(VLLM)
    assert (
        metrics.total(samples, "vllm:prompt_tokens_by_source", source="external_kv_transfer")
        == 16640
    )
    assert (
        metrics.total(samples, "vllm:prompt_tokens_by_source_total", source="local_compute")
        == 16640
    )
    assert metrics.total(samples, "vllm:nothing") is None


def test_hit_tokens_prefers_by_source_then_falls_back():
    hit = metrics.hit_tokens(metrics.parse(VLLM))
    assert hit.metric == 'vllm:prompt_tokens_by_source{source="external_kv_transfer"}'
    assert hit.value == 16640
    older = "\n".join(x for x in VLLM.splitlines() if "by_source" not in x)
    hit = metrics.hit_tokens(metrics.parse(older))
    assert hit.metric == "vllm:external_prefix_cache_hits" and hit.value == 16384
    assert metrics.hit_tokens(metrics.parse("up 1\n")) is None


def test_counter_without_total_suffix():
    text = 'vllm:external_prefix_cache_hits{model_name="m"} 7\n'
    assert metrics.hit_tokens(metrics.parse(text)).value == 7


@pytest.mark.parametrize(
    ("before", "after", "delta"),
    [
        (
            'vllm:external_prefix_cache_hits_total{a="1"} 100',
            'vllm:external_prefix_cache_hits_total{a="1"} 612',
            512,
        ),
        ("", 'vllm:external_prefix_cache_hits_total{a="1"} 5', None),
    ],
)
def test_hit_delta(before, after, delta):
    _, d = metrics.hit_delta(metrics.parse(before), metrics.parse(after))
    assert d == delta
