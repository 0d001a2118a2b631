"""kvceph_max_model_len over the model's native context is refused before any change, unless
rope scaling or vLLM's opt-in is configured (deploys/settings/context_length.py, preflight)."""

from __future__ import annotations

import json

import pytest

from deploys import preflight
from deploys import settings as s
from deploys.settings import context_length
from deploys.settings.reader import SettingsError

BASE = {"kvceph_s3_endpoint_ip": "10.0.0.5"}
# Qwen3-32B's published config.json: 40960 positions, no rope scaling.
QWEN = {"model_type": "qwen3", "max_position_embeddings": 40960, "rope_scaling": None}
YARN = {
    **QWEN,
    "max_position_embeddings": 131072,
    "rope_scaling": {"rope_type": "yarn", "factor": 4.0, "original_max_position_embeddings": 32768},
}
FIX = (
    "fix: use at most 40960, or configure rope scaling (config.json rope_scaling, or "
    "--hf-overrides in kvceph_engine_profile.extra_args), or set "
    "VLLM_ALLOW_LONG_MAX_MODEL_LEN=1 in kvceph_extra_env"
)


def load(**data):
    return s.load({**BASE, **data}, "gpu1", ("gpu",))


def check(me, config=None) -> None:
    preflight.check_context_lengths({"gpu1": me}, lambda _host, _path: config)


def test_a_hub_model_over_its_native_context_is_refused_from_the_table():
    with pytest.raises(SettingsError) as e:
        check(load(kvceph_max_model_len=131072))
    assert str(e.value) == (
        "gpu1: kvceph_max_model_len = 131072: over the native context of Qwen/Qwen3-32B, 40960 "
        "tokens (deploys/tier/kv_sizing.py KNOWN_MODELS), and no rope scaling is configured: vLLM "
        f"would refuse to start; {FIX}"
    )


def test_the_native_context_itself_and_less_pass():
    check(load(kvceph_max_model_len=40960))
    check(load(kvceph_max_model_len=32768))
    check(load(kvceph_model="meta-llama/Llama-3.1-8B-Instruct", kvceph_max_model_len=131072))


@pytest.mark.parametrize(
    "data",
    [
        {"kvceph_extra_env": {"VLLM_ALLOW_LONG_MAX_MODEL_LEN": "1"}},
        {"kvceph_extra_env": {"VLLM_ALLOW_LONG_MAX_MODEL_LEN": "true"}},
        {"kvceph_engine_profile": {"env": {"VLLM_ALLOW_LONG_MAX_MODEL_LEN": "1"}}},
        {"kvceph_engine_profile": {"extra_args": ["--hf-overrides", json.dumps(YARN)]}},
        {"kvceph_engine_profile": {"extra_args": ['--hf-overrides={"rope_scaling": {}}']}},
        {
            "kvceph_engine_profile": {
                "extra_args": ["--hf-overrides.rope_scaling.rope_type", "yarn"]
            }
        },
    ],
    ids=["opt-in", "opt-in-true", "profile-env", "hf-overrides", "hf-overrides=", "dotted"],
)
def test_an_operator_configured_long_context_passes(data):
    check(load(kvceph_max_model_len=131072, **data))


def test_an_unrelated_hf_override_or_a_zero_opt_in_does_not():
    for data in (
        {"kvceph_engine_profile": {"extra_args": ["--hf-overrides", '{"torch_dtype": "float16"}']}},
        {"kvceph_extra_env": {"VLLM_ALLOW_LONG_MAX_MODEL_LEN": "0"}},
    ):
        with pytest.raises(SettingsError, match="over the native context"):
            check(load(kvceph_max_model_len=131072, **data))


def test_a_hub_model_kvceph_does_not_know_is_left_to_vllm():
    check(load(kvceph_model="org/unknown-model", kvceph_max_model_len=1 << 20, **_KV))


_KV = {"kvceph_kv_bytes_per_token": 1024}
PATH = {"kvceph_model_source": "path", "kvceph_model_path": "/mnt/models/qwen"}


def test_a_model_directory_is_checked_against_its_config_json():
    with pytest.raises(SettingsError) as e:
        check(load(kvceph_max_model_len=65536, **PATH), QWEN)
    assert str(e.value).startswith(
        "gpu1: kvceph_max_model_len = 65536: over the native context of Qwen/Qwen3-32B, 40960 "
        "tokens (/mnt/models/qwen/config.json), and no rope scaling is configured"
    )
    check(load(kvceph_max_model_len=131072, **PATH), YARN)  # rope scaling in config.json
    # vLLM takes the smallest length field present
    with pytest.raises(SettingsError, match="4096 tokens"):
        check(load(kvceph_max_model_len=8192, **PATH), {"n_positions": 4096, "seq_length": 8192})
    check(load(kvceph_max_model_len=8192, **PATH), {"model_type": "x"})  # no length: unchecked


def test_a_multimodal_config_is_read_from_its_text_config():
    config = {"model_type": "x", "text_config": QWEN}
    with pytest.raises(SettingsError, match="40960 tokens"):
        check(load(kvceph_max_model_len=65536, **PATH), config)


def test_a_mirrored_model_reads_the_controllers_copy_else_the_staged_directory(tmp_path):
    mirror = {"kvceph_model_source": "mirror", "kvceph_model_revision": "0" * 40}
    (tmp_path / "config.json").write_text(json.dumps(YARN))
    me = load(kvceph_max_model_len=131072, kvceph_model_mirror_from=str(tmp_path), **mirror)
    asked = []
    preflight.check_context_lengths({"gpu1": me}, lambda *where: asked.append(where))
    assert asked == []  # the controller's YaRN config.json allows it; no host is asked
    (tmp_path / "config.json").write_text(json.dumps(QWEN))
    with pytest.raises(SettingsError, match=r"on the controller\), and no rope"):
        check(me)
    staged = load(kvceph_max_model_len=131072, **mirror)  # the mirror holds it already
    with pytest.raises(SettingsError, match=r"/config.json\), and no rope"):
        check(staged, QWEN)
    with pytest.raises(SettingsError, match="KNOWN_MODELS"):
        check(staged, None)  # not staged yet: the known model table


def test_hosts_outside_the_run_are_not_read():
    preflight.check_context_lengths(
        {"gpu1": load(kvceph_max_model_len=131072, **PATH)},
        lambda _host, _path: preflight.OUTSIDE_RUN,
    )


@pytest.mark.parametrize(
    "config, native",
    [
        (QWEN, 40960),
        (YARN, None),
        ({"max_position_embeddings": 8192, "rope_parameters": {"rope_type": "default"}}, 8192),
        ({"max_position_embeddings": 8192, "rope_parameters": {"rope_type": "yarn"}}, None),
        ({"max_position_embeddings": True}, None),
    ],
)
def test_native_from_config(config, native):
    assert context_length.native_from_config(config) == native
