"""kvceph_engines and kvceph_restart_batch: the defaults keep today's single vllm.service; every
bad input is one line naming host, key and fix, before any host is touched."""

import pytest

from deploys import paths, preflight, render
from deploys import settings as s
from deploys.settings import engine_list
from deploys.settings.engine_list import Engine
from deploys.settings.inventory import check_inventory
from deploys.settings.reader import SettingsError
from deploys.settings.secrets import S3Credentials, Secret

BASE = {"kvceph_s3_endpoint_ip": "10.0.0.5"}
GiB = 1 << 30
CREDS = S3Credentials(Secret("AKIAPLAN"), Secret("plan-secret-value"), "test")
TWO = [
    {"name": "engine-a", "devices": [0, 1], "port": 8000},
    {"name": "engine-b", "devices": [2, 3], "port": 8001},
]


def load(groups=("gpu",), host="gpu1", **data):
    return s.load({**BASE, **data}, host, groups)


def refused(**data) -> str:
    with pytest.raises(SettingsError) as err:
        load(**data)
    message = str(err.value)
    assert "\n" not in message and "; fix: " in message
    return message


def test_default_is_one_engine_on_every_accelerator_at_the_configured_port():
    assert load().engine.engines == (Engine("vllm", None, 8000),)
    assert load(kvceph_vllm_port=9000).engine.engines == (Engine("vllm", None, 9000),)
    e = load().engine.engines[0]
    assert (e.unit, e.env_name) == ("vllm.service", "vllm.env")


def test_default_engine_renders_todays_files_byte_for_byte():
    # Existing hosts keep vllm.service and vllm.env: nothing to migrate, nothing restarts.
    me = load()
    explicit = load(kvceph_engines=[{"name": "vllm", "port": 8000}])
    assert render.unit(me) == render.unit(explicit)
    assert render.env_file(me, "0" * 64) == render.env_file(explicit, "0" * 64)
    assert "CUDA_VISIBLE_DEVICES" not in render.env_file(me)
    assert render.env_path(me.engine.engines[0]) == paths.ENV_PATH
    assert render.unit_path(me.engine.engines[0]) == paths.UNIT_PATH


def test_named_engines_get_their_own_unit_env_devices_and_port():
    me = load(kvceph_accelerator_count=4, kvceph_engines=TWO)
    a, b = me.engine.engines
    assert (a.unit, render.env_path(a)) == (
        "vllm-engine-a.service",
        "/etc/kvceph/vllm-engine-a.env",
    )
    unit_b = render.unit(me, b)
    assert "EnvironmentFile=/etc/kvceph/vllm-engine-b.env" in unit_b
    assert "--port 8001" in unit_b and "(kvceph, engine-b, Qwen/Qwen3-32B)" in unit_b
    assert dict(render.environment(me, None, a))["CUDA_VISIBLE_DEVICES"] == "0,1"
    assert dict(render.environment(me, None, b))["CUDA_VISIBLE_DEVICES"] == "2,3"
    # Each engine's digest covers its own unit and env file.
    assert render.digest(me, CREDS, a) != render.digest(me, CREDS, b)


def test_gaudi_engines_are_limited_with_habana_visible_modules():
    me = load(
        groups=("gaudi",),
        host="gaudi1",
        kvceph_accelerator_count=8,
        kvceph_tensor_parallel_size=4,
        kvceph_engines=[
            {"name": "a", "devices": [0, 1, 2, 3], "port": 8000},
            {"name": "b", "devices": [4, 5, 6, 7], "port": 8001},
        ],
    )
    env = dict(render.environment(me, None, me.engine.engines[1]))
    assert env["HABANA_VISIBLE_MODULES"] == "4,5,6,7"
    assert "CUDA_VISIBLE_DEVICES" not in env


