"""Inference config: a changed cache-key setting warns that cached objects become unreachable."""

from __future__ import annotations

import pytest
from fake_deploy import fake_facts
from fake_deploy import run as _run


def _settings(host: str = "@fake/gpu1", **data):
    from deploys import settings

    layout = fake_facts.Layout("fake_converged", converged=True)
    merged = {**layout.merged_data(host), **data}
    return settings.load(merged, host, layout.host_groups(host))


def _in_use(me) -> dict:
    """CacheKeyInUse as the host's files read back after a run with settings ``me``."""
    from deploys import render
    from deploys.facts.engine import CacheKeyInUse

    pattern = __import__("re").compile(
        r"^(chunk_size|pre_caching_hash_algorithm):|^PYTHONHASHSEED=|^ExecStart="
    )
    texts = (render.lmcache_yaml(me), render.env_file(me, "d" * 64), render.unit(me))
    lines = [line for text in texts for line in text.splitlines() if pattern.match(line)]
    return CacheKeyInUse().process(lines)


def test_cache_key_in_use_reads_the_rendered_files():
    me = _settings()
    assert _in_use(me) == {
        "chunk_size": str(me.lmcache.chunk_size),
        "pre_caching_hash_algorithm": me.lmcache.hash_algorithm,
        "PYTHONHASHSEED": str(me.engine.python_hash_seed),
        "model": me.engine.model,
        "tensor_parallel_size": str(me.engine.tensor_parallel_size),
        "kv_dtype": me.engine.kv_dtype,
    }


def test_no_cache_key_warning_on_a_blank_host_or_unchanged_settings():
    from deploys.stages.inference_config import cache_key_changes

    me = _settings()
    assert cache_key_changes({}, me) == []
    assert cache_key_changes(None, me) == []
    assert cache_key_changes(_in_use(me), me) == []


@pytest.mark.parametrize(
    ("key", "value", "old", "new"),
    [
        ("kvceph_lmcache_chunk_size", 512, "256", "512"),
        ("kvceph_python_hash_seed", 68, "(set)", "(set, differs)"),  # a secret: never shown
        ("kvceph_tensor_parallel_size", 4, "2", "4"),
        ("kvceph_model", "Qwen/Qwen3-8B", "Qwen/Qwen3-32B", "Qwen/Qwen3-8B"),
    ],
)
def test_cache_key_change_warns_with_host_setting_old_and_new(key, value, old, new):
    from deploys.stages.inference_config import cache_key_changes

    current = _in_use(_settings())
    assert current  # the host runs an engine
    changes = cache_key_changes(current, _settings(**{key: value}))
    assert changes == [
        f"kvceph: @fake/gpu1: cache key setting {key} changes {old} -> {new}: the KV cache "
        "already in bucket lmcache becomes unreachable for cache group Qwen/Qwen3-32B TP=2 "
        "(its objects age out via the lifecycle rule, 7 days)"
    ]


def test_cache_key_hash_algorithm_and_kv_dtype_when_passed():
    from deploys.facts.engine import cache_key_from_argv
    from deploys.stages.inference_config import cache_key_changes

    me = _settings()
    current = {**_in_use(me), "pre_caching_hash_algorithm": "builtin", "kv_dtype": "fp8"}
    changes = cache_key_changes(current, me)
    # In deploys/settings/cache_key.py's order. --kv-cache-dtype is on kvceph's command line,
    # so a dtype change is seen.
    assert [c.split(" changes ")[0].rsplit(" ", 1)[1] for c in changes] == [
        "kvceph_kv_dtype",
        "kvceph_lmcache_hash_algorithm",
    ]
    assert cache_key_from_argv(["x", "serve", "m", "--kv-cache-dtype=fp8"]) == {
        "model": "m",
        "kv_dtype": "fp8",
    }


def test_drift_scenario_logs_cache_key_warnings_only_where_changed():
    rc, out = _run("tests/inventories/fake_drift.py", "--dry")
    assert rc == 0
    warned = sorted(
        __import__("re").findall(r"kvceph: (@fake/\w+): cache key setting (\S+) changes", out)
    )
    assert warned == [
        ("@fake/gaudi1", "kvceph_lmcache_chunk_size"),
        ("@fake/gpu2", "kvceph_python_hash_seed"),
    ]
    rc, out = _run("tests/inventories/fake_converged.py", "--dry")
    assert rc == 0 and "cache key setting" not in out
