"""Unknown kvceph_* keys and secret-looking keys of group_data / the inventory are refused in one
line (with the closest known key); pyinfra's own keys, unit names and the repository's own
inventories pass."""

from __future__ import annotations

import os
import sys
from pathlib import Path
from unittest import mock

import pytest
from pyinfra.api import Config, Inventory, State
from pyinfra.context import ctx_state
from pyinfra_cli.inventory import make_inventory

from deploys import preflight, specs
from deploys import settings as s
from deploys.settings import keys as setting_keys
from deploys.settings.inventory import check_inventory
from deploys.settings.reader import SettingsError

ROOT = Path(__file__).resolve().parents[2]
BASE = {"kvceph_s3_endpoint_ip": "10.0.0.5"}
MECHANISM = (
    "export KVCEPH_VLLM_API_KEY / KVCEPH_HF_TOKEN / KVCEPH_S3_ACCESS_KEY / KVCEPH_S3_SECRET_KEY "
    "or put them in secrets.env (0600; docs/security.md)"
)


def refusal(**data) -> str:
    with pytest.raises(SettingsError) as exc:
        s.load({**BASE, **data}, "gpu1", ("gpu",))
    return str(exc.value)


def test_a_misspelled_key_is_refused_with_the_closest_known_one():
    assert refusal(kvceph_tensor_paralel_size=4) == (
        "gpu1: kvceph_tensor_paralel_size = 4: is not a kvceph setting (it would be ignored "
        "and the default deployed); fix: did you mean kvceph_tensor_parallel_size?"
    )


@pytest.mark.parametrize(
    "key, meant",
    [
        ("KVCEPH_MODEL", "kvceph_model"),  # the controller's spelling
        ("kvceph_max_model_length", "kvceph_max_model_len"),
        ("kvceph_vllm_open_network", "kvceph_vllm_open_networks"),
        ("kvceph_s3_bukcet", "kvceph_s3_bucket"),
    ],
)
def test_typos_name_the_setting_meant(key, meant):
    assert refusal(**{key: 1}).endswith(f"; fix: did you mean {meant}?")


def test_an_unknown_key_without_a_close_one_says_what_to_do():
    assert refusal(kvceph_zzz=True) == (
        "gpu1: kvceph_zzz = True: is not a kvceph setting (it would be ignored and the default "
        "deployed); fix: remove it, or use a key of the group_data reference"
    )


@pytest.mark.parametrize("key", ["HF_TOKEN", "my_api_key", "aws_secret_access_key", "DB_PASSWORD"])
def test_secret_looking_keys_are_refused_whatever_their_prefix(key):
    line = refusal(**{key: "hf_dontshowme0001"})
    assert line == (
        f"gpu1: {key} = '***': looks like a secret (KEY/TOKEN/SECRET/PASSWORD/CREDENTIALS in "
        "its name), and group_data and the inventory are committed; fix: remove it; " + MECHANISM
    )
    assert "dontshowme" not in line


def test_an_unknown_kvceph_key_that_looks_secret_is_refused_as_a_secret():
    line = refusal(kvceph_s3_secret="sk-dontshowme")
    assert "= '***': looks like a secret" in line and "dontshowme" not in line


@pytest.mark.parametrize(
    "key",
    [
        "ssh_password",
        "ssh_key",
        "ssh_key_password",
        "_sudo_password",
        "_su_password",
        "LAB_KV_BYTES_PER_TOKEN",  # group_data/lab.py: a unit, not a secret
        "MY_COST_PER_TOKEN",
        "LAB_MODEL_REVISION",
        "fake_responses",
        "_lab_ceph",
    ],
)
def test_pyinfras_own_keys_units_and_the_operators_keys_pass(key):
    assert s.load({**BASE, key: "x"}, "gpu1", ("gpu",)).engine is not None


def test_known_settings_that_contain_a_secret_word_pass():
    # kvceph_retire_access_key (rotate.py --data) names an access key id, a setting kvceph reads
    assert "kvceph_retire_access_key" in setting_keys.known()
    assert s.load({**BASE, "kvceph_retire_access_key": "AK"}, "gpu1", ("gpu",))


