"""Stage decisions of inference config and vLLM service that come from facts."""

from deploys import inference_config as ic
from deploys import settings as s
from deploys import vllm_service as vs

BASE = {"kvceph_s3_endpoint_ip": "10.0.0.5"}
GiB = 1 << 30


def host(groups=("gpu",), **data):
    return s.load({**BASE, **data}, f"{groups[0]}1", groups)


def test_pinned_ram_warning():
    # The seed's 100 GB at TP=2 pins 200 GiB: too much for a 512 GiB host.
    me = host(kvceph_lmcache_max_local_cpu_size=100)
    warning = ic.pinned_ram_warning(me, 512 * GiB)
    assert "pins 200.0 GiB" in warning and "512.0 GiB" in warning
    assert ic.pinned_ram_warning(host(), 512 * GiB) is None  # default 5 GB x 2
    assert ic.pinned_ram_warning(me, None) is None


def test_dropped_keys_warned_once():
    ic._warned_dropped.clear()
    me = host(kvceph_lmcache_extra_config={"s3_file_prefix": "test", "s3_prefer_http2": False})
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
