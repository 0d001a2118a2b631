"""kv_sizing: KV bytes per token from the model's shape, and the LMCache values derived from it."""

from __future__ import annotations

import math
import os
from unittest import mock

import pytest

from deploys import render
from deploys import settings as s
from deploys.settings.reader import SettingsError
from deploys.tier import kv_sizing as k

QWEN = k.KNOWN_MODELS["Qwen/Qwen3-32B"]
LLAMA = k.KNOWN_MODELS["meta-llama/Llama-3.3-70B-Instruct"]
BASE = {"kvceph_s3_endpoint_ip": "10.0.0.5"}


def host(group="gpu", **data):
    return s.load({**BASE, **data}, f"{group}1", (group,))


def test_kv_bytes_per_token_of_known_models():
    assert k.kv_bytes_per_token(QWEN, "bfloat16") == 262_144
    assert k.kv_bytes_per_token(QWEN, "fp8") == 131_072
    assert k.kv_bytes_per_token(LLAMA, "bfloat16") == 327_680
    # per worker: the 8 KV heads split over the ranks, replicated beyond 8
    assert k.kv_bytes_per_token(QWEN, "bfloat16", 2) == 131_072
    assert k.kv_bytes_per_token(QWEN, "bfloat16", 16) == k.kv_bytes_per_token(QWEN, "bfloat16", 8)


def test_a_32k_request_at_tp1_is_8_gib():
    sizing = k.derive(
        kv_bytes_per_token=k.kv_bytes_per_token(QWEN, "bfloat16"),
        tensor_parallel_size=1,
        max_model_len=32768,
        chunk_size=256,
        prefill_tokens_per_s=1000,  # a 32.8 s recompute: above the load, no cap
    )
    assert sizing.request_bytes_per_worker == 8 * k.GIB
    # The buffer holds it with headroom: more than the rendered 5 GB that failed on the H200.
    assert sizing.cpu_gib == 10.0
    # 8 GiB at 0.7 GB/s = 12.3 s; x1.5 margin; never below LMCache's own defaults.
    assert sizing.load_seconds == pytest.approx(8 * k.GIB / 0.7e9)
    assert sizing.lookup_timeout_ms == 18_408
    assert sizing.blocking_timeout_secs == 19
    assert sizing.lookup_timeout_ms / 1000 >= sizing.load_seconds


def test_timeouts_are_capped_at_the_longest_requests_recompute():
    # The same 32k request recomputed in 6.55 s at 5,000 tokens/s: a lookup that waits longer
    # for a slow S3 tier costs more than the prefill it saves.
    sizing = k.derive(
        kv_bytes_per_token=k.kv_bytes_per_token(QWEN, "bfloat16"),
        tensor_parallel_size=1,
        max_model_len=32768,
        chunk_size=256,
        prefill_tokens_per_s=5000,
    )
    assert sizing.prefill_seconds == pytest.approx(6.5536)
    assert sizing.lookup_timeout_ms == 6554  # not 18,408, and below LMCache's 10 s default
    assert sizing.blocking_timeout_secs == 7
    # A tiny model: never below 1 s for LMCache's integer blocking timeout.
    tiny = k.derive(
        kv_bytes_per_token=128,
        tensor_parallel_size=1,
        max_model_len=256,
        chunk_size=256,
        prefill_tokens_per_s=5000,
    )
    assert tiny.lookup_timeout_ms == 52 and tiny.blocking_timeout_secs == 1


def test_qwen3_head_dim_is_the_explicit_128_not_hidden_over_heads():
    # Qwen3-32B's config.json: hidden_size 5120 / 64 heads = 80, but head_dim is 128.
    config = {
        "model_type": "qwen3",
        "num_hidden_layers": 64,
        "num_attention_heads": 64,
        "num_key_value_heads": 8,
        "hidden_size": 5120,
        "head_dim": 128,
        "layer_types": ["full_attention"] * 64,
    }
    assert k.shape_from_config(config) == QWEN
    del config["head_dim"]
    assert k.shape_from_config(config).head_dim == 80  # only when the model has no head_dim


@pytest.mark.parametrize(
    ("config", "why"),
    [
        ({"model_type": "deepseek_v3", "kv_lora_rank": 512}, "MLA"),
        ({"model_type": "custom", "kv_lora_rank": 512, "num_hidden_layers": 2}, "MLA"),
        ({"model_type": "qwen3_next"}, "hybrid"),
        ({"model_type": "x", "layer_types": ["full_attention", "sliding_attention"]}, "hybrid"),
        ({"model_type": "x", "layers_block_type": ["mamba", "attention"]}, "hybrid"),
    ],
)
def test_mla_and_hybrid_attention_are_refused_not_guessed(config, why):
    with pytest.raises(k.SizingError, match=why):
        k.shape_from_config(config)


def test_default_nvidia_profile_values():
    me = host()  # Qwen3-32B, TP 2, bf16, max_model_len 40960
    config = render.lmcache_config(me)
    sizing = k.for_host(me)
    assert me.lmcache.kv_bytes_per_token == 131_072
    assert sizing.request_bytes_per_worker == 5 * k.GIB
    assert config["max_local_cpu_size"] == 6.25
    assert config["enable_async_loading"] is True
    # 10 GiB for both workers at 0.7 GB/s: 15.3 s (x1.5: 23 s), longer than recomputing the
    # request (11.4 s on the fitted H200 curve): the timeouts stop at the recompute.
    assert config["lookup_timeout_ms"] == 11_447 == math.ceil(sizing.prefill_seconds * 1000)
    assert config["blocking_timeout_secs"] == 12
    # Loading 10.7 GB at 0.7 GB/s (15.3 s) is slower than an 8.2 s prefill: the plan says so.
    assert any("cannot pay" in w for w in k.warnings(me))


