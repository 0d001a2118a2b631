"""kvceph_extra_env / a profile's env: a value the env file cannot hold, or a variable kvceph
sets itself, is refused in settings, naming the key (deploys/settings/engine_env.py), not by the
template check."""

from __future__ import annotations

import pytest

from deploys import render
from deploys import settings as s
from deploys.settings import engine_env
from deploys.settings.reader import SettingsError

BASE = {"kvceph_s3_endpoint_ip": "10.0.0.5"}
ENGINES = {
    "kvceph_accelerator_count": 4,
    "kvceph_engines": [
        {"name": "a", "devices": [0, 1], "port": 8000},
        {"name": "b", "devices": [2, 3], "port": 8001},
    ],
}
MIRROR = {"kvceph_model_source": "mirror", "kvceph_model_revision": "0" * 40}


def load(groups=("gpu",), **data):
    return s.load({**BASE, **data}, "gpu1", groups)


def refusal(**data) -> str:
    with pytest.raises(SettingsError) as e:
        load(**data)
    return str(e.value)


def test_a_newline_in_a_value_is_refused_naming_the_key():
    assert refusal(kvceph_extra_env={"NCCL_DEBUG": "INFO\nVLLM_API_KEY=x"}) == (
        "gpu1: kvceph_extra_env = 'NCCL_DEBUG': its value holds a newline, which the engine's "
        "env file (env) cannot carry in a value; fix: write the value on one line, without it"
    )
    assert refusal(kvceph_engine_profile={"env": {"X": "a\0b"}}).startswith(
        "gpu1: kvceph_engine_profile.env = 'X': its value holds a NUL"
    )


def test_the_device_variable_on_a_host_with_engines_is_refused_naming_the_key():
    assert refusal(kvceph_extra_env={"CUDA_VISIBLE_DEVICES": "0,1"}, **ENGINES) == (
        "gpu1: kvceph_extra_env = 'CUDA_VISIBLE_DEVICES': is set by kvceph from each engine's "
        "devices (kvceph_engines); fix: remove it; list each engine's devices in kvceph_engines"
    )
    gaudi = refusal(
        groups=("gaudi",),
        kvceph_tensor_parallel_size=1,
        kvceph_extra_env={"PT_HPU_GPU_MIGRATION": "1", "HABANA_VISIBLE_MODULES": "0"},
        **ENGINES,
    )
    assert gaudi.startswith("gpu1: kvceph_extra_env = 'HABANA_VISIBLE_MODULES': is set by")


def test_the_device_variable_without_listed_devices_is_the_operators():
    # one engine on every accelerator: no device variable of kvceph's, the operator may narrow
    me = load(kvceph_extra_env={"CUDA_VISIBLE_DEVICES": "0,1"})
    assert ("CUDA_VISIBLE_DEVICES", "0,1") in render.environment(me)


@pytest.mark.parametrize(
    "name, data, end",
    [
        ("HOME", {}, "is set by kvceph in every engine's environment; fix: remove it"),
        ("PYTHONHASHSEED", {}, "is set by kvceph in every engine's environment; fix: remove it"),
        ("KVCEPH_DIGEST", {}, "is set by kvceph in every engine's environment; fix: remove it"),
        (
            "PYTHONPATH",
            {},
            "is set by kvceph's engine gate; fix: remove it, or set kvceph_vllm_guard False",
        ),
        (
            "HF_HUB_OFFLINE",
            MIRROR,
            "is set by kvceph for kvceph_model_source mirror; fix: remove it",
        ),
    ],
)
def test_variables_kvceph_sets_are_refused_naming_the_key(name, data, end):
    assert refusal(kvceph_extra_env={name: "1"}, **data) == (
        f"gpu1: kvceph_extra_env = '{name}': {end}"
    )


def test_without_the_gate_its_variables_are_the_operators():
    me = load(kvceph_vllm_guard=False, kvceph_extra_env={"PYTHONPATH": "/opt/x"})
    assert ("PYTHONPATH", "/opt/x") in render.environment(me)


def test_a_variable_in_both_the_profile_and_extra_env_is_refused():
    line = refusal(kvceph_engine_profile={"env": {"X": "1"}}, kvceph_extra_env={"X": "2"})
    assert line == (
        "gpu1: kvceph_extra_env = 'X': is also set by kvceph_engine_profile.env; fix: set it in "
        "one of them"
    )


@pytest.mark.parametrize(
    "groups, data",
    [
        (("gpu",), {}),
        (("gpu",), {**ENGINES, **MIRROR}),
        (("gpu",), {"kvceph_vllm_guard": False}),
        (("gaudi",), {"kvceph_tensor_parallel_size": 1, **ENGINES}),
    ],
)
def test_every_variable_render_sets_is_one_engine_env_refuses(groups, data):
    # engine_env keeps its own list of kvceph's variables: it must cover render's, no more
    me = load(groups=groups, **data)
    managed = set(engine_env.managed(me.engine, me.security.guard))
    for engine in me.engine.engines:
        set_by_kvceph = {
            k
            for k, _ in render.environment(me, "0" * 64, engine)
            if k not in dict(me.engine.extra_env)
        }
        assert set_by_kvceph == managed, engine