@pytest.mark.parametrize(
    "engines,expected",
    [
        (
            [
                {"name": "a", "devices": [0, 1], "port": 8000},
                {"name": "b", "devices": [1, 2], "port": 8001},
            ],
            "gpu1: kvceph_engines = 'b': device 1 also belongs to engine a",
        ),
        (
            [
                {"name": "a", "devices": [0, 1], "port": 8000},
                {"name": "b", "devices": [2, 3], "port": 8000},
            ],
            "gpu1: kvceph_engines = 8000: port used by engines a and b",
        ),
        (
            [{"name": "a", "devices": [0], "port": 8000}],
            "gpu1: kvceph_engines = 'a': kvceph_tensor_parallel_size 2 exceeds its 1 device(s) [0]",
        ),
        (
            [{"name": "a", "devices": [3, 4], "port": 8000}],
            "gpu1: kvceph_engines[0].devices = [3, 4]: device(s) [4] outside the host's 4",
        ),
        (
            [
                {"name": "a", "devices": [0, 1], "port": 8000},
                {"name": "a", "devices": [2, 3], "port": 8001},
            ],
            "gpu1: kvceph_engines = 'a': engine name used twice",
        ),
        (
            [{"name": "a", "port": 8000}, {"name": "b", "devices": [2, 3], "port": 8001}],
            "gpu1: kvceph_engines = 'a': engine without devices on a host with several engines",
        ),
        ([{"name": "A b", "port": 8000}], "gpu1: kvceph_engines[0].name = 'A b': must match"),
        ([{"name": "a", "port": 0}], "gpu1: kvceph_engines[0].port = 0: must be a port"),
        ([{"name": "a", "port": 8000, "gpus": [0]}], "unknown engine keys"),
        ([{"name": "a", "devices": [0, 0], "port": 8000}], "lists a device twice"),
        ([], "lists no engine"),
    ],
)
def test_bad_engine_lists_are_one_line_each(engines, expected):
    assert expected in refused(kvceph_accelerator_count=4, kvceph_engines=engines)


def test_devices_need_the_accelerator_count():
    message = refused(kvceph_engines=TWO)
    assert message.startswith("gpu1: kvceph_accelerator_count = None: kvceph_engines[0].devices")


def test_a_lone_engine_on_listed_devices_is_fine():
    me = load(
        kvceph_accelerator_count=8, kvceph_engines=[{"name": "a", "devices": [4, 5], "port": 8000}]
    )
    assert me.engine.engines[0].devices == (4, 5)


# --- LMCache RAM: every engine of the host pins its buffers ----------------------------------


def test_pinned_ram_refusal_counts_every_engine_of_the_host():
    one = load()
    two = load(kvceph_accelerator_count=4, kvceph_engines=TWO)
    # The derived 6.25 GiB pins 8 (a power of two) x 2 workers = 16 GiB per engine: one fits
    # 32 GiB, two do not.
    preflight.check_sizing({"gpu1": one}, lambda name: 32 * GiB)
    with pytest.raises(SettingsError) as err:
        preflight.check_sizing({"gpu1": two}, lambda name: 32 * GiB)
    message = str(err.value)
    assert "of 2 engines x 2 workers, pinned as 8 GiB" in message and "\n" not in message
    assert "= 32.0 GiB, over" in message
    preflight.check_sizing({"gpu1": two}, lambda name: 64 * GiB)


# --- The restart roll --------------------------------------------------------------------------


def test_restart_batch_is_a_count_or_a_percentage():
    assert load().engine.restart_batch == 1
    assert load(kvceph_restart_batch=3).engine.restart_batch == 3
    assert load(kvceph_restart_batch="25%").engine.restart_batch == "25%"
    for bad in (0, "0%", "101%", "two", 1.5, True):
        assert "kvceph_restart_batch" in refused(kvceph_restart_batch=bad)
    assert engine_list.batch_size("25%", 32) == 8
    assert engine_list.batch_size("10%", 4) == 1  # at least one
    assert engine_list.batch_size(2, 32) == 2


def _fleet(**every):
    return [
        load(groups=("ceph_admin",), host="admin", **every),
        load(host="gpu1", kvceph_accelerator_count=4, kvceph_engines=TWO, **every),
        load(host="gpu2", **every),
        load(groups=("gaudi",), host="gaudi1", kvceph_tensor_parallel_size=1, **every),
    ]


def test_a_batch_of_two_of_three_engines_is_fine_but_three_takes_the_whole_group():
    check_inventory(_fleet(kvceph_restart_batch=2))
    with pytest.raises(SettingsError) as err:
        check_inventory(_fleet(kvceph_restart_batch=3))
    message = str(err.value)
    assert message.startswith("inventory: kvceph_restart_batch = 3: 3 engines at a time")
    assert "cache group Qwen/Qwen3-32B TP=2" in message
    assert "kvceph_restart_whole_group = True" in message and "\n" not in message
    # 75% of the inventory's 4 engines is 3: refused the same way.
    with pytest.raises(SettingsError, match="all 3 engines of cache group"):
        check_inventory(_fleet(kvceph_restart_batch="75%"))
    # The opt-in, named in the refusal, accepts it.
    check_inventory(_fleet(kvceph_restart_batch=3, kvceph_restart_whole_group=True))
    # gaudi1 alone in its group: down while it restarts whatever the batch, not refused.
    check_inventory(_fleet())


def test_the_roll_is_one_for_the_whole_run():
    hosts = _fleet()
    hosts[2] = load(host="gpu2", kvceph_restart_batch=2)
    with pytest.raises(SettingsError, match="gpu2: kvceph_restart_batch = 2 differs from gpu1"):
        check_inventory(hosts)