def test_gaudi_profile_values():
    me = host("gaudi")
    config = render.lmcache_config(me)
    assert config["max_local_cpu_size"] == 6.25
    # 2,000 tokens/s: a 20.5 s prefill caps the 23 s margin; slower than the 15.3 s load: no
    # warning.
    assert config["lookup_timeout_ms"] == 20_480
    assert k.warnings(me) == []


def test_fp8_halves_buffer_and_timeouts():
    me = host(kvceph_kv_dtype="fp8")
    assert me.lmcache.kv_bytes_per_token == 65_536
    assert render.lmcache_config(me)["max_local_cpu_size"] == 3.125


def test_unknown_model_asks_for_kv_bytes_per_token_in_one_line():
    with pytest.raises(SettingsError) as err:
        host(kvceph_model="acme/Unknown-7B")
    msg = str(err.value)
    assert "\n" not in msg and "kvceph_kv_bytes_per_token" in msg and "acme/Unknown-7B" in msg
    me = host(kvceph_model="acme/Unknown-7B", kvceph_kv_bytes_per_token=131_072)
    assert me.lmcache.kv_bytes_per_token == 65_536  # whole model / TP 2


def test_known_mla_model_is_refused():
    with pytest.raises(SettingsError, match="MLA"):
        host(kvceph_model="deepseek-ai/DeepSeek-V3")


def test_a_model_directory_waits_for_its_config_json():
    me = host(kvceph_model="/srv/models/qwen")
    assert me.lmcache.kv_bytes_per_token is None and me.lmcache.kv_source == "config.json"
    with pytest.raises(k.SizingError):
        k.for_host(me)


def test_overrides_below_the_derived_values_are_warned_and_sync_with_a_small_buffer_refused():
    me = host(kvceph_lmcache_max_local_cpu_size=5, kvceph_lmcache_lookup_timeout_ms=3000)
    text = " ".join(k.warnings(me))
    assert "Failed to allocate memory block" in text and "still waiting for async lookup" in text
    assert k.refusal_for(me) is None  # async: requests recompute, the engine lives
    sync = host(kvceph_lmcache_max_local_cpu_size=5, kvceph_lmcache_enable_async_loading=False)
    assert "engine dies" in k.refusal_for(sync)
    assert k.refusal_for(host(kvceph_lmcache_enable_async_loading=False)) is None


def test_pinned_ram_rule():
    assert k.pinned_ram_fits(32 * k.GIB, 64 * k.GIB)
    assert not k.pinned_ram_fits(32 * k.GIB + 1, 64 * k.GIB)
    # PyTorch's host allocator pins the next power of two: 6.25 GiB per worker pins 8.
    assert k.pinned_bytes(host()) == 8 * k.GIB * 2


def test_pinned_alloc_rounds_to_a_power_of_two_as_measured_on_the_h200():
    assert k.pinned_alloc_bytes(40) == 64 * k.GIB  # the 128k attempt's OOM record
    assert k.pinned_alloc_bytes(31.5) == 32 * k.GIB  # hw/h200's -pin32 variants
    assert k.pinned_alloc_bytes(32) == 32 * k.GIB
    assert k.pinned_alloc_bytes(0.004) == 1 << 23  # 4.29 MB: 8 MiB


def _lab_hosts():
    """gpu1 and gaudi1 as inventories/lab.py and group_data/{all,lab}.py describe them."""
    import runpy
    from pathlib import Path

    from deploys.settings import group_data

    root = Path(__file__).resolve().parents[2]
    data = group_data.read(("all", "lab"))
    # The lab's CA exists once the lab is up; sizing does not depend on it.
    data.pop("kvceph_s3_ca_bundle", None)
    # The default lab's shape, whatever lab the shell that runs the tests points at (the
    # benchmark's KVCEPH_LAB_HOSTS drops gaudi1, a KVCEPH_LAB_ENGINES lab adds engines).
    with mock.patch.dict(os.environ):
        for name in ("KVCEPH_LAB_HOSTS", "KVCEPH_LAB_ENGINES"):
            os.environ.pop(name, None)
        inventory = runpy.run_path(str(root / "inventories" / "lab.py"))
    gaudi = {k: v for k, v in inventory["gaudi"][0][1].items() if k.startswith("kvceph_")}
    return [
        s.load(data, "gpu1", ("gpu", "lab")),
        s.load({**data, **gaudi}, "gaudi1", ("gaudi", "lab")),
    ]


@pytest.mark.parametrize("which", ["nvidia", "gaudi", "lab-gpu", "lab-gaudi"])
def test_rendered_values_fit_a_max_length_request_at_the_conservative_bandwidth(which):
    me = {"nvidia": lambda: host(), "gaudi": lambda: host("gaudi")}.get(which)
    me = me() if me else _lab_hosts()[which == "lab-gaudi"]
    sizing, config = k.for_host(me), render.lmcache_config(me)
    assert sizing.max_tokens >= me.engine.max_model_len
    assert config["max_local_cpu_size"] * k.GIB >= sizing.request_bytes_per_worker
    assert config["enable_async_loading"] is True
    # A load runs to its end, or to the recompute it would otherwise save.
    enough = min(sizing.load_seconds, sizing.prefill_seconds)
    assert config["lookup_timeout_ms"] / 1000 >= enough
    assert config["blocking_timeout_secs"] >= enough
    assert k.warnings(me) == [] or which == "nvidia"  # only the tier-cannot-pay note there
