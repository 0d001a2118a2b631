"""Stage decisions of inference config and vLLM service that come from facts."""

import json
from pathlib import Path

import pytest
from plan_secrets import plan_secrets

from deploys import preflight
from deploys import settings as s
from deploys.settings.reader import SettingsError
from deploys.stages import inference_config as ic
from deploys.stages import vllm_service as vs

BASE = {"kvceph_s3_endpoint_ip": "10.0.0.5"}
GiB = 1 << 30
FACTS = Path(__file__).resolve().parents[1] / "facts" / "engine.ModelConfig"


def host(groups=("gpu",), **data):
    return s.load({**BASE, **data}, f"{groups[0]}1", groups)


def test_preflight_refuses_a_host_that_cannot_pin_its_buffers_in_one_line():
    # The seed's 100 GB at TP=2 pins 2 x 128 GiB (PyTorch's power of two): over half of 256.
    me = host(kvceph_lmcache_max_local_cpu_size=100)
    with pytest.raises(SettingsError) as err:
        preflight.check_sizing({"gpu1": me}, lambda name: 256 * GiB)
    msg = str(err.value)
    assert "\n" not in msg and msg.startswith("gpu1: kvceph_lmcache_max_local_cpu_size = 100.0")
    assert "pinned as 128 GiB" in msg and "256.0 GiB, over 50% of the host's 256.0 GiB" in msg
    preflight.check_sizing({"gpu1": me}, lambda name: 512 * GiB)  # 256 <= 256: fits
    preflight.check_sizing({"gpu1": me}, lambda name: None)  # unknown RAM: not judged
    # The derived 6.25 GiB pins 8 on each of 2 workers: a 32 GiB host.
    with pytest.raises(SettingsError, match="16.0 GiB"):
        preflight.check_sizing({"gpu1": host()}, lambda name: 31 * GiB)
    preflight.check_sizing({"gpu1": host()}, lambda name: 32 * GiB)


def test_preflight_refuses_sync_loading_with_a_buffer_below_one_request():
    me = host(kvceph_lmcache_max_local_cpu_size=5, kvceph_lmcache_enable_async_loading=False)
    with pytest.raises(SettingsError, match="engine dies"):
        preflight.check_sizing({"gpu1": me}, lambda name: None)


def test_a_model_directory_is_sized_from_its_config_json_on_the_host():
    me = host(kvceph_model="/srv/models/Qwen3-32B")
    fixture = json.loads((FACTS / "qwen3_32b.json").read_text())["fact"]
    got = preflight.resolve_kv_sizes({"gpu1": me}, lambda name, path: fixture)["gpu1"]
    assert got.lmcache.kv_bytes_per_token == 131_072  # TP 2
    assert got.lmcache.kv_source == "/srv/models/Qwen3-32B/config.json"
    with pytest.raises(SettingsError, match="no readable /srv/models/Qwen3-32B/config.json"):
        preflight.resolve_kv_sizes({"gpu1": me}, lambda name, path: None)
    mla = {**fixture, "model_type": "deepseek_v3", "kv_lora_rank": 512}
    with pytest.raises(SettingsError, match="MLA"):
        preflight.resolve_kv_sizes({"gpu1": me}, lambda name, path: mla)


def test_dropped_keys_warned_once():
    ic._warned_dropped.clear()
    me = host(
        kvceph_lmcache_connector="lmcache",  # the stock connector's keys
        kvceph_lmcache_extra_config={"s3_file_prefix": "test", "s3_prefer_http2": False},
    )
    first = ic.dropped_keys_warning(me)
    assert "s3_file_prefix" in first and "ignored by LMCache 0.5.6" in first
    assert ic.dropped_keys_warning(me) is None
    assert ic.dropped_keys_warning(host()) is None


def _acc(nvidia=0, gaudi=0):
    return {
        "nvidia": {"pci_devices": nvidia, "tool": bool(nvidia)},
        "gaudi": {"pci_devices": gaudi, "tool": bool(gaudi)},
    }


def test_accelerator_matches_group():
    assert vs.accelerator_error(host(), _acc(nvidia=8)) is None
    assert vs.accelerator_error(host(("gaudi",)), _acc(gaudi=8)) is None


def test_accelerator_mismatch_is_one_line():
    error = vs.accelerator_error(host(("gaudi",)), _acc(nvidia=8))
    assert error.startswith("gaudi1: group promises gaudi accelerators but the PCI bus")
    assert "shows nvidia" in error
    assert "\n" not in error
    assert "none" in vs.accelerator_error(host(), _acc())


def test_a_model_directory_on_a_host_outside_the_run_is_left_unsized():
    me = host(kvceph_model="/srv/models/Qwen3-32B")
    hosts = preflight.resolve_kv_sizes({"gpu1": me}, lambda name, path: preflight.OUTSIDE_RUN)
    assert hosts["gpu1"].lmcache.kv_bytes_per_token is None
    preflight.check_sizing(hosts, lambda name: preflight.OUTSIDE_RUN)  # nothing to judge
    assert "lmcache.yaml.j2" not in [
        label for label, _ in preflight._renders(hosts["gpu1"], plan_secrets())
    ]