def test_pyinfra_host_data_is_read_with_every_layer():
    # pyinfra's host.data: override (--data), host and group data, merged by .dict()
    inventory = Inventory(
        (["gpu1"], {"kvceph_s3_endpoint_ip": "10.0.0.5"}),
        gpu=(["gpu1"], {"kvceph_tensor_paralel_size": 4}),
    )
    host = inventory.get_host("gpu1")
    assert "kvceph_tensor_paralel_size" in setting_keys.data_keys(host.data)
    with pytest.raises(SettingsError, match="did you mean kvceph_tensor_parallel_size"):
        s.load(host.data, "gpu1", ("gpu",))


def _inventory(path: str, env: dict[str, str]):
    with mock.patch.dict(os.environ, env), ctx_state.use(State(Inventory(([], {})), Config())):
        return make_inventory(str(ROOT / path), cwd=str(ROOT))


@pytest.mark.parametrize(
    "env",
    [
        {},
        {"KVCEPH_LAB_ENGINES": "a,b"},
        {"KVCEPH_LAB_HOSTS": "2"},
        {"KVCEPH_LAB_CEPH": "cephadm"},
    ],
    ids=["lab", "engines", "bench", "cephadm"],
)
def test_the_lab_inventory_passes(env, tmp_path):
    # every host's whole data, ssh_* keys and group_data/lab.py's own names included; http:
    # the https lab reads its CA from the running lab's directory
    base = {"KVCEPH_LAB_DIR": str(tmp_path), "KVCEPH_LAB_S3_SCHEME": "http"}
    for name in ("KVCEPH_LAB_ENGINES", "KVCEPH_LAB_HOSTS", "KVCEPH_LAB_CEPH"):
        base[name] = ""
    inventory = _inventory("inventories/lab.py", {**base, **env})
    hosts = {h.name: s.load(h.data, h.name, list(h.groups)) for h in inventory}
    assert "ssh_key" in setting_keys.data_keys(inventory.get_host("gpu1").data)
    check_inventory(list(hosts.values()))


def test_the_cephadm_lab_has_two_rgw_hosts_each_with_a_vip(tmp_path):
    # issue 39 item 4: rgw2 beside ceph1 in the rgw group, one ingress VIP per rgw host
    # (cephadm's virtual_ips_list), and the engines get every VIP.
    env = {"KVCEPH_LAB_DIR": str(tmp_path), "KVCEPH_LAB_S3_SCHEME": "http"}
    env |= {"KVCEPH_LAB_ENGINES": "", "KVCEPH_LAB_HOSTS": "", "KVCEPH_LAB_CEPH": "cephadm"}
    env["KVCEPH_LAB_INSTANCE"] = "4"
    inventory = _inventory("inventories/lab.py", env)
    hosts = {h.name: s.load(h.data, h.name, list(h.groups)) for h in inventory}
    rgw = [h.name for h in inventory.get_group("rgw")]
    assert rgw == ["ceph1", "rgw2"]
    assert not hosts["rgw2"].is_inference and not hosts["rgw2"].is_ceph_admin
    vips = ("10.213.11.100/24", "10.213.11.101/24")
    assert hosts["ceph1"].rgw.ingress_virtual_ips == vips
    assert specs.ingress_spec(hosts["ceph1"].rgw)["spec"]["virtual_ips_list"] == list(vips)
    assert hosts["gpu1"].s3.endpoint_ips == ("10.213.11.100", "10.213.11.101")
    preflight.check_ingress_hosts(hosts, rgw)  # two VIPs, two hosts: passes
    with pytest.raises(SettingsError, match="2 VIPs for 1 host"):
        preflight.check_ingress_hosts(hosts, rgw[:1])
    # The Pacific lab keeps its one rgw host.
    env["KVCEPH_LAB_CEPH"] = "pacific"
    inventory = _inventory("inventories/lab.py", env)
    assert [h.name for h in inventory.get_group("rgw")] == ["ceph1"]


def test_the_h200_inventory_and_group_data_pass():
    sys.path.insert(0, str(ROOT / "hw" / "h200"))
    import model  # noqa: PLC0415
    import render as h200  # noqa: PLC0415

    _inv, hosts, _groups = h200.load({})
    me = hosts["h200"]
    assert "VLLM_ALLOW_LONG_MAX_MODEL_LEN" in dict(me.engine.extra_env)
    # 131072 over Qwen3-32B's 40960: the model's YaRN config.json and the opt-in allow it
    preflight.check_context_lengths({"h200": me}, lambda _host, _path: model.CONFIG)
